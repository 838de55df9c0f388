package streams

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestRollKeepsEachCandidatesLatestWord: the roll keeps one entry per
// candidate (its instance and identity), the latest word of each, forgets
// one that leaves or falls silent, and lists them ranked.
func TestRollKeepsEachCandidatesLatestWord(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	r := newRoll()
	r.learn(t0,
		standing.Candidate{Identity: "vm", Instance: "w2"},
		standing.Candidate{Identity: "vm", Instance: "w1"},
		standing.Candidate{Identity: "old"}, // a version with no instance
		standing.Candidate{Identity: "vm", Instance: "w1", Priority: 5, Healthy: true},
	)
	got := r.list()
	if len(got) != 3 || got[0].Instance != "w1" || got[0].Priority != 5 || !got[0].Healthy {
		t.Fatalf("roll %+v: want w1's latest word (priority 5) first of three", got)
	}
	if h, u := r.count(); h != 1 || u != 2 {
		t.Errorf("count %d healthy, %d unhealthy; want 1 and 2", h, u)
	}
	r.learn(t0.Add(time.Second), standing.Candidate{Identity: "vm", Instance: "w2", Leaving: true},
		standing.Candidate{Identity: "gone", Leaving: true}) // never heard: nothing to forget
	if got := r.list(); len(got) != 2 || got[0].Instance != "w1" || got[1].Identity != "old" {
		t.Fatalf("after w2 left: %+v, want w1 and old", got)
	}
	r.learn(t0.Add(3*time.Second), standing.Candidate{Identity: "vm", Instance: "w1"})
	if next := r.expire(t0.Add(2*time.Second), 2*time.Second); !next.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("next expiry %v, want w1's at t0+5s", next.Sub(t0))
	}
	if got := r.list(); len(got) != 1 || got[0].Instance != "w1" {
		t.Fatalf("after old fell silent: %+v, want w1 alone", got)
	}
	if next := r.expire(t0.Add(5*time.Second), 2*time.Second); !next.IsZero() || len(r.list()) != 0 {
		t.Errorf("after every candidate fell silent: next %v, roll %+v; want none", next, r.list())
	}
}
