package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseDuration: the one duration syntax of the configuration files and
// the CLI's flags: whole seconds or a Go duration, and an error matching
// ErrInvalidValue that says what to write otherwise.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5": 5 * time.Second, "0": 0, "-3": -3 * time.Second, "90": 90 * time.Second,
		"1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond, "1.5s": 1500 * time.Millisecond,
		"5000000000": 5000000000 * time.Second, // beyond 32 bits, as the CLI's flags once refused
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"5 minutes":            `"5 minutes" is not a duration: use a Go duration such as 30s, 500ms or 1m30s, or whole seconds such as 5`,
		"":                     `"" is not a duration`,
		"1.5":                  `"1.5" is not a duration`,
		"99999999999999999999": `"99999999999999999999" is not a duration`,
		"9999999999999":        `"9999999999999" seconds is too long a duration: use at most 9223372036 seconds`,
	} {
		_, err := ParseDuration(in)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalidValue) {
			t.Errorf("ParseDuration(%q) error %v, want ErrInvalidValue saying %q", in, err, want)
		}
	}
}
