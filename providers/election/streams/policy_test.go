package streams

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestHandOverPolicy: where leadership should go, by priority, health and
// the minimum term, as the steward and the simulator ask it.
func TestHandOverPolicy(t *testing.T) {
	const minTerm = 10 * time.Second
	cand := func(id, inst string, prio int, healthy bool) standing.Candidate {
		return standing.Candidate{Identity: id, Instance: inst, Priority: prio, Healthy: healthy}
	}
	self := cand("vm", "w1", 1, true)
	sick := cand("vm", "w1", 1, false)
	for _, tc := range []struct {
		name     string
		self     standing.Candidate
		roll     []standing.Candidate
		held     time.Duration
		moveTo   string // instance, "" for no move
		wait     time.Duration
		succeeds string // successorOf's instance, "" for none
	}{
		{"alone", self, nil, time.Hour, "", 0, ""},
		{"equal priority never moves", self, []standing.Candidate{cand("b", "b1", 1, true)}, time.Hour, "", 0, "b1"},
		{"a higher priority after the minimum term", self, []standing.Candidate{cand("c", "c1", 2, true), cand("b", "b1", 1, true)}, minTerm, "c1", 0, "c1"},
		{"a higher priority waits out the minimum term", self, []standing.Candidate{cand("c", "c1", 2, true)}, 4 * time.Second, "", 6 * time.Second, "c1"},
		{"an unhealthy higher priority is passed over", self, []standing.Candidate{cand("c", "c1", 2, false), cand("b", "b1", 0, true)}, time.Hour, "", 0, "b1"},
		{"a leaving one is passed over", self, []standing.Candidate{{Identity: "c", Instance: "c1", Priority: 2, Healthy: true, Leaving: true}}, time.Hour, "", 0, ""},
		{"unhealthy moves to any healthy one", sick, []standing.Candidate{cand("b", "b1", 0, false), cand("a", "a1", 0, true)}, time.Hour, "a1", 0, "a1"},
		{"unhealthy moves to a copy of its identity", sick, []standing.Candidate{cand("vm", "w2", 0, true)}, time.Hour, "w2", 0, "w2"},
		{"never to itself", sick, []standing.Candidate{cand("vm", "w1", 5, true)}, time.Hour, "", 0, ""},
		{"unhealthy with nobody healthy keeps leading", sick, []standing.Candidate{cand("b", "b1", 9, false)}, time.Hour, "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			standing.Rank(tc.roll)
			to, wait, ok := moveOf(tc.self, tc.roll, tc.held, minTerm)
			if got := map[bool]string{true: to.Instance}[ok]; got != tc.moveTo || wait != tc.wait {
				t.Errorf("moveOf = %q (ok %v), wait %v; want %q, wait %v", to.Instance, ok, wait, tc.moveTo, tc.wait)
			}
			s, ok := successorOf(tc.self, tc.roll)
			if got := map[bool]string{true: s.Instance}[ok]; got != tc.succeeds {
				t.Errorf("successorOf = %q (ok %v), want %q", s.Instance, ok, tc.succeeds)
			}
		})
	}
}
