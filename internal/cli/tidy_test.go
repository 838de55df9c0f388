package cli

import "testing"

// TestTidyMessage: the stutter that wrapping leaves in an error's text,
// as users met it, is removed; other text is left alone.
func TestTidyMessage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"conclave: cannot log in to the broker: nats: Authorization Violation":           "cannot log in to the broker: nats: Authorization Violation",
		"election billing: election billing: election: permission denied: subject $KV.x": "election billing: permission denied: subject $KV.x",
		`election name: election: invalid key: "a b" contains ' '`:                       `election name: invalid key: "a b" contains ' '`,
		"connecting to x: conclave: cannot log in":                                       "connecting to x: conclave: cannot log in",
		"no election \"foo\" in B (elections: a, b)":                                     "no election \"foo\" in B (elections: a, b)",
		"a: b\nUsage: a: a":     "a: b\nUsage: a: a",
		"election: invalid key": "election: invalid key",
	} {
		if got := tidyMessage(in); got != want {
			t.Errorf("tidyMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
