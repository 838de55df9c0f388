package streams

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestStewardsAnnounceAFewAtATime: a process's candidates of one identity
// announce at one instant, and their stewards' passes run a few at a time
// (stewardPasses), not on a goroutine each. Renewals in flight hold
// goroutines of their own meanwhile, so it counts the goroutines the
// stewards made, by what made them.
func TestStewardsAnnounceAFewAtATime(t *testing.T) {
	const n = 400
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	createBucket(t, nc, bucketConfig(time.Second)) // announcements every 2s
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var won, ended atomic.Int32
	for i := range n {
		e, err := NewElection("a", fmt.Sprintf("k%d", i), js, WithMinTerm(100*time.Millisecond), OnWon(func() { won.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		e.Launch(ctx, func(error) { ended.Add(1) })
	}
	defer func() {
		stop()
		eventually(t, 20*time.Second, "every election to end", func() bool { return ended.Load() == n })
	}()
	eventually(t, 20*time.Second, "every election to lead", func() bool { return won.Load() == n })
	// A new leader asks who stands, on a goroutine of its own, within
	// half its minimum term (50ms) of winning, for 250ms at most: those
	// questions are over before the count.
	time.Sleep(time.Second)
	base := runtime.NumGoroutine()
	peak, samples := 0, 0
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); { // two announcement instants and more
		if runtime.NumGoroutine() < base+stewardPasses.max/2 {
			runtime.Gosched()
			continue
		}
		samples++
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		passes := strings.Count(b.String(), "created by github.com/conclave-io/conclave/providers/election/streams.(*steward).") +
			strings.Count(b.String(), "created by github.com/conclave-io/conclave/providers/election/streams.(*turns).run")
		peak = max(peak, passes)
	}
	if samples == 0 {
		t.Fatalf("%d candidates never held %d goroutines more than at rest (%d) in 5s: the announcements did not come", n, stewardPasses.max/2, base)
	}
	if peak > stewardPasses.max+32 { // a late question of who stands, or a few
		t.Errorf("%d candidates announcing together made up to %d goroutines for their stewards' passes, want at most %d and a few", n, peak, stewardPasses.max)
	}
	t.Logf("at rest %d goroutines; at most %d for the stewards' passes in %d samples", base, peak, samples)
}
