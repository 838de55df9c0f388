package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// A subscription outlives the context that set it up and ends when it is
// stopped: its feed stops with its last subscriber, and the feed's
// subscription goes.
func TestHubSubscriptionLivesUntilStopped(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	subs := nc.NumSubscriptions()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := h.subscribe(ctx, "k", 10*time.Second)
	cancel() // set up: the context's end changes nothing now
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ent := <-w.Updates():
		if ent != nil {
			t.Fatalf("want the end of the (empty) initial values, got %v", ent)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no initial values")
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	rev, err := kv.Put(wctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ent, ok := <-w.Updates():
		if !ok || ent == nil || ent.Revision() != rev {
			t.Fatalf("after its set-up context ended: got %v, %v; want revision %d", ent, ok, rev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write was not delivered after the set-up context ended")
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, w, 2*time.Second, "after it was stopped")
	eventually(t, 5*time.Second, "the feed to stop", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.keyFeeds) == 0 && len(h.following) == 0
	})
	eventually(t, 5*time.Second, "the feed's subscription to go", func() bool { return nc.NumSubscriptions() <= subs })
}

// groupFeed returns the prefix feed of the hub, failing if there is none.
func groupFeed(t *testing.T, h *watchHub, prefix string) *feed {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.groupFeeds[prefix]
	if f == nil {
		t.Fatalf("no shared feed on %s", prefix)
	}
	return f
}

func lastCount(h *watchHub, f *feed) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(f.last)
}

// nextUpdate returns what w delivers next, failing after a few seconds.
func nextUpdate(t *testing.T, w jetstream.KeyWatcher, what string) (jetstream.KeyValueEntry, bool) {
	t.Helper()
	select {
	case ent, ok := <-w.Updates():
		return ent, ok
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing delivered", what)
		return nil, false
	}
}

// TestPrefixFeedForgetsKeysNobodyFollowsOnceGone: a prefix's shared feed
// in a fleet whose election names come and go keeps the latest message of
// the keys followed or alive only: released (deleted) and expired keys
// that nobody follows are forgotten, and a subscriber joining the running
// feed still gets each key's state at once.
func TestPrefixFeedForgetsKeysNobodyFollowsOnceGone(t *testing.T) {
	const ttl = time.Second
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, ttl)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	h.noSet = time.Now().Add(time.Hour) // prefix feeds, as for a user refused set feeds
	ctx := context.Background()
	for i := range FoldAt + 1 {
		w, err := h.subscribe(ctx, fmt.Sprintf("p.s%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ent, _ := nextUpdate(t, w, "initial values"); ent != nil {
			t.Fatalf("want the end of the (empty) initial values, got %v", ent)
		}
	}
	f := groupFeed(t, h, "p")
	followed := 2 // p.s7 and p.s8 share the feed; p.s0..p.s6 have their own

	// Elections that are released: created, then deleted.
	const churn = 200
	for i := range churn {
		key := fmt.Sprintf("p.gone%d", i)
		rev, err := kv.Create(ctx, key, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
			t.Fatal(err)
		}
	}
	// Elections whose leader crashed: the key expires silently.
	for i := range 50 {
		if _, err := kv.Create(ctx, fmt.Sprintf("p.crashed%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	liveRev, err := kv.Create(ctx, "p.live", []byte("leader"))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the feed has seen all of it: a change of a followed key
	// written last arrives last.
	w, err := h.subscribe(ctx, "p.s9", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ent, _ := nextUpdate(t, w, "initial values"); ent != nil {
		t.Fatalf("want the end of the (empty) initial values, got %v", ent)
	}
	followed++
	mark, err := kv.Create(ctx, "p.s9", []byte("mark"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ent, ok := nextUpdate(t, w, "the mark")
		if !ok {
			t.Fatal("the subscription ended")
		}
		if ent != nil && ent.Revision() == mark {
			break
		}
	}
	// The released keys are forgotten at once; the live and crashed ones
	// are kept until they can have expired.
	if n := lastCount(h, f); n > followed+50+1 {
		t.Fatalf("the feed keeps %d keys after %d released elections, want at most %d", n, churn, followed+51)
	}
	// A subscriber joining the running feed gets a live key's state at
	// once, and a released key's absence.
	live, err := h.subscribe(ctx, "p.live", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, live, "p.live"); ent == nil || ent.Revision() != liveRev || string(ent.Value()) != "leader" {
		t.Fatalf("a subscriber joining the feed got %v, want revision %d", ent, liveRev)
	}
	if ent, _ := nextUpdate(t, live, "p.live"); ent != nil {
		t.Fatalf("want the end of the initial values, got %v", ent)
	}
	live.Stop()
	gone, err := h.subscribe(ctx, "p.gone7", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, gone, "p.gone7"); ent != nil {
		t.Fatalf("a released key, for a subscriber joining the feed: got %v, want none", ent)
	}
	gone.Stop()

	// Once the crashed leaders' keys (and the live one, not renewed) can
	// have expired, the feed forgets them on its next message.
	deadline := time.Now().Add(3*ttl + 5*time.Second) // twice the TTL and a second, and then some
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for lastCount(h, f) > followed {
		if time.Now().After(deadline) {
			t.Fatalf("the feed still keeps %d keys, want %d", lastCount(h, f), followed)
		}
		<-tick.C
		if _, err := kv.Put(ctx, "p.s8", []byte("tick")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFeedDeletesItsConsumerWhenConsumeFails: when consuming fails after
// the feed's consumer was made on the broker, the subscription fails and
// the consumer is deleted rather than left there.
func TestFeedDeletesItsConsumerWhenConsumeFails(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	failure := errors.New("consume failed")
	var tried atomic.Bool
	h.consume = func(jetstream.Consumer, jetstream.MessageHandler, ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
		tried.Store(true)
		return nil, failure
	}
	w, err := h.subscribe(context.Background(), "k", 10*time.Second)
	if !errors.Is(err, failure) {
		if w != nil {
			w.Stop()
		}
		t.Fatalf("subscribe returned %v, want the failure to consume", err)
	}
	if !tried.Load() {
		t.Fatal("Consume was not called")
	}
	if n := consumers(t, js); n != 0 {
		t.Fatalf("%d consumers left on the broker after Consume failed, want 0", n)
	}
}

// restartFeed remakes w's feed and waits until its new consumer is made.
func restartFeed(t *testing.T, w jetstream.KeyWatcher) {
	t.Helper()
	f := w.(*hubWatch).feed
	f.srcMu.Lock()
	old := f.src
	f.srcMu.Unlock()
	w.(*hubWatch).Restart()
	eventually(t, 5*time.Second, "the feed's new consumer", func() bool {
		f.srcMu.Lock()
		defer f.srcMu.Unlock()
		return f.src != nil && f.src != old
	})
}

// TestHubRestartDoesNotReplayWhatSubscribersSaw: when a feed's consumer
// is made again, the messages it delivers again that the subscribers
// already saw (the same revision of a key), or that the feed forgot as a
// key was released while nobody followed it, are not delivered as changes:
// the next thing each subscriber gets is the next write.
func TestHubRestartDoesNotReplayWhatSubscribersSaw(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	h.noSet = time.Now().Add(time.Hour) // prefix feeds, as for a user refused set feeds
	ctx := context.Background()
	var ws []jetstream.KeyWatcher
	for i := range FoldAt {
		w, err := h.subscribe(ctx, fmt.Sprintf("p.s%d", i), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ent, _ := nextUpdate(t, w, "initial values"); ent != nil {
			t.Fatalf("want the end of the (empty) initial values, got %v", ent)
		}
		ws = append(ws, w)
	}
	held := ws[FoldAt-1] // on the prefix's shared feed
	groupFeed(t, h, "p")
	rev, err := kv.Create(ctx, "p.s7", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, held, "the write"); ent == nil || ent.Revision() != rev {
		t.Fatalf("got %v, want revision %d", ent, rev)
	}
	// A key released while nobody followed it, then followed.
	gone, err := kv.Create(ctx, "p.gone", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "p.gone", jetstream.LastRevision(gone)); err != nil {
		t.Fatal(err)
	}
	mark, err := kv.Put(ctx, "p.s6", []byte("mark")) // p.s6 has a feed of its own
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, ws[6], "the mark"); ent == nil || ent.Revision() != mark {
		t.Fatalf("got %v, want revision %d", ent, mark)
	}
	eventually(t, 5*time.Second, "the shared feed to see the release", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.groupFeeds["p"] != nil && h.groupFeeds["p"].seen > gone
	})
	released, err := h.subscribe(ctx, "p.gone", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer released.Stop()
	if ent, _ := nextUpdate(t, released, "initial values"); ent != nil {
		t.Fatalf("a released key: got %v, want none", ent)
	}

	restartFeed(t, held)
	next, err := kv.Update(ctx, "p.s7", []byte("a"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, held, "the renewal"); ent == nil || ent.Revision() != next {
		t.Fatalf("after the restart the first change delivered was %v, want the renewal at revision %d", ent, next)
	}
	again, err := kv.Create(ctx, "p.gone", []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	if ent, _ := nextUpdate(t, released, "the new term"); ent == nil || ent.Revision() != again {
		t.Fatalf("after the restart the first change delivered was %v, want the new term at revision %d", ent, again)
	}
}

// TestFeedsFollowABucketMadeAgainByItsAdvisory: when the bucket is deleted
// and made again, a feed whose consumer is not told (the broker tells a
// consumer only through a pull request it holds, and otherwise its
// heartbeats stop two heartbeats later) makes its consumer again on the
// stream's advisory, and delivers the new bucket's first write: a key's
// own feed and a set feed alike. Here the consumers' errors never reach
// the feeds, so only the advisory can tell them. The hub's subscription to
// the advisories ends with its last feed.
func TestFeedsFollowABucketMadeAgainByItsAdvisory(t *testing.T) {
	nc := connect(t, startServer(t))
	const ttl = 10 * time.Second
	kv, js := createBucket(t, nc, ttl)
	subsBefore := nc.NumSubscriptions()
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	h.consume = func(cons jetstream.Consumer, handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
		deaf := jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {})
		return cons.Consume(handler, append(opts, deaf)...)
	}
	ctx := context.Background()
	var keys []string
	ws := map[string]jetstream.KeyWatcher{}
	for i := range MaxKeyFeeds + 1 {
		key := fmt.Sprintf("k%d", i)
		keys = append(keys, key)
		w, err := h.subscribe(ctx, key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ent, _ := nextUpdate(t, w, key+": initial values"); ent != nil {
			t.Fatalf("%s: want the end of the (empty) initial values, got %v", key, ent)
		}
		ws[key] = w
	}
	h.mu.Lock()
	sets := len(h.setFeeds)
	h.mu.Unlock()
	if sets != 1 {
		t.Fatalf("%d set feeds, want the last key in one", sets)
	}
	followed := []string{keys[0], keys[MaxKeyFeeds]} // a key's own feed, and the set feed
	for i := range 5 {
		for _, key := range followed {
			rev, err := kv.Put(ctx, key, []byte("old"))
			if err != nil {
				t.Fatal(err)
			}
			if ent, _ := nextUpdate(t, ws[key], fmt.Sprintf("%s: old write %d", key, i)); ent == nil || ent.Revision() != rev {
				t.Fatalf("%s: got %v, want the old write at revision %d", key, ent, rev)
			}
		}
	}

	if err := js.DeleteKeyValue(ctx, bucketName); err != nil {
		t.Fatal(err)
	}
	kv, _ = createBucket(t, nc, ttl)
	for _, key := range followed {
		rev, err := kv.Create(ctx, key, []byte("new"))
		if err != nil {
			t.Fatal(err)
		}
		ent, _ := nextUpdate(t, ws[key], key+": the new bucket's first write")
		if ent == nil || ent.Revision() != rev || string(ent.Value()) != "new" {
			t.Fatalf("%s: got %v, want the new bucket's write at revision %d", key, ent, rev)
		}
	}

	for _, w := range ws {
		w.Stop()
	}
	eventually(t, 5*time.Second, "the advisory subscription to end with the feeds", func() bool {
		return nc.NumSubscriptions() <= subsBefore
	})
}

// TestFeedIsNotReadyBeforeItTookInWhatTheBrokerSent: a feed whose process
// is slow to take in the messages its consumer sent (here: the first one
// held back for longer than the readiness poll waits) does not tell its
// subscriber that the key's state is complete before it has that message.
// The broker then has nothing pending, and a feed trusting that alone told
// the subscriber the key was absent, which a candidate that had read the
// key held takes as a removal and waits a TTL.
func TestFeedIsNotReadyBeforeItTookInWhatTheBrokerSent(t *testing.T) {
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 10*time.Second)
	ctx := context.Background()
	rev, err := kv.Put(ctx, "k", []byte("leader"))
	if err != nil {
		t.Fatal(err)
	}
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	var held atomic.Bool
	h.consume = func(cons jetstream.Consumer, handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
		return cons.Consume(func(m jetstream.Msg) {
			if held.CompareAndSwap(false, true) {
				<-release // the process is busy: the message waits in its buffers
			}
			handler(m)
		}, opts...)
	}
	w, err := h.subscribe(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ent := <-w.Updates():
		t.Fatalf("got %v while the key's message was not taken in, want nothing yet", ent)
	case <-time.After(2500 * time.Millisecond): // past the readiness poll's first look, 1 s after the consumer was made
	}
	close(release)
	ent, _ := nextUpdate(t, w, "the key's message")
	if ent == nil || ent.Revision() != rev {
		t.Fatalf("got %v, want the key's message at revision %d", ent, rev)
	}
	if ent, _ := nextUpdate(t, w, "the end of the initial values"); ent != nil {
		t.Fatalf("got %v, want the end of the initial values", ent)
	}
}
