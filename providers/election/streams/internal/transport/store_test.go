package transport

import (
	"context"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLatestShowsMarkers: the store reads a deleted or purged key as its
// marker and a key never written as nil. (The KV API's Get hides markers: a
// campaign that took a deleted key for absent would expect no message, and
// fail on the marker until its watch told it.)
func TestLatestShowsMarkers(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	ctx := context.Background()
	s := NewStore(kv, js, nopLogger{}, writtenAfter)
	if ent, err := s.Latest(ctx, "never"); ent != nil || err != nil {
		t.Fatalf("a key never written: got %v, %v; want nil, nil", ent, err)
	}
	for _, op := range []jetstream.KeyValueOp{jetstream.KeyValueDelete, jetstream.KeyValuePurge} {
		key := "deleted"
		if op == jetstream.KeyValuePurge {
			key = "purged"
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
}

// TestEntriesTellTheirOwnTTL: a write carries the TTL the store read from
// the bucket, in whole seconds rounded up (2.5 s: "3s"), and both a read
// and a watch of the key hand it on, since the broker expires the message
// by it whatever the bucket's TTL becomes; a message without one (Choria's
// candidates write none) reads as 0.
func TestEntriesTellTheirOwnTTL(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 2500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := NewStore(kv, js, nopLogger{}, writtenAfter)
	if _, _, err := s.Status(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rev, err := s.Write(ctx, "own", []byte("a"), 0, keymsg.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "none", []byte("b")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]time.Duration{"own": 3 * time.Second, "none": 0} {
		ent, err := s.Latest(ctx, key)
		if err != nil || ent == nil {
			t.Fatalf("%s: read %v, %v", key, ent, err)
		}
		if got := ent.(*keymsg.Entry).MsgTTL(); got != want {
			t.Errorf("%s: read its own TTL as %v, want %v", key, got, want)
		}
		w, err := s.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-w.Updates():
			got := time.Duration(-1)
			if own, ok := e.(interface{ MsgTTL() time.Duration }); ok && e != nil {
				got = own.MsgTTL()
			}
			if got != want || (key == "own" && e.Revision() != rev) {
				t.Errorf("%s: the watch handed on revision %d with its own TTL %v, want %v", key, e.Revision(), got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the watch delivered nothing", key)
		}
		_ = w.Stop()
	}
}
