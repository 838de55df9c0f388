package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestLatestWithoutJetStreamShowsMarkers: a store with only the KV API
// reads a deleted or purged key as its marker, as a store reading the
// stream does, and a key never written as nil. (The KV API's Get hides
// markers: a campaign that took a deleted key for absent expected no
// message, and failed on the marker until its watch told it.)
func TestLatestWithoutJetStreamShowsMarkers(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		js   jetstream.JetStream
	}{{"kvapi", nil}, {"stream", js}} {
		t.Run(c.name, func(t *testing.T) {
			s := NewStore(kv, c.js, nopLogger{}, writtenAfter)
			if ent, err := s.Latest(ctx, c.name+"-never"); ent != nil || err != nil {
				t.Fatalf("a key never written: got %v, %v; want nil, nil", ent, err)
			}
			for _, op := range []jetstream.KeyValueOp{jetstream.KeyValueDelete, jetstream.KeyValuePurge} {
				key := c.name + "-deleted"
				if op == jetstream.KeyValuePurge {
					key = c.name + "-purged"
				}
				if _, err := kv.Put(ctx, key, []byte("leader")); err != nil {
					t.Fatal(err)
				}
				var err error
				if op == jetstream.KeyValueDelete {
					err = kv.Delete(ctx, key)
				} else {
					err = kv.Purge(ctx, key)
				}
				if err != nil {
					t.Fatal(err)
				}
				ent, err := s.Latest(ctx, key)
				if err != nil || ent == nil || ent.Operation() != op {
					t.Fatalf("%s: got %v, %v; want its %v marker", key, ent, err, op)
				}
			}
		})
	}
}
