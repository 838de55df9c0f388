package transport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFlatNamesShareAFewConsumers: a process following hundreds of keys
// with flat names ("svc42") holds a few consumers, not one per key; each
// subscription, whether it made the set feed, joined it while its consumer
// was being made, or joined it later, gets its key's state (a value, a
// release marker or nothing) and then each change; the feed delivers the
// writes of the keys followed, not those of the bucket's other keys; and
// once most keys are no longer followed its consumer filters on the rest.
func TestFlatNamesShareAFewConsumers(t *testing.T) {
	const followed, others = 300, 300
	nc := connect(t, startServer(t))
	kv, js := createBucket(t, nc, 30*time.Second)
	ctx := context.Background()
	h := hubFor(kv, js, nopLogger{}, writtenAfter)
	key := func(i int) string { return fmt.Sprintf("svc%d", i) }

	// want is each key's state: its latest revision and operation, or
	// none (revision 0).
	type state struct {
		rev uint64
		op  jetstream.KeyValueOp
	}
	want := map[string]state{}
	setState := func(i int) {
		k := key(i)
		switch i % 3 {
		case 0: // held
			rev, err := kv.Put(ctx, k, []byte("leader"))
			if err != nil {
				t.Fatal(err)
			}
			want[k] = state{rev, jetstream.KeyValuePut}
		case 1: // released: a marker
			rev, err := kv.Put(ctx, k, []byte("leader"))
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, k, jetstream.LastRevision(rev)); err != nil {
				t.Fatal(err)
			}
			want[k] = state{rev + 1, jetstream.KeyValueDelete}
		}
	}
	for i := range followed + others {
		setState(i)
	}

	next := func(w jetstream.KeyWatcher, what string) jetstream.KeyValueEntry {
		t.Helper()
		select {
		case ent, ok := <-w.Updates():
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			return ent
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing delivered in 10s", what)
		}
		return nil
	}
	checkInitial := func(w jetstream.KeyWatcher, k string) {
		t.Helper()
		st := want[k]
		if st.rev != 0 {
			ent := next(w, k+" initial value")
			if ent == nil || ent.Revision() != st.rev || ent.Operation() != st.op {
				t.Fatalf("%s: initial value %v, want revision %d %v", k, ent, st.rev, st.op)
			}
		}
		if ent := next(w, k+" end of initial values"); ent != nil {
			t.Fatalf("%s: got %v, want the end of the initial values", k, ent)
		}
	}

	// Two waves: the first all at once (most join the set feed while its
	// consumer is being made), the second once it runs.
	ws := make([]jetstream.KeyWatcher, followed)
	subscribe := func(from, to int) {
		subscribeAtOnce(t, h, ws, from, to, key)
		for i := from; i < to; i++ {
			checkInitial(ws[i], key(i))
		}
	}
	subscribe(0, followed/2)
	subscribe(followed/2, followed)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.Stop()
			}
		}
	}()
	settled := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, f := range h.setFeeds {
			if len(f.genKeys) > 2*len(f.keys) || f.caught != f.gen || f.remaking {
				return false
			}
		}
		return true
	}
	eventually(t, 10*time.Second, "the set feed's consumer made with every key", settled)
	if n, want := consumers(t, js), MaxKeyFeeds+(followed-MaxKeyFeeds+setKeys-1)/setKeys; n != want {
		t.Fatalf("%d consumers for %d keys, want %d", n, followed, want)
	}

	// One write to each key, followed or not: each subscriber gets its
	// own, and the process receives the followed keys' writes only.
	before := h.delivered.Load()
	for i := range followed + others {
		rev, err := kv.Put(ctx, key(i), []byte("next"))
		if err != nil {
			t.Fatal(err)
		}
		if i < followed {
			if ent := next(ws[i], key(i)+" change"); ent == nil || ent.Revision() != rev {
				t.Fatalf("%s: change %v, want revision %d", key(i), ent, rev)
			}
		}
	}
	if got := h.delivered.Load() - before; got != followed {
		t.Fatalf("the process received %d messages for %d writes to its keys (and %d to others)", got, followed, others)
	}

	// Most keys are no longer followed: the set feed's consumer is made
	// again with the rest, and the others' writes no longer reach the
	// process.
	const kept = 50
	for i := kept; i < followed; i++ {
		ws[i].Stop()
		ws[i] = nil
	}
	eventually(t, 10*time.Second, "the set feed to filter on the keys still followed", settled)
	before = h.delivered.Load()
	for i := range followed {
		if _, err := kv.Put(ctx, key(i), []byte("later")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range kept {
		if ent := next(ws[i], key(i)+" later change"); ent == nil || string(ent.Value()) != "later" {
			t.Fatalf("%s: got %v, want the later write", key(i), ent)
		}
	}
	if got := h.delivered.Load() - before; got > 2*kept {
		t.Fatalf("the process received %d messages for %d writes to the %d keys it follows", got, kept, kept)
	}
	for i := range kept {
		ws[i].Stop()
		ws[i] = nil
	}
	eventually(t, 5*time.Second, "every consumer deleted", func() bool { return consumers(t, js) == 0 })
}

// TestKeysPastTheSetFeedsShareTheWholeBucket: a process that follows more
// keys than its set feeds hold follows the rest through one consumer on the
// whole bucket, so its consumers stay few however many keys it follows, and
// each subscription still gets its key's state and changes.
func TestKeysPastTheSetFeedsShareTheWholeBucket(t *testing.T) {
	n := MaxKeyFeeds + maxSetFeeds*setKeys + 100 // past the set feeds
	h, kv, js := newHub(t)
	ctx := context.Background()
	revs := putEvery(t, kv, n, 2)
	ws := make(keyWatches, n)
	defer ws.stop()
	for i := range n {
		w, err := h.subscribe(ctx, fmt.Sprintf("k%d", i), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	ws.expectInitial(t, revs)
	awaitFeedConsumers(t, h, js)
	last := n - 1 // followed through the whole bucket's feed
	rev, err := kv.Put(ctx, fmt.Sprintf("k%d", last), []byte("next"))
	if err != nil {
		t.Fatal(err)
	}
	if ent := ws.next(t, last); ent == nil || ent.Revision() != rev {
		t.Fatalf("k%d: change %v, want revision %d", last, ent, rev)
	}
}

// TestKeysWaitingInSetFeedsFoldIntoTheWholeBucket: a process that starts
// following more keys than its set feeds hold, all at once, follows the
// keys still waiting for their set feed's consumer through the
// whole-bucket feed made for the rest. The set feeds keep the few keys
// they delivered and are not made again with hundreds of filters; every
// key gets its state and its later changes.
func TestKeysWaitingInSetFeedsFoldIntoTheWholeBucket(t *testing.T) {
	n := MaxKeyFeeds + maxSetFeeds*setKeys + 100 // past the set feeds
	h, kv, js := newHub(t)
	ctx := context.Background()
	revs := putEvery(t, kv, n, 3)
	ws := make(keyWatches, n)
	defer ws.stop()
	// At once, as thousands of campaigns starting together.
	subscribeAtOnce(t, h, ws, 0, n, func(i int) string { return fmt.Sprintf("k%d", i) })
	ws.expectInitial(t, revs)
	h.mu.Lock()
	inSets, sets := 0, len(h.setFeeds)
	for _, f := range h.setFeeds {
		inSets += len(f.keys)
	}
	allFollows := len(h.allFeed.subs)
	h.mu.Unlock()
	if inSets > maxSetFeeds*setKeys/2 {
		t.Fatalf("%d keys in %d set feeds after a start of %d keys at once; want the ones waiting (all but a few) on the whole bucket's feed, which follows %d", inSets, sets, n, allFollows)
	}
	if inSets+allFollows+MaxKeyFeeds != n {
		t.Fatalf("%d keys in set feeds, %d on the whole bucket's feed and %d with feeds of their own; want %d in all", inSets, allFollows, MaxKeyFeeds, n)
	}
	t.Logf("%d keys stayed in %d set feeds; %d moved to the whole bucket's feed", inSets, sets, allFollows)
	awaitFeedConsumers(t, h, js)
	for i := range n { // every key's next change arrives once, and nothing else
		rev, err := kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("next"))
		if err != nil {
			t.Fatal(err)
		}
		if ent := ws.next(t, i); ent == nil || ent.Revision() != rev {
			t.Fatalf("k%d: change %v, want revision %d", i, ent, rev)
		}
	}
	for i := range n {
		select {
		case ent := <-ws[i].Updates():
			t.Fatalf("k%d: delivered %v after its change", i, ent)
		default:
		}
	}
}

// keyWatches are the watches of keys k0, k1, … by index.
type keyWatches []jetstream.KeyWatcher

// stop stops every watch made.
func (ws keyWatches) stop() {
	for _, w := range ws {
		if w != nil {
			_ = w.Stop()
		}
	}
}

// next returns what watch i delivers next, failing if the watch ends.
func (ws keyWatches) next(t *testing.T, i int) jetstream.KeyValueEntry {
	t.Helper()
	ent, ok := nextUpdate(t, ws[i], fmt.Sprintf("k%d", i))
	if !ok {
		t.Fatalf("k%d: the watch ended", i)
	}
	return ent
}

// expectInitial checks that each watch delivers its key's state, the
// revision in revs (none for 0), then the end of the initial values.
func (ws keyWatches) expectInitial(t *testing.T, revs []uint64) {
	t.Helper()
	for i := range ws {
		if revs[i] != 0 {
			if ent := ws.next(t, i); ent == nil || ent.Revision() != revs[i] {
				t.Fatalf("k%d: initial value %v, want revision %d", i, ent, revs[i])
			}
		}
		if ent := ws.next(t, i); ent != nil {
			t.Fatalf("k%d: got %v, want the end of the initial values", i, ent)
		}
	}
}

// subscribeAtOnce subscribes to keys from to to (key(i) for ws[i]), each
// on a goroutine of its own, all at once.
func subscribeAtOnce(t *testing.T, h *watchHub, ws []jetstream.KeyWatcher, from, to int, key func(int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	for i := from; i < to; i++ {
		wg.Go(func() {
			w, err := h.subscribe(context.Background(), key(i), 30*time.Second)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", key(i), err)
				return
			}
			ws[i] = w
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// newHub returns a hub on a new bucket (TTL 30s) of a new server, with
// the bucket.
func newHub(t *testing.T) (*watchHub, jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	kv, js := createBucket(t, connect(t, startServer(t)), 30*time.Second)
	return hubFor(kv, js, nopLogger{}, writtenAfter), kv, js
}

// putEvery puts k0, k<step>, k<2 step>, … below n, and returns each key's
// revision by index (0 for the keys not put).
func putEvery(t *testing.T, kv jetstream.KeyValue, n, step int) []uint64 {
	t.Helper()
	revs := make([]uint64, n)
	for i := 0; i < n; i += step {
		rev, err := kv.Put(context.Background(), fmt.Sprintf("k%d", i), []byte("leader"))
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = rev
	}
	return revs
}

// awaitFeedConsumers waits until the stream's consumers are the hub's
// per-key feeds (all MaxKeyFeeds used), its set feeds (at most
// maxSetFeeds) and its whole-bucket feed: a set feed is made again
// meanwhile when it filters on more than twice its keys.
func awaitFeedConsumers(t *testing.T, h *watchHub, js jetstream.JetStream) {
	t.Helper()
	eventually(t, 10*time.Second, "the stream's consumers to be the hub's feeds", func() bool {
		h.mu.Lock()
		sets := len(h.setFeeds)
		h.mu.Unlock()
		if sets > maxSetFeeds {
			t.Fatalf("%d set feeds, at most %d allowed", sets, maxSetFeeds)
		}
		return consumers(t, js) == MaxKeyFeeds+sets+1
	})
}
