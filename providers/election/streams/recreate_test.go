package streams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// recreateBucket deletes the election bucket and makes it again with the
// KV API, as `nats kv rm` then `nats kv add` do: its stream's revisions
// start again at 1.
func recreateBucket(t *testing.T, js jetstream.JetStream, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, bucketName); err != nil {
		t.Fatalf("delete bucket: %v", err)
	}
	return createBucket(t, js.Conn(), bucketConfig(ttl))
}

// wantUpdate fails t unless w delivers, within a few seconds, the message
// at revision rev with value val.
func wantUpdate(t *testing.T, w jetstream.KeyWatcher, what string, rev uint64, op jetstream.KeyValueOp, val string) {
	t.Helper()
	ent, ok := nextUpdate(t, w, what)
	if !ok || ent == nil || ent.Revision() != rev || ent.Operation() != op || string(ent.Value()) != val {
		if ent != nil {
			t.Fatalf("%s: got revision %d %v %q (open %v), want revision %d %v %q", what, ent.Revision(), ent.Operation(), ent.Value(), ok, rev, op, val)
		}
		t.Fatalf("%s: got %v (open %v), want revision %d %v %q", what, ent, ok, rev, op, val)
	}
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

func mustPut(t *testing.T, kv jetstream.KeyValue, key, val string) uint64 {
	t.Helper()
	rev, err := kv.Put(context.Background(), key, []byte(val))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestHubFollowsARecreatedBucket: when the election bucket is deleted and
// made again (nats kv rm, nats kv add) under a running hub, its feeds, one
// key's own and a prefix's shared one, deliver the new bucket's messages,
// whose revisions start again at 1, below the ones the feeds saw: the new
// leader's write, its renewal and its release, each as it happens, and a
// subscription joining afterwards gets the new bucket's state (or, for a
// key the new bucket has no message of, the old bucket's). The hub judges
// with the election's comparator, as it does for campaigns.
//
// It runs twice: with set feeds, and with the per-key and prefix consumers a
// user gets whose permissions refuse consumers with several filters.
func TestHubFollowsARecreatedBucket(t *testing.T) {
	t.Parallel()
	t.Run("set feeds", func(t *testing.T) { testHubFollowsARecreatedBucket(t, false) })
	t.Run("prefix feeds", func(t *testing.T) { testHubFollowsARecreatedBucket(t, true) })
}

func testHubFollowsARecreatedBucket(t *testing.T, byPrefix bool) {
	const ttl = 10 * time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	jsv, _ := jsOf.Load(kv)
	js := jsv.(jetstream.JetStream)
	h := newStore(kv, js, testLogger{t: t})
	if byPrefix {
		h.(*transport.Store).ShareByPrefix()
	}
	ctx := context.Background()
	if _, _, err := h.Status(ctx, 0); err != nil { // the TTL the watches are tuned to, as a campaign reads it first
		t.Fatal(err)
	}

	keys := []string{"solo"}
	for i := range transport.FoldAt {
		keys = append(keys, fmt.Sprintf("p.s%d", i))
	}
	ws := map[string]jetstream.KeyWatcher{}
	for _, key := range keys {
		w, err := h.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ent, _ := nextUpdate(t, w, "initial values"); ent != nil {
			t.Fatalf("want the end of the (empty) initial values, got %v", ent)
		}
		ws[key] = w
	}
	// With set feeds, the first MaxKeyFeeds keys have a consumer each and
	// the others share a set feed; by prefix, each key before p.s7 has a
	// consumer, and p.s7 follows the prefix's shared feed.
	want := transport.MaxKeyFeeds + 1
	if byPrefix {
		want = transport.FoldAt + 1
	}
	if n := consumers(t, js); n != want {
		t.Fatalf("%d consumers, want %d", n, want)
	}
	followed := []string{"solo", fmt.Sprintf("p.s%d", transport.FoldAt-1)}
	if !byPrefix {
		followed = append(followed, fmt.Sprintf("p.s%d", transport.FoldAt-2))
	}
	// The old bucket: the followed keys are held at revisions far above
	// the ones the new bucket will reach.
	for i := range 20 {
		for _, key := range followed {
			rev, err := kv.Put(ctx, key, []byte("old"))
			if err != nil {
				t.Fatal(err)
			}
			wantUpdate(t, ws[key], fmt.Sprintf("%s: old write %d", key, i), rev, jetstream.KeyValuePut, "old")
		}
	}

	// A key of the prefix that nobody follows, held in the old bucket.
	held, err := kv.Put(ctx, "p.other", []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	if byPrefix {
		prefixKey := followed[1] // the key that follows the prefix's feed, which sees p.other
		wantUpdate(t, ws[prefixKey], "a mark after p.other", mustPut(t, kv, prefixKey, "old"), jetstream.KeyValuePut, "old")
	}

	kv = recreateBucket(t, js, ttl)
	for _, key := range followed {
		w := ws[key]
		rev, err := kv.Create(ctx, key, []byte("new"))
		if err != nil {
			t.Fatal(err)
		}
		wantUpdate(t, w, key+": the new bucket's first write", rev, jetstream.KeyValuePut, "new")
		next, err := kv.Update(ctx, key, []byte("new"), rev)
		if err != nil {
			t.Fatal(err)
		}
		wantUpdate(t, w, key+": its renewal", next, jetstream.KeyValuePut, "new")
		if err := kv.Delete(ctx, key, jetstream.LastRevision(next)); err != nil {
			t.Fatal(err)
		}
		wantUpdate(t, w, key+": its release", next+1, jetstream.KeyValueDelete, "")
		joined, err := h.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wantUpdate(t, joined, key+": a subscription joining later", next+1, jetstream.KeyValueDelete, "")
		if ent, _ := nextUpdate(t, joined, key+": end of initial values"); ent != nil {
			t.Fatalf("%s: got %v, want the end of the initial values", key, ent)
		}
		joined.Stop()
	}
	// The shared feed follows the new bucket now, but a subscription to a
	// key the new bucket has no message of gets the old bucket's: its
	// leader's lease may still hold, and a candidate must not take the key
	// for free before it ends. (Only a prefix's feed saw p.other.)
	if byPrefix {
		other, err := h.Watch(ctx, "p.other")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Stop()
		wantUpdate(t, other, "p.other: the old bucket's last message", held, jetstream.KeyValuePut, "old")
		if ent, _ := nextUpdate(t, other, "p.other: end of initial values"); ent != nil {
			t.Fatalf("p.other: got %v, want the end of the initial values", ent)
		}
		rev, err := kv.Create(ctx, "p.other", []byte("new"))
		if err != nil {
			t.Fatal(err)
		}
		wantUpdate(t, other, "p.other: the new bucket's first write", rev, jetstream.KeyValuePut, "new")
	}

	// A revision of the new bucket that reaches the old one's is the new
	// bucket's message, not a replay.
	for _, key := range followed {
		var rev uint64
		for range 30 {
			r, err := kv.Put(ctx, key, []byte("later"))
			if err != nil {
				t.Fatal(err)
			}
			rev = r
		}
		deadline := time.After(5 * time.Second)
		for got := uint64(0); got != rev; {
			select {
			case ent := <-ws[key].Updates():
				if ent == nil || ent.Revision() <= got || string(ent.Value()) != "later" {
					t.Fatalf("%s: got %v after revision %d, want the later writes in order", key, ent, got)
				}
				got = ent.Revision()
			case <-deadline:
				t.Fatalf("%s: the writes up to revision %d were not all delivered (last %d)", key, rev, got)
			}
		}
	}
}

// TestStandbyFollowsARecreatedBucketThroughItsWatch: the election bucket is
// deleted and made again while a leads and b and c stand by, each over its
// own connection (its own process's hub). a's renewal fails and it stands
// down; one of b and c takes the key in the new bucket once a's lease is
// surely over; when that leader stops, the other learns of the release
// through its watch and leads within a moment, as after any release, not a
// TTL later on its timer (before, its feed delivered nothing after the
// stream was deleted). Nobody ever leads beside another.
func TestStandbyFollowsARecreatedBucketThroughItsWatch(t *testing.T) {
	const ttl = 4 * time.Second
	const key = "recreated"
	ts := newTestServer(t)
	kvA := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	ctx := context.Background()
	for range 20 {
		if _, err := kvA.Put(ctx, "filler", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	a := mustElection(t, "a", key, kvA, append(rec.options("a"), WithLogger(testLogger{t, "a: "}))...)
	stopA := runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })

	standbys := map[string]*Election{}
	stops := map[string]func(){}
	for _, who := range []string{"b", "c"} {
		kv := openBucket(t, connect(t, ts.url()))
		e := mustElection(t, who, key, kv, append(rec.options(who), WithLogger(testLogger{t, who + ": "}))...)
		standbys[who], stops[who] = e, runElection(t, e)
		// who's process watches the key, and its watch shows a leading: a
		// subscription to the process's shared watch gets a's write, then
		// the end of the initial values. It stays to the end, so that the
		// watch outlives the bucket whenever who's campaign joins it.
		js, _ := jsOf.Load(kv)
		st := newStore(kv, js.(jetstream.JetStream), nopLogger{})
		if _, _, err := st.Status(ctx, 0); err != nil {
			t.Fatal(err)
		}
		w, err := st.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
		if ent, _ := nextUpdate(t, w, who+"'s watch"); ent == nil || string(ent.Value()) != "a" {
			t.Fatalf("%s's watch shows %v, want a's write", who, ent)
		}
		if ent, _ := nextUpdate(t, w, who+"'s watch: end of initial values"); ent != nil {
			t.Fatalf("%s's watch: got %v, want the end of the initial values", who, ent)
		}
	}

	jsv, _ := jsOf.Load(kvA)
	recreateBucket(t, jsv.(jetstream.JetStream), ttl)
	rec.waitFor(t, 2*ttl, "a to stand down", func(evs []event) bool { return leader(evs) != "a" })
	stopA()
	evs := rec.waitFor(t, 3*ttl, "b or c to lead the new bucket", func(evs []event) bool { return leader(evs) != "" })
	first := leader(evs)
	other := map[string]string{"b": "c", "c": "b"}[first]
	if v, rev, _ := value(t, kvA, key); v != first || rev > 5 {
		t.Fatalf("the new bucket holds %q at revision %d, want %s at a low revision", v, rev, first)
	}

	released := time.Now()
	stops[first]()
	rec.waitFor(t, 2*ttl, other+" to lead", func(evs []event) bool { return leader(evs) == other })
	took := time.Since(released)
	t.Logf("%s led %v after %s released the key", other, took, first)
	if took > time.Second {
		t.Fatalf("%s led %v after %s released the key in the recreated bucket: it learned of the release on its timer, not through its watch", other, took, first)
	}
	ss := spans(t, rec.snapshot())
	for i := 1; i < len(ss); i++ {
		if prev, cur := ss[i-1], ss[i]; prev.open || cur.start.Before(prev.end) {
			t.Fatalf("%s led from %v while %s led until %v:%s", cur.who, cur.start.Format("15:04:05.000"), prev.who, prev.end.Format("15:04:05.000"), describe(rec.snapshot()))
		}
	}
}

// TestPinStreamCreationTimeSurvivesARestart pins what candidates rely on to
// tell a bucket made again (see noteBucketBorn): the stream's creation time
// changes only then, not when the server restarts on its store. If it
// changed at restarts, every candidate would take the key as removed after
// one and wait a TTL before leading.
func TestPinStreamCreationTimeSurvivesARestart(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := transport.StreamCreated(st)
	if before.IsZero() {
		t.Fatal("the bucket's status carries no creation time")
	}
	ts.restart()
	st, err = openBucket(t, connect(t, ts.url())).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after := transport.StreamCreated(st); !after.Equal(before) {
		t.Fatalf("the stream's creation time changed across a restart: %v, then %v", before, after)
	}
	js, _ := jsOf.Load(kv)
	st, err = recreateBucket(t, js.(jetstream.JetStream), 3*time.Second).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again := transport.StreamCreated(st); !again.After(before) {
		t.Fatalf("the bucket made again was created at %v, not after the first (%v)", again, before)
	}
}

// TestCampaignRecreatedBucketsRevisionsDoNotCutALeaseShort: after the bucket is
// recreated with revisions starting again at 1 (as `nats kv add` makes it),
// a standby follows the new leader's revisions, though they are below the
// old ones, and never takes its lease over when a renewal reaches a
// revision number the standby saw the old leader hold.
func TestCampaignRecreatedBucketsRevisionsDoNotCutALeaseShort(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(time.Hour) // only a compare-and-swap over the revision frees it
	for range 4 {
		st.put("old")
	}
	s := newSim(t, st, "b")
	s.run(100 * time.Millisecond) // b sees old at revision 4

	st.recreate() // the bucket is deleted and made again
	s.run(ttl / 3)
	for i := range 3 * 3 {
		st.put("new") // revisions 1, 2, …: renewals every TTL/3
		s.run(ttl / 3)
		if got := st.latest(); got.Leader != "new" {
			t.Fatalf("renewal %d (revision %d): b took the key from the new bucket's leader: %s", i+1, i+1, got.Describe())
		}
	}
}

// TestCampaignDeposedLeaderFollowsARecreatedBucket: a leads in a bucket whose
// revisions are high (as a Conclave broker makes them); the bucket is
// deleted and made again with revisions from 1, and n, started afterwards,
// takes the key. a is deposed at its next renewal; once n releases the
// key, a leads.
func TestCampaignDeposedLeaderFollowsARecreatedBucket(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.skipRevisions(1_000_000) // the old bucket's revisions
	s := newSim(t, st, "a")
	s.run(time.Second)
	if !s.leading() {
		t.Fatal("a does not lead")
	}
	st.recreate()
	st.put("n")
	for range 6 { // n renews every 3s; a is deposed at its next renewal and sits out
		s.run(3 * time.Second)
		if s.leading() && st.latest().Leader == "n" {
			t.Fatalf("a still leads %v after the bucket was made again under it", clk.Now().Sub(simStart))
		}
		st.put("n")
	}
	s.run(time.Second)
	st.remove(releasePayload("n"))
	released := clk.Now()
	s.run(3 * time.Second)
	if !s.leading() {
		t.Fatalf("a not leading %v after n released (phase %s, view %s, seen revision %d)", clk.Now().Sub(released), s.c.m.phase, s.c.m.view.describe(), s.c.m.seenRev)
	}
}

// TestCampaignLoserOfARecreatedBucketRaceFollowsIt: b sees the key vanish from
// a bucket made again (high old revisions, new ones from 1), and its
// campaign fails; another standby takes the key in the new bucket, renews
// it and releases it. b follows the new leader and leads after its
// release.
func TestCampaignLoserOfARecreatedBucketRaceFollowsIt(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.skipRevisions(1_000_000)
	st.put("old")
	s := newSim(t, st, "b")
	s.run(time.Second)

	st.recreate()
	st.failWrites(nats.ErrNoResponders) // the new stream does not answer b yet
	st.endWatches()
	s.run(200 * time.Millisecond) // b finds the key absent: a removal; its campaign fails
	st.failWrites(nil)
	st.put("other") // the other standby takes the new bucket's key, revision 1
	for range 10 {  // and renews it
		s.run(3 * time.Second)
		if s.leading() {
			t.Fatalf("b leads while other holds the new bucket's key (%s)", st.latest().Describe())
		}
		st.put("other")
	}
	st.remove(releasePayload("other"))
	s.run(2 * time.Second)
	if !s.leading() {
		t.Fatalf("b not leading 2s after the release (phase %s, view %s, seen revision %d)", s.c.m.phase, s.c.m.view.describe(), s.c.m.seenRev)
	}
}

// TestCampaignStandbyWithoutAWatchWaitsOutARecreatedBucket: a standby without a
// watch reads the key at its predicted expiry, after the bucket was deleted
// and made again under a leader whose renewals it did not see, finds it
// absent and takes it. The settings read every term makes first shows the
// new bucket, so it gives that hold up and campaigns again, and leads only
// once the old leader's lease has surely ended.
func TestCampaignStandbyWithoutAWatchWaitsOutARecreatedBucket(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.refuseWatches(errRefused)
	st.put("old")
	s := newSim(t, st, "b")
	s.run(3500 * time.Millisecond)
	st.put("old") // renewals b does not see
	s.run(3 * time.Second)
	st.put("old")
	lastRenewal := clk.Now()
	s.run(time.Second)
	st.recreate()
	oldLease := lastRenewal.Add(ttl - ttl/10)
	for clk.Now().Before(oldLease) {
		s.run(100 * time.Millisecond)
		if s.leading() {
			t.Fatalf("b leads %v after the bucket was made again, while old's lease runs %v more", clk.Now().Sub(lastRenewal), oldLease.Sub(clk.Now()))
		}
	}
	s.run(2 * ttl)
	if !s.leading() {
		t.Fatalf("b not leading %v after the bucket was made again (phase %s, view %s)", clk.Now().Sub(lastRenewal), s.c.m.phase, s.c.m.view.describe())
	}
}
