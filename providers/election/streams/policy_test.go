package streams

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestHandOverPolicy: where leadership should go, by priority, health and
// the minimum term, and whom a stop offers the key to, as the steward and
// the simulator ask decide.
func TestHandOverPolicy(t *testing.T) {
	t.Parallel()
	const minTerm = 10 * time.Second
	cand := func(id, inst string, prio int, healthy bool) standing.Candidate {
		return standing.Candidate{Identity: id, Instance: inst, Priority: prio, Healthy: healthy}
	}
	leaving := func(c standing.Candidate) standing.Candidate { c.Leaving = true; return c }
	self := cand("vm", "w1", 1, true)
	sick := cand("vm", "w1", 1, false)
	for _, tc := range []struct {
		name     string
		self     standing.Candidate
		roll     []standing.Candidate
		leading  bool
		held     time.Duration
		stale    bool   // the roll is what announcements told, not answers
		moveTo   string // instance, "" for no move
		confirm  bool   // ask who stands before moving
		wait     time.Duration
		succeeds string // the successor's instance, "" for none
	}{
		{name: "alone", self: self, leading: true, held: time.Hour},
		{name: "equal priority never moves", self: self, roll: []standing.Candidate{cand("b", "b1", 1, true)}, leading: true, held: time.Hour, succeeds: "b1"},
		{name: "a higher priority after the minimum term", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true), cand("b", "b1", 1, true)}, leading: true, held: minTerm, moveTo: "c1", succeeds: "c1"},
		{name: "a higher priority heard of is asked about first", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true)}, leading: true, held: minTerm, stale: true, confirm: true, succeeds: "c1"},
		{name: "a higher priority waits out the minimum term", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true)}, leading: true, held: 4 * time.Second, wait: 6 * time.Second, succeeds: "c1"},
		{name: "the minimum term holds before asking", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true)}, leading: true, held: 9 * time.Second, stale: true, wait: time.Second, succeeds: "c1"},
		{name: "a standby moves nothing", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true)}, held: time.Hour, succeeds: "c1"},
		{name: "an unhealthy higher priority is passed over", self: self, roll: []standing.Candidate{cand("c", "c1", 2, false), cand("b", "b1", 0, true)}, leading: true, held: time.Hour, succeeds: "b1"},
		{name: "a leaving one is passed over", self: self, roll: []standing.Candidate{leaving(cand("c", "c1", 2, true))}, leading: true, held: time.Hour},
		{name: "unhealthy moves to any healthy one", self: sick, roll: []standing.Candidate{cand("b", "b1", 0, false), cand("a", "a1", 0, true)}, leading: true, held: time.Hour, moveTo: "a1", succeeds: "a1"},
		{name: "unhealthy waits out the minimum term too", self: sick, roll: []standing.Candidate{cand("a", "a1", 0, true)}, leading: true, held: time.Second, wait: 9 * time.Second, succeeds: "a1"},
		{name: "unhealthy moves to a copy of its identity", self: sick, roll: []standing.Candidate{cand("vm", "w2", 0, true)}, leading: true, held: time.Hour, moveTo: "w2", succeeds: "w2"},
		{name: "never to itself", self: sick, roll: []standing.Candidate{cand("vm", "w1", 5, true)}, leading: true, held: time.Hour},
		{name: "unhealthy with nobody healthy keeps leading", self: sick, roll: []standing.Candidate{cand("b", "b1", 9, false)}, leading: true, held: time.Hour},
		{name: "without a minimum term at once", self: self, roll: []standing.Candidate{cand("c", "c1", 2, true)}, leading: true, moveTo: "c1", succeeds: "c1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			standing.Rank(tc.roll)
			min := minTerm
			if tc.name == "without a minimum term at once" {
				min = 0
			}
			p := decide(policyInput{self: tc.self, roll: tc.roll, fresh: !tc.stale, leading: tc.leading, held: tc.held, minTerm: min})
			if got := map[bool]string{true: p.to.Instance}[p.moving]; got != tc.moveTo || p.confirm != tc.confirm || p.wait != tc.wait {
				t.Errorf("decide moves to %q (moving %v), confirm %v, wait %v; want %q, confirm %v, wait %v", p.to.Instance, p.moving, p.confirm, p.wait, tc.moveTo, tc.confirm, tc.wait)
			}
			if p.successor.instance != tc.succeeds || p.successor.instance != "" && p.successor.to == "" {
				t.Errorf("decide's successor = %+v, want instance %q", p.successor, tc.succeeds)
			}
			if p.moving && (!p.to.Healthy || sameAs(p.to, tc.self) || p.why == "") {
				t.Errorf("decide moves to %+v (%q)", p.to, p.why)
			}
		})
	}
}
