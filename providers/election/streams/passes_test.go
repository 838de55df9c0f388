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

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestStewardsAnnounceAFewAtATime: a process's candidates of one identity
// announce at one instant, and their stewards' passes run a few at a time
// (stewardPasses), not on a goroutine each: it counts the passes the
// bounded runner was given, and the goroutines the stewards made of their
// own, by what made them (renewals in flight hold goroutines too), apart
// from questions of who stands, which wait on the network on their own.
func TestStewardsAnnounceAFewAtATime(t *testing.T) {
	const n = 400
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	const ttl = 2 * time.Second // announcements every 4s; renewals at a pace a loaded machine keeps
	createBucket(t, nc, bucketConfig(ttl))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var ended atomic.Int32
	led := make([]atomic.Bool, n) // a loaded machine may lose a term and win again: each counts once
	for i := range n {
		e, err := NewElection("a", fmt.Sprintf("k%d", i), js, WithMinTerm(100*time.Millisecond), OnWon(func() { led[i].Store(true) }))
		if err != nil {
			t.Fatal(err)
		}
		e.Launch(ctx, func(error) { ended.Add(1) })
	}
	// 400 elections begin with a synced write each: seconds on a quiet
	// machine, far more under -race on a loaded one.
	const within = 90 * time.Second
	defer func() {
		stop()
		eventually(t, within, "every election to end", func() bool { return ended.Load() == n })
	}()
	eventually(t, within, "every election to lead", func() bool {
		for i := range led {
			if !led[i].Load() {
				return false
			}
		}
		return true
	})
	// A new leader asks who stands, on a goroutine of its own, within
	// half its minimum term (50ms) of winning, for 250ms at most, again
	// when a question fails: the count waits until those are over.
	eventually(t, within, "the new leaders' questions to end", func() bool {
		own, _ := stewardOwnGoroutines()
		return own == 0
	})
	// Passes are counted as the bounded runner is given them: sampling
	// goroutines would miss passes that take microseconds.
	base, passesBefore := runtime.NumGoroutine(), stewardPasses.count()
	peakOwn, peakAsking, samples := 0, 0, 0
	window := 2*standing.AnnouncementInterval(ttl) + time.Second // two announcement instants
	for end := time.Now().Add(window); time.Now().Before(end); {
		if runtime.NumGoroutine() <= base {
			runtime.Gosched()
			continue
		}
		samples++
		own, asking := stewardOwnGoroutines()
		peakOwn, peakAsking = max(peakOwn, own-asking), max(peakAsking, asking)
	}
	passes := stewardPasses.count() - passesBefore
	// Each candidate announces at each instant, from a pass.
	if passes < n {
		t.Fatalf("%d candidates gave the bounded runner %d stewards' passes in %v, want one each at least (each announces at each instant, from a pass)", n, passes, window)
	}
	// Questions of who stands run on their own, and a leader whose term
	// lapsed under load asks again as its next term begins: they are not
	// counted. Were passes on goroutines of their own, n would be at the
	// instant.
	if peakOwn > n/4 {
		t.Errorf("%d candidates announcing together ran up to %d stewards' duties other than questions on goroutines of their own; want at most %d", n, peakOwn, n/4)
	}
	t.Logf("at rest %d goroutines; %d passes on the bounded runner, at most %d duties on their own (and %d questions) in %d samples", base, passes, peakOwn, peakAsking, samples)
}

// stewardOwnGoroutines counts the goroutines stewards made of their own
// (duties that wait, and passes, were they not on the bounded runner), and
// of them those asking who stands.
func stewardOwnGoroutines() (own, asking int) {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "created by github.com/conclave-io/conclave/providers/election/streams.(*steward).") {
			own++
			if strings.Contains(g, "streams.(*steward).ask(") {
				asking++
			}
		}
	}
	return own, asking
}
