package config

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// envMap returns a lookup function reading from m.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// parseText parses text as a file named test.conf with env as the environment.
func parseText(t *testing.T, text string, env map[string]string) (*Config, error) {
	t.Helper()
	return ParseWithEnv(strings.NewReader(text), "test.conf", envMap(env))
}

// mustParse parses text and fails the test on error.
func mustParse(t *testing.T, text string, env map[string]string) *Config {
	t.Helper()
	c, err := parseText(t, text, env)
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	return c
}

// flatten returns the errors joined into err, in order.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []error
		for _, e := range j.Unwrap() {
			all = append(all, flatten(e)...)
		}
		return all
	}
	return []error{err}
}

// lineErrors returns the *LineError values joined into err; it fails the test
// if err holds anything else.
func lineErrors(t *testing.T, err error) []*LineError {
	t.Helper()
	var out []*LineError
	for _, e := range flatten(err) {
		var le *LineError
		if !errors.As(e, &le) {
			t.Fatalf("error %q (%T) is not a *LineError", e, e)
		}
		out = append(out, le)
	}
	return out
}

// keyNames returns the names of keys.
func keyNames(keys []Key) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return names
}
