package kvwatch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/conclavetest"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/internal/natstest"
)

// fullWatcher returns a watcher of a bucket with more keys than its
// channel holds, nobody reading it, once its delivery is blocked.
func fullWatcher(t *testing.T) jetstream.KeyWatcher {
	t.Helper()
	b := conclavetest.StartBroker(t)
	_, js := natstest.Connect(t, b.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 600 // nats.go buffers 256 updates
	for i := range keys {
		if _, err := kv.Put(ctx, fmt.Sprintf("e%d", i), []byte("host")); err != nil {
			t.Fatal(err)
		}
	}
	w, err := kv.Watch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(w.Updates()) < cap(w.Updates()); {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher buffered %d of %d updates in 10s", len(w.Updates()), cap(w.Updates()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return w
}

// closedWithin reports whether ch is closed once what it holds is read,
// within d.
func closedWithin(ch <-chan jetstream.KeyValueEntry, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func TestStopEndsAFullWatcher(t *testing.T) {
	w := fullWatcher(t)
	done := make(chan struct{})
	go func() { kvwatch.Stop(w); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop of a full watcher did not return within 10s")
	}
	select {
	case _, ok := <-w.Updates():
		if ok {
			t.Fatal("Stop returned with updates still in the watcher's channel")
		}
	default:
		t.Fatal("Stop returned before the watcher closed its channel")
	}
}

func TestStopInBackgroundEndsAFullWatcher(t *testing.T) {
	w := fullWatcher(t)
	var wg sync.WaitGroup
	kvwatch.StopInBackground(w, &wg)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the background drain of a full watcher did not end within 10s")
	}
	if !closedWithin(w.Updates(), time.Second) {
		t.Fatal("the drain ended before the watcher closed its channel")
	}
}
