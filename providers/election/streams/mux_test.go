package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestMuxServesAConnectionsSubscriptionsOnOneGoroutine: 200 subscriptions
// of one connection through its mux add one goroutine, not 200; each
// message reaches its own subscription's handler; an unsubscribed handler
// gets nothing more; and the mux's goroutine ends with the last
// subscription.
func TestMuxServesAConnectionsSubscriptionsOnOneGoroutine(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	pub := connect(t, ts.url())
	before := runtime.NumGoroutine()
	const n = 200
	got := make([]atomic.Int64, n)
	subs := make([]*muxSub, n)
	for i := range n {
		sub, err := muxSubscribe(nc, fmt.Sprintf("mux.test.%d", i), func(m *nats.Msg) {
			if m.Subject == fmt.Sprintf("mux.test.%d", i) {
				got[i].Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = sub
	}
	if added := runtime.NumGoroutine() - before; added > 2 {
		t.Fatalf("%d subscriptions added %d goroutines, want 1 (the mux's)", n, added)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := pub.Publish(fmt.Sprintf("mux.test.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "every handler to get its message", func() bool {
		for i := range got {
			if got[i].Load() != 1 {
				return false
			}
		}
		return true
	})
	if err := subs[0].Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("mux.test.0", nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("mux.test.1", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the second message of a live subscription", func() bool { return got[1].Load() == 2 })
	if c := got[0].Load(); c != 1 {
		t.Fatalf("an unsubscribed handler got %d messages, want 1 (before it unsubscribed)", c)
	}
	for _, sub := range subs[1:] {
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	muxes.mu.Lock()
	_, live := muxes.m[nc]
	muxes.mu.Unlock()
	if live {
		t.Fatal("the connection's mux outlived its last subscription")
	}
	eventually(t, 10*time.Second, "the mux's goroutine to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestMuxEndsWithItsConnection: a connection closed with subscriptions
// left takes its mux and the mux's goroutine with it, as nats.go's own
// subscriptions' goroutines end with their connection.
func TestMuxEndsWithItsConnection(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	before := runtime.NumGoroutine()
	sub, err := muxSubscribe(nc, "mux.closing", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	eventually(t, 10*time.Second, "the mux to end with its connection", func() bool {
		muxes.mu.Lock()
		defer muxes.mu.Unlock()
		return muxes.m[nc] == nil
	})
	eventually(t, 10*time.Second, "the mux's goroutine to end", func() bool { return runtime.NumGoroutine() <= before })
	_ = sub.Unsubscribe() // after its mux ended: nothing to stop
}

// TestLaunchedCandidatesShareTheirGoroutines: at rest, candidates run by
// Launch cost at most one goroutine per 100 of them: their machines share
// the process's scheduler, who is standing's subscriptions their
// connection's mux, and the notifier of callbacks and the steward run a
// goroutine only while they have work. The process's fixed goroutines
// (the connection's, the shared watches' consumers, the in-process
// broker's) do not grow with the candidates, so the test counts what a
// second batch of candidates adds to a first. (They were 5.35 a
// candidate: 3,000 candidates ran 16,064 goroutines; then 2.02, with a
// steward's goroutine each; then 1.00, with a campaign's goroutine each.)
func TestLaunchedCandidatesShareTheirGoroutines(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, jetstream.KeyValueConfig{Bucket: "CHORIA_LEADER_ELECTION", TTL: 30 * time.Second, History: 1})
	const elections, each = 300, 3
	var won atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var launched atomic.Int64
	ended := make(chan error, 2*elections*each)
	t.Cleanup(func() {
		cancel()
		for range launched.Load() {
			select {
			case err := <-ended:
				if err != nil {
					t.Errorf("Launch's campaign ended with %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("a launched campaign did not end after its context")
			}
		}
	})
	batch := func(first int) {
		for i := first; i < first+elections; i++ {
			for p := range each {
				// A short minimum term: a new leader asks who is standing
				// within half of it (askDelay), which ends the start's
				// passes of the stewards sooner.
				e := mustElection(t, fmt.Sprintf("p%d", p), fmt.Sprintf("svc%d", i), kv, WithMinTerm(2*time.Second), OnWon(func() { won.Add(1) }))
				launched.Add(1)
				e.Launch(ctx, func(err error) { ended <- err })
			}
		}
		eventually(t, 60*time.Second, "every election to be led", func() bool { return won.Load() >= int64(first+elections) })
	}
	// The in-process broker's goroutines are not the candidates'
	// process's, and grow with the shared watches' consumers: they are
	// left out. Stewards' passes and callbacks come and go: the first
	// batch's count is the least of 3s of readings, and the second must
	// come within the bound of it.
	batch(0)
	first := clientGoroutines()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		first = min(first, clientGoroutines())
	}
	batch(elections)
	bound := elections * each / 100
	// Renewals come in waves (the elections won together renew
	// together), each write on a goroutine while in flight: rest is
	// between waves.
	added := 0
	eventually(t, 30*time.Second, "the second batch to come to rest within the bound", func() bool {
		added = clientGoroutines() - first
		return added <= bound
	})
	t.Logf("%d candidates: %d goroutines in the process; %d more added %d (at most %d)", elections*each, first, elections*each, added, bound)
}

// clientGoroutines counts the goroutines not running the in-process broker.
func clientGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "nats-server/v2/server") {
			count++
		}
	}
	return count
}

// TestCandidatesAnnounceEveryInterval: a candidate announces itself when it
// starts and again every interval (two TTLs, at least 2s), from the timer
// that starts a pass of its steward's work, with no goroutine waiting for
// it in between.
func TestCandidatesAnnounceEveryInterval(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Second))
	heard := make(chan time.Time, 16)
	sub, err := nc.Subscribe(standing.AnnounceSubject(bucketName, "announced"), func(m *nats.Msg) {
		var c standing.Candidate
		if json.Unmarshal(m.Data, &c) == nil && c.Identity == "a" && !c.Leaving {
			heard <- time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	runElection(t, mustElection(t, "a", "announced", kv))
	every := standing.AnnouncementInterval(time.Second)
	var at []time.Time
	deadline := time.After(4*every + 10*time.Second)
	for len(at) < 3 {
		select {
		case h := <-heard:
			at = append(at, h)
		case <-deadline:
			t.Fatalf("heard %d announcements of a, want 3 (at start and every %v)", len(at), every)
		}
	}
	if gap := at[2].Sub(at[1]); gap < every/2 || gap > 2*every {
		t.Errorf("announcements %v apart, want about %v", gap, every)
	}
}

// TestMuxHandlersOfOneSubjectShareASubscription: the candidates of one
// process in one election subscribe to the same subjects; through the
// mux they share one subscription to each, every handler gets every
// message, and the subscription ends with its last handler.
func TestMuxHandlersOfOneSubjectShareASubscription(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	pub := connect(t, ts.url())
	var a, b atomic.Int64
	subA, err := muxSubscribe(nc, "mux.shared", func(*nats.Msg) { a.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	subB, err := muxSubscribe(nc, "mux.shared", func(*nats.Msg) { b.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != 1 {
		t.Fatalf("two handlers of one subject hold %d subscriptions, want 1", n)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("mux.shared", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both handlers to get the message", func() bool { return a.Load() == 1 && b.Load() == 1 })
	if err := subA.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != 1 {
		t.Fatalf("the subject's subscription ended with a handler left (%d subscriptions)", n)
	}
	if err := pub.Publish("mux.shared", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the handler left to get the second message", func() bool { return b.Load() == 2 })
	if got := a.Load(); got != 1 {
		t.Fatalf("an unsubscribed handler got %d messages, want 1", got)
	}
	if err := subB.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after the last handler left, want 0", n)
	}
}

// TestObserversFollowingWhoStandsHoldNoGoroutine: an observer given
// ObserveStanding holds, at rest, no goroutine beyond the one its Run
// blocks: the expiry of its roll is a wake-up of the scheduler's loop, and
// announcements reach it through the connection's one mux.
func TestObserversFollowingWhoStandsHoldNoGoroutine(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(10*time.Second))
	runElection(t, mustElection(t, "a", "watched", kv))
	before := clientGoroutines()
	const observers = 200
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var counted atomic.Int64
	for range observers {
		o, err := NewObserver("watched", jsFor(kv), ObserveStanding(nc), WithRecorder(&onStanding{counted: func() { counted.Add(1) }}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	eventually(t, 20*time.Second, "every observer to count who stands", func() bool { return counted.Load() >= observers })
	added := 0
	eventually(t, 20*time.Second, "the observers to come to rest", func() bool {
		added = clientGoroutines() - before
		return added <= observers+observers/10
	})
	t.Logf("%d observers following who stands added %d goroutines (their Runs' %d among them)", observers, added, observers)
}

// onStanding is a Recorder that calls counted on each count of who stands.
type onStanding struct {
	nopRecorder
	counted func()
}

func (r *onStanding) Standing(string, string, int, int) { r.counted() }
