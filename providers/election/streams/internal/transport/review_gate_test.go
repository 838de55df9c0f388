package transport

import (
	"context"
	"testing"
	"time"
)

// TestGateSlowBrokerStillServesUrgentFirst: once the moving average of
// request times passes half a request's timeout (a broker slowed down, or
// requests that timed out there), every request that has to wait for a
// turn is refused at its turn, with most of its time left, urgent ones
// included, while one that finds a free slot goes at once whatever its
// class. A leader's renewal queued behind 64 reads is refused, and the read
// arriving just after it takes the slot its refusal left.
//
// REVIEW: this documents a liveness weakness (renewals refused under
// load, leader churn), not a safety one; it fails on the reviewed code.
func TestGateSlowBrokerStillServesUrgentFirst(t *testing.T) {
	g := &gate{limit: 1}
	timeout := time.Second
	g.took = timeout * 6 / 10 // requests took 0.6 of a timeout lately
	leave, err := g.enter(context.Background(), Routine)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u := enterAsync(t, ctx, g, Urgent)
	eventually(t, 5*time.Second, "the renewal to wait", func() bool { return waiters(g, Urgent) == 1 })
	leave() // a slot frees at once: the renewal has nearly all its time left
	var urgent func()
	select {
	case urgent = <-u:
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal got no answer")
	}
	if urgent == nil {
		// And a routine read now takes the free slot at once.
		rl, rerr := g.enter(context.Background(), Routine)
		if rerr == nil {
			rl()
		}
		t.Fatalf("the renewal was refused with ~%v of its %v left (moving average %v); a read that came after it was let in: %v", timeout, timeout, g.took, rerr == nil)
	}
	urgent()
}
