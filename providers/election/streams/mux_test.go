package streams

import (
	"encoding/json"
	"fmt"
	"github.com/conclave-io/conclave/providers/election/standing"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// TestCandidatesCostOneGoroutineEach: at rest, a candidate has its
// campaign's goroutine and no more: who is standing's subscriptions share
// their connection's mux, and the notifier of callbacks and the steward
// run a goroutine only while they have work. (They were 5.35 a candidate:
// 3,000 candidates ran 16,064 goroutines; then 2.02, with a steward's
// goroutine each.)
func TestCandidatesCostOneGoroutineEach(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, jetstream.KeyValueConfig{Bucket: "CHORIA_LEADER_ELECTION", TTL: 30 * time.Second, History: 1})
	before := runtime.NumGoroutine()
	const elections, each = 100, 3
	var won atomic.Int64
	for i := range elections {
		for p := range each {
			e := mustElection(t, fmt.Sprintf("p%d", p), fmt.Sprintf("svc%d", i), kv, OnWon(func() { won.Add(1) }))
			runElection(t, e)
		}
	}
	eventually(t, 30*time.Second, "every election to be led", func() bool { return won.Load() >= elections })
	perCandidate := func() float64 { return float64(runtime.NumGoroutine()-before) / (elections * each) }
	eventually(t, 10*time.Second, "at most 1.5 goroutines a candidate at rest", func() bool { return perCandidate() <= 1.5 })
	t.Logf("%.2f goroutines a candidate", perCandidate())
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
		var c Candidate
		if json.Unmarshal(m.Data, &c) == nil && c.Identity == "a" && !c.Leaving {
			heard <- time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	runElection(t, mustElection(t, "a", "announced", kv))
	every := announceEvery(time.Second)
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
