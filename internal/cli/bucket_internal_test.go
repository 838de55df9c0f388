package cli

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/keymsg"
)

// TestWithStampTakesARenewalThatLandedBetweenTheReads: when a renewal
// lands between the KV read of an election and the raw read of its
// message, withStamp answers with the renewal, instance and token
// included, not with the headerless KV record (which showed a leader
// without its instance or token).
func TestWithStampTakesARenewalThatLandedBetweenTheReads(t *testing.T) {
	t.Parallel()
	_, s := startSession(t)
	js := s.js
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	write := func(term string, after uint64) uint64 {
		t.Helper()
		m := nats.NewMsg("$KV." + bucket.Name + ".demo")
		m.Data = []byte("vm")
		keymsg.Stamp{Instance: "vm/worker-1", Term: term}.Set(m.Header)
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(after))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	first := write(keymsg.TermBegins, 0)
	recs, err := s.readRecords(ctx, "demo")
	if err != nil || len(recs) != 1 {
		t.Fatalf("reading demo: %v, %d records", err, len(recs))
	}
	read := recs[0]
	if read.Instance != "" {
		t.Fatalf("the KV read shows instance %q; this test needs a record without its stamp", read.Instance)
	}
	renewal := write(strconv.FormatUint(first, 10), first) // lands between the reads

	got := s.withStamp(ctx, read)
	if got.Revision != renewal || got.Instance != "vm/worker-1" || got.Token() != first {
		t.Fatalf("withStamp gave revision %d, instance %q, token %d; want the renewal %d by vm/worker-1 with token %d",
			got.Revision, got.Instance, got.Token(), renewal, first)
	}
}
