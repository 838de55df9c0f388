package streams

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// waitClosed waits until w's channel closes, skipping what it delivers.
func waitClosed(t *testing.T, w jetstream.KeyWatcher, within time.Duration, what string) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the subscription did not end within %v", what, within)
		}
	}
}

// TestHubSubscriptionEndsWithItsContext: cancelling the context a watch
// was made with ends it, as it ends a KV watch, both on a hub with a
// JetStream context and on one without (whose feeds are KV watches, as an
// observer or candidate without WithJetStream uses), and the feed stops
// with its last subscriber.
func TestHubSubscriptionEndsWithItsContext(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(10*time.Second))
	js, _ := jsOf.Load(kv)
	for _, c := range []struct {
		name string
		js   jetstream.JetStream
	}{{"kv watch", nil}, {"consumer", js.(jetstream.JetStream)}} {
		t.Run(c.name, func(t *testing.T) {
			h := hubFor(kv, c.js, nopLogger{})
			subs := nc.NumSubscriptions()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := h.subscribe(ctx, "k", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			select {
			case ent := <-w.Updates():
				if ent != nil {
					t.Fatalf("want the end of the (empty) initial values, got %v", ent)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no initial values")
			}
			cancel()
			waitClosed(t, w, 2*time.Second, "after its context was cancelled")
			eventually(t, 5*time.Second, "the feed to stop", func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return len(h.keyFeeds) == 0 && len(h.following) == 0
			})
			eventually(t, 5*time.Second, "the feed's subscription to go", func() bool { return nc.NumSubscriptions() <= subs })
		})
	}
}
