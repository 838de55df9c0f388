package streams

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestBeginsWaitInABoundedQueue: elections launched together begin a
// bounded number at a time per connection and bucket, not on a goroutine
// each; those of a bucket that cannot begin (not made yet) hold up
// neither another bucket's elections nor their own end: once their
// context ends, every one of them ends, the waiting ones at once, and
// their bucket's turns are forgotten.
func TestBeginsWaitInABoundedQueue(t *testing.T) {
	const waiting = 3 * maxBeginsInFlight
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(3*time.Second))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var ended atomic.Int32
	var last *Election
	lastEnded := make(chan struct{})
	for i := range waiting {
		e, err := NewElection("a", fmt.Sprintf("k%d", i), js, InBucket("NOT_MADE_YET"), WithRequestTimeout(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		last = e
		e.Launch(ctx, func(err error) {
			if err != nil {
				t.Errorf("an election stopped while it waited for its bucket ended with %v", err)
			}
			ended.Add(1)
			if e == last {
				close(lastEnded)
			}
		})
	}
	if grew := runtime.NumGoroutine() - before; grew > maxBeginsInFlight+16 {
		t.Errorf("%d elections waiting for their bucket hold %d goroutines, want at most %d and a few", waiting, grew, maxBeginsInFlight)
	}
	rec := newRecorder()
	runElection(t, mustElection(t, "b", "elsewhere", kv, rec.options("b")...))
	rec.waitFor(t, 10*time.Second, "an election of another bucket to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d elections ended before their context did", n)
	}
	// Stopped while it waits at the end of the queue: it ends, alone.
	last.Stop()
	select {
	case <-lastEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("an election stopped while it waited to begin did not end")
	}
	if n := ended.Load(); n != 1 {
		t.Fatalf("%d elections ended after one was stopped, want 1", n)
	}
	stop()
	eventually(t, 10*time.Second, "every waiting election to end with its context", func() bool { return ended.Load() == waiting })
	eventually(t, 10*time.Second, "the bucket's turns to be forgotten once none begins or waits", func() bool {
		begins.mu.Lock()
		defer begins.mu.Unlock()
		for k := range begins.m {
			if k.nc == nc && k.bucket == "NOT_MADE_YET" {
				return false
			}
		}
		return true
	})
}
