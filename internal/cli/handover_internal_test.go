package cli

import (
	"strings"
	"testing"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestCandidatesNamed: stand-down --to names a candidate as
// identity/instance (as info lists copies that share an identity), as a
// bare identity or as a bare instance; a name that could mean candidates
// of different identities is refused with the candidates it names. The
// leader is asked for what names the one candidate meant.
func TestCandidatesNamed(t *testing.T) {
	t.Parallel()
	stands := []standing.Candidate{
		{Identity: "vm", Instance: "worker-1", Leader: true},
		{Identity: "vm", Instance: "worker-2"},
		{Identity: "vm", Instance: "worker-7"},
		{Identity: "db", Instance: "worker-2"},
		{Identity: "db", Instance: "main"},
		{Identity: "main", Instance: "x1"},
	}
	for _, tc := range []struct {
		to, ask  string
		matches  []string
		problems string // the error's text, "" for none
	}{
		{to: "vm/worker-7", ask: "vm/worker-7", matches: []string{"vm/worker-7"}},
		{to: "worker-7", ask: "worker-7", matches: []string{"vm/worker-7"}},
		{to: "vm", ask: "vm", matches: []string{"vm/worker-2", "vm/worker-7"}},
		// The leader is asked for identity/instance, which names one
		// candidate though its instance alone names two, or an identity.
		{to: "db/worker-2", ask: "db/worker-2", matches: []string{"db/worker-2"}},
		{to: "db/main", ask: "db/main", matches: []string{"db/main"}},
		{to: "worker-2", problems: "--to worker-2 is ambiguous in demo: it names vm/worker-2, db/worker-2: name one candidate as identity/instance"},
		{to: "main", problems: "--to main is ambiguous in demo: it names main/x1, db/main"},
		{to: "worker-1"},
		{to: "vm/worker-9"},
	} {
		matches, ask, err := candidatesNamed(tc.to, "demo", stands)
		var got []string
		for _, c := range matches {
			got = append(got, named(c.Identity, c.Instance))
		}
		switch {
		case tc.problems != "" && (err == nil || !strings.Contains(err.Error(), tc.problems)):
			t.Errorf("--to %s: error %v, want one saying %q", tc.to, err, tc.problems)
		case tc.problems == "" && err != nil:
			t.Errorf("--to %s: %v", tc.to, err)
		case tc.problems == "" && (strings.Join(got, " ") != strings.Join(tc.matches, " ") || (len(got) > 0 && ask != tc.ask)):
			t.Errorf("--to %s names %v, asking for %q; want %v, asking for %q", tc.to, got, ask, tc.matches, tc.ask)
		}
	}
}
