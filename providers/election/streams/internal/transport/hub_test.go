package transport

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestHubSubscriptionJoiningAFeedGetsTheKeyAtOnce: a second subscription
// to a key gets its latest message and the end of the initial values from
// the running feed, then the same changes as the first.
func TestHubSubscriptionJoiningAFeedGetsTheKeyAtOnce(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	ctx := context.Background()
	rev, err := kv.PutString(ctx, "k", "leader-1")
	if err != nil {
		t.Fatal(err)
	}
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	next := func(w jetstream.KeyWatcher) jetstream.KeyValueEntry {
		t.Helper()
		select {
		case ent, ok := <-w.Updates():
			if !ok {
				t.Fatal("watch closed")
			}
			return ent
		case <-time.After(5 * time.Second):
			t.Fatal("nothing delivered in 5s")
		}
		return nil
	}
	first, err := h.subscribe(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	if ent := next(first); ent == nil || ent.Revision() != rev {
		t.Fatalf("first subscription's initial value %v, want revision %d", ent, rev)
	}
	if ent := next(first); ent != nil {
		t.Fatalf("want the end of the initial values, got %v", ent)
	}
	second, err := h.subscribe(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	if ent := next(second); ent == nil || ent.Revision() != rev || string(ent.Value()) != "leader-1" {
		t.Fatalf("second subscription's initial value %v, want revision %d", ent, rev)
	}
	if ent := next(second); ent != nil {
		t.Fatalf("want the end of the initial values, got %v", ent)
	}
	rev2, err := kv.Update(ctx, "k", []byte("leader-2"), rev)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []jetstream.KeyWatcher{first, second} {
		if ent := next(w); ent == nil || ent.Revision() != rev2 {
			t.Fatalf("change %v, want revision %d", ent, rev2)
		}
	}
	if n := consumers(t, js); n != 1 {
		t.Fatalf("%d consumers for two subscriptions, want 1", n)
	}
}

// TestHubEndsSubscriptionsWhenTheConnectionCloses: a closed connection ends
// every subscription with an error that says so.
func TestHubEndsSubscriptionsWhenTheConnectionCloses(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	w, err := h.subscribe(context.Background(), "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-w.Updates():
			if ok {
				continue
			}
			if err := w.(*hubWatch).Err(); !strings.Contains(err.Error(), "closed") {
				t.Fatalf("subscription ended with %v, want a closed connection", err)
			}
			return
		case <-deadline:
			t.Fatal("the subscription did not end within 5s of the connection closing")
		}
	}
}

func TestMessageTTLRoundsUpToWholeSeconds(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Second, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{time.Minute, time.Minute},
		{time.Minute + time.Millisecond, 61 * time.Second},
	} {
		if got := MessageTTL(c.ttl); got != c.want {
			t.Errorf("MessageTTL(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}

// TestConcurrentStatusReadsShareRequests: many candidates of one process
// reading the bucket's settings at once send a few requests, each sent
// after the reads it answers began.
func TestConcurrentStatusReadsShareRequests(t *testing.T) {
	url := startServer(t)
	nc := connect(t, url)
	kv, js := createBucket(t, nc, 7*time.Second)
	spy := connect(t, url)
	infos, err := spy.SubscribeSync("$JS.API.STREAM.INFO.KV_" + bucketName)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var stores []*Store
	for range 200 {
		stores = append(stores, NewStore(kv, js, nopLogger{}, writtenAfter))
	}
	start := make(chan struct{})
	errs := make(chan error, len(stores))
	for _, s := range stores {
		go func() {
			<-start
			st, _, err := s.Status(context.Background(), 0)
			if err == nil && st.TTL() != 7*time.Second {
				err = fmt.Errorf("TTL %v", st.TTL())
			}
			errs <- err
		}()
	}
	close(start)
	for range stores {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, _ := infos.Pending()
	if n < 1 || n > 10 {
		t.Fatalf("200 concurrent reads of the settings sent %d requests, want 1 to 10", n)
	}
	t.Logf("200 concurrent reads sent %d requests", n)
}

// TestHubRestartKeepsSubscribersAndDeliversWhatTheyMissed: a feed made
// again at a subscriber's request keeps every subscription, replaces its
// consumer, and delivers changes made meanwhile.
func TestHubRestartKeepsSubscribersAndDeliversWhatTheyMissed(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	ctx := context.Background()
	w, err := h.subscribe(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ent := <-w.Updates(); ent != nil {
		t.Fatalf("want the end of the (empty) initial values, got %v", ent)
	}
	hw := w.(*hubWatch)
	hw.feed.stopSource() // as if the consumer had silently died
	rev, err := kv.PutString(ctx, "k", "while-gone")
	if err != nil {
		t.Fatal(err)
	}
	hw.Restart()
	select {
	case ent, ok := <-w.Updates():
		if !ok || ent == nil || ent.Revision() != rev {
			t.Fatalf("after the restart got %v (open %v), want revision %d", ent, ok, rev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change made while the consumer was gone was not delivered after the restart")
	}
	eventually(t, 5*time.Second, "one consumer", func() bool { return consumers(t, js) == 1 })
}

// TestStatusReadAfterALostOneIsSentAtOnce: a read of the bucket's settings
// sent while nothing answers (as while the stream has no leader, in a Raft
// failover) is presumed lost after statusPatience: a read asked for once
// the broker answers again is sent then, not when the lost one times out
// (statusTimeout), and callers content with an older read do not join the
// lost one either. Before, both waited out the lost read: a leader elected
// after a stream-leader kill began its term up to 5 s late.
func TestStatusReadAfterALostOneIsSentAtOnce(t *testing.T) {
	url := startServer(t)
	nc := connect(t, url)
	createBucket(t, nc, 7*time.Second)

	// The election's connection reaches JetStream through a relay that
	// drops requests while silent is set, as a cluster without a stream
	// leader leaves STREAM.INFO unanswered.
	relay := connect(t, url)
	var silent atomic.Bool
	sub, err := relay.Subscribe("relay.API.>", func(m *nats.Msg) {
		if silent.Load() {
			return
		}
		go func() {
			fwd := nats.NewMsg("$JS.API." + strings.TrimPrefix(m.Subject, "relay.API."))
			fwd.Data, fwd.Header = m.Data, m.Header
			resp, err := relay.RequestMsg(fwd, 5*time.Second)
			if err == nil {
				_ = m.Respond(resp.Data)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	ec := connect(t, url)
	js, err := jetstream.NewWithAPIPrefix(ec, "relay.API")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucketName)
	if err != nil {
		t.Fatal(err)
	}
	h := hubFor(kv, js, nopLogger{}, writtenAfter)

	// First a caller content with a read up to 10 s old (a routine check),
	// then one that needs a read sent after it asks (a term beginning).
	for _, maxAge := range []time.Duration{10 * time.Second, 0} {
		silent.Store(true)
		lost, cancelLost := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, _, err := h.status(lost, 0)
		cancelLost()
		if err == nil {
			t.Fatal("a read while the relay drops requests was answered")
		}
		silent.Store(false) // the stream has a leader again

		// The lost read times out 5 s after it was sent; the next, sent
		// within statusPatience, answers in milliseconds.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		began := time.Now()
		st, _, err := h.status(ctx, maxAge)
		cancel()
		if err != nil {
			t.Fatalf("maxAge %v: a read asked for after the broker answered again failed after %v: %v (waiting for the lost read?)", maxAge, time.Since(began).Round(time.Millisecond), err)
		}
		if st.TTL() != 7*time.Second {
			t.Fatalf("maxAge %v: TTL %v, want 7s", maxAge, st.TTL())
		}
		t.Logf("maxAge %v: answered %v after the lost read", maxAge, time.Since(began).Round(time.Millisecond))
	}
}
