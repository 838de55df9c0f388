package shardplan

import (
	"slices"
	"testing"
	"time"
)

// TestDecide: a member stands for the shards the assignment gives it,
// stops standing for the others, and hands a shard it holds over only to a
// member that stands for it: after the minimum hold when rebalancing, at
// once when it leaves.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a := Member{Identity: "a", Weight: 1, Healthy: true}
	b := Peer{Member: Member{Identity: "b", Weight: 1, Healthy: true}}

	// Alone, a holds shards 0 and 1 of 4 and stands for 2 and 3.
	st := State{N: 4, Self: a, Held: map[int]time.Time{0: now, 1: now}, Running: map[int]bool{0: false, 1: false}, Now: now}
	p := Decide(st)
	if !slices.Equal(p.Start, []int{2, 3}) || len(p.Stop) != 0 || len(p.HandOver) != 0 {
		t.Fatalf("alone: start %v, stop %v, hand over %v; want start [2 3] only", p.Start, p.Stop, p.HandOver)
	}

	// b joins holding nothing and standing for nothing: a keeps what it
	// holds and hands nothing over yet, and stops standing for the shards
	// the assignment now gives b.
	st.Peers = []Peer{b}
	st.Running = map[int]bool{0: false, 1: false, 2: false, 3: false}
	st.Held = map[int]time.Time{0: now, 1: now, 2: now}
	p = Decide(st)
	mine := 0
	for _, d := range p.Desired {
		if d == "a" {
			mine++
		}
	}
	if mine != 2 || len(p.HandOver) != 0 || len(p.Start) != 0 {
		t.Fatalf("b joined, standing for nothing: desired %v, start %v, hand over %v", p.Desired, p.Start, p.HandOver)
	}
	if !slices.Contains(p.Stop, 3) {
		t.Fatalf("b joined: a should stop standing for shard 3, given to b (desired %v): stop %v", p.Desired, p.Stop)
	}

	// Once b stands for the shard of a's it is given, a hands it over,
	// but not within the minimum hold, which WakeAt says when ends.
	var given int
	for s, d := range p.Desired {
		if d == "b" && s != 3 {
			given = s
		}
	}
	st.Peers[0].Standing = []int{given}
	st.MinHold = time.Second
	p = Decide(st)
	if len(p.HandOver) != 0 || !p.WakeAt.Equal(now.Add(time.Second)) {
		t.Fatalf("within the minimum hold: hand over %v, wake at %v", p.HandOver, p.WakeAt)
	}
	st.Now = now.Add(time.Second)
	p = Decide(st)
	if want := []Move{{Shard: given, To: "b", Reason: Rebalance}}; !slices.Equal(p.HandOver, want) {
		t.Fatalf("after the minimum hold: hand over %v, want %v", p.HandOver, want)
	}

	// Leaving, a hands over at once whatever b stands for, and stops no
	// election: one winning as it stops would release its shard.
	st.Leaving, st.Now = true, now
	st.Peers[0].Standing = []int{0, 1, 2, 3}
	p = Decide(st)
	if len(p.HandOver) != 3 || len(p.Stop) != 0 || p.HandOver[0].Reason != Leave {
		t.Fatalf("leaving: hand over %v, stop %v; want shards 0, 1 and 2 to b for leave", p.HandOver, p.Stop)
	}
}
