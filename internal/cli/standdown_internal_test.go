package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/keymsg"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

// TestAwaitTakeover: stand-down reports the token of the term that began,
// the revision of the first write after its removal, even when the
// consumer never shows the removal (the bucket keeps one message per key,
// and a takeover right after the marker replaces it before it is read),
// and says it does not know when that write was itself replaced by a
// renewal.
func TestAwaitTakeover(t *testing.T) {
	t.Parallel()
	_, s := startSession(t)
	js := s.js
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// write publishes to key over revision after (none for 0) and returns
	// the new revision; del marks a removal.
	write := func(key, value string, after uint64, del bool) uint64 {
		t.Helper()
		m := nats.NewMsg("$KV." + bucket.Name + "." + key)
		m.Data = []byte(value)
		if del {
			m.Header.Set(keymsg.OperationHeader, "DEL")
		}
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(after))
		if err != nil {
			t.Fatalf("writing %s: %v", key, err)
		}
		return ack.Sequence
	}

	for _, tc := range []struct {
		name string
		// writes after the leader's key and returns the marker, the
		// revision the report must give and whether it began the term.
		writes func(key string, held uint64) (marker, want uint64, began bool)
		leader string
	}{
		{"marker replaced before it is read", func(key string, held uint64) (uint64, uint64, bool) {
			m := write(key, "", held, true)
			c := write(key, "n2", m, false)
			return m, c, true
		}, "n2"},
		{"the term's first write replaced by a renewal", func(key string, held uint64) (uint64, uint64, bool) {
			m := write(key, "", held, true)
			c := write(key, "n2", m, false)
			r := write(key, "n2", c, false)
			return m, r, false
		}, "n2"},
		{"released and taken again, unseen", func(key string, held uint64) (uint64, uint64, bool) {
			m := write(key, "", held, true)
			c := write(key, "n2", m, false)
			d := write(key, "released by n2", c, true)
			e := write(key, "n3", d, false)
			return m, e, false // E follows a write stand-down never saw
		}, "n3"},
		{"a write without a revision check", func(key string, held uint64) (uint64, uint64, bool) {
			m := write(key, "", held, true)
			msg := nats.NewMsg("$KV." + bucket.Name + "." + key)
			msg.Data = []byte("n2")
			ack, err := js.PublishMsg(ctx, msg)
			if err != nil {
				t.Fatal(err)
			}
			return m, ack.Sequence, false
		}, "n2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k" + strconv.Itoa(int(time.Now().UnixNano()%1e9))
			held := write(key, "n1", 0, false)
			marker, want, began := tc.writes(key, held)
			feed, err := s.keyFeed(ctx, key, held+1)
			if err != nil {
				t.Fatal(err)
			}
			defer feed.stop()
			got, err := awaitTakeover(ctx, feed.msgs, marker, 30*time.Second)
			if err != nil {
				t.Fatalf("no takeover seen: %v", err)
			}
			if got.leader != tc.leader || got.revision != want || got.began != began {
				t.Errorf("takeover %+v, want leader %s at revision %d, began %v", got, tc.leader, want, began)
			}
		})
	}
}

// TestStandDownRefusesAnotherCopyThatTookTheKey: stand-down removes the
// leader it read. When the key changed meanwhile to another copy of the
// same identity (told apart by its instance), it refuses, naming both,
// rather than remove the copy it was not asked about.
func TestStandDownRefusesAnotherCopyThatTookTheKey(t *testing.T) {
	_, s := startSession(t)
	won := make(chan struct{}, 1)
	e, err := election.NewElection("vm", "copy", s.js, election.WithInstance("w2"),
		election.OnWon(func() { won <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("vm/w2 did not win")
	}
	cur, err := s.readElection(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	// What stand-down read before w2 took the key: w1 of vm, a revision earlier.
	stale := cur
	stale.Instance, stale.Revision = "w1", cur.Revision-1
	_, err = s.remove(ctx, &stale)
	if err == nil || !strings.Contains(err.Error(), "changed hands meanwhile: vm/w2 leads now") || !strings.Contains(err.Error(), "not vm/w1") {
		t.Fatalf("remove = %v; want it refused, naming vm/w2 and vm/w1", err)
	}
	after, err := s.readElection(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	if after.State != election.KeyHeld || after.Instance != "w2" {
		t.Fatalf("the key is %s by %s/%s after the refused stand-down; want still held by vm/w2", after.State, after.Leader, after.Instance)
	}
}

// TestSameHolder: stand-down removes a renewal of the leader it read, and
// refuses when another identity, or another copy of the identity, holds
// the key; a read that tells no instance (Choria's writes, or a failed
// read straight from the stream) judges by identity.
func TestSameHolder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b record
		same bool
	}{
		{record{Leader: "vm", Instance: "w1"}, record{Leader: "vm", Instance: "w1"}, true},
		{record{Leader: "vm", Instance: "w1"}, record{Leader: "vm", Instance: "w2"}, false},
		{record{Leader: "vm", Instance: "w1"}, record{Leader: "db", Instance: "w1"}, false},
		{record{Leader: "vm", Instance: "w1"}, record{Leader: "vm"}, true},
		{record{Leader: "vm"}, record{Leader: "vm", Instance: "w1"}, true},
		{record{Leader: "vm"}, record{Leader: "db"}, false},
	} {
		if got := sameHolder(tc.a, tc.b); got != tc.same {
			t.Errorf("sameHolder(%s/%s, %s/%s) = %v, want %v", tc.a.Leader, tc.a.Instance, tc.b.Leader, tc.b.Instance, got, tc.same)
		}
	}
}
