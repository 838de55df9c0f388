package standing

import "testing"

// TestSubjects: the subjects are what Conclave's candidates of every
// version talk on, and what per-election permissions allow.
func TestSubjects(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{CandidatesSubject("CHORIA_LEADER_ELECTION", "app-a.cron"), "conclave.candidates.CHORIA_LEADER_ELECTION.app-a.cron"},
		{AnnounceSubject("B", "k"), "conclave.announce.B.k"},
		{HandOverSubject("B", "k.>"), "conclave.handover.B.k.>"},
	} {
		if tc.got != tc.want {
			t.Errorf("subject %q, want %q", tc.got, tc.want)
		}
	}
}
