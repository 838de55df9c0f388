package streams_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/faults"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// TestObserverReportsTheExactTokenAcrossAWatchGap: an observer whose link
// to the broker is cut while the same candidate (one identity, one
// instance) stops and is elected again, and renews until the write that
// began its new term is replaced, finds the new term's exact token once
// its watch resumes: it never reports the new term's writes as renewals of
// the old one, which a resource fenced by the old token would accept.
func TestObserverReportsTheExactTokenAcrossAWatchGap(t *testing.T) {
	t.Parallel()
	const key = "gap"
	srv := natstest.Start(t, &server.Options{JetStream: true})
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "CHORIA_LEADER_ELECTION", TTL: 2 * time.Second, History: 1})
	if err != nil {
		t.Fatal(err)
	}

	proxy, err := faults.NewProxy(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	_, ojs := natstest.Connect(t, "nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	var mu sync.Mutex
	var seen []streams.Leadership
	obs, err := streams.NewObserver(key, ojs, streams.ObserveRenewals(), streams.OnChange(func(l streams.Leadership) {
		mu.Lock()
		seen = append(seen, l)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- obs.Run(octx) }()
	defer func() {
		ocancel()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("observer Run: %v", err)
		}
	}()
	waitSeen := func(what string, cond func(streams.Leadership) bool) streams.Leadership {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			mu.Lock()
			for _, l := range seen {
				if cond(l) {
					mu.Unlock()
					return l
				}
			}
			mu.Unlock()
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the observer did not report %s within 15s: %+v", what, seen)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	campaign := func() (*streams.Election, *streams.Term, func()) {
		terms := make(chan *streams.Term, 4)
		e, err := streams.NewElection("vm", key, js, streams.WithInstance("w1"), streams.OnLeading(func(t *streams.Term) { terms <- t }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Start(ctx) }()
		select {
		case term := <-terms:
			return e, term, func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
			}
		case <-time.After(15 * time.Second):
			t.Fatal("vm/w1 did not lead within 15s")
		}
		return nil, nil, nil
	}

	_, first, stopFirst := campaign()
	waitSeen(fmt.Sprintf("vm/w1's first term, token %d", first.Token()), func(l streams.Leadership) bool {
		return l.Leader == "vm" && l.Instance == "w1" && l.Token == first.Token()
	})

	proxy.Cut()
	stopFirst()
	_, second, stopSecond := campaign()
	defer stopSecond()
	if second.Token() <= first.Token() {
		t.Fatalf("the second term's token %d is not above the first's %d", second.Token(), first.Token())
	}
	// Renewals replace the write that began the term: the observer can
	// only learn the token from what the latest write says.
	deadline := time.Now().Add(15 * time.Second)
	for {
		e, err := kv.Get(context.Background(), key)
		if err == nil && e.Revision() > second.Token() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal of the second term (token %d) within 15s (%v)", second.Token(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Heal(true)

	// The writes between (the release, the take) are gone: it must not
	// have seen them, or this test would not test a gap.
	got := waitSeen(fmt.Sprintf("vm/w1's second term, token %d", second.Token()), func(l streams.Leadership) bool {
		return l.Leader == "vm" && l.Token == second.Token()
	})
	if got.Revision == second.Token() {
		t.Fatalf("the observer saw the write that began the second term (revision %d): no gap", got.Revision)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range seen {
		if l.Revision > second.Token() && l.Token != second.Token() {
			t.Fatalf("the observer reported revision %d of the second term (token %d) as %s with token %d: %+v", l.Revision, second.Token(), l.Event, l.Token, seen)
		}
	}
}
