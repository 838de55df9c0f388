package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/keymsg"
)

// changes collects what an observer reports.
type changes struct {
	mu   sync.Mutex
	list []Leadership
}

func (c *changes) add(l Leadership) {
	c.mu.Lock()
	c.list = append(c.list, l)
	c.mu.Unlock()
}

func (c *changes) waitFor(t *testing.T, what string, cond func(Leadership) bool) Leadership {
	t.Helper()
	var found Leadership
	eventually(t, 10*time.Second, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, l := range c.list {
			if cond(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func (c *changes) reset() {
	c.mu.Lock()
	c.list = nil
	c.mu.Unlock()
}

func runObserver(t *testing.T, o *Observer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestObserverFollowsTermsReleasesRemovalsAndExpiries(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	seen := &changes{}
	o, err := NewObserver("watched", jsFor(kv), OnChange(seen.add), ObserveRenewals())
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	seen.waitFor(t, "no leader at first", func(l Leadership) bool { return l.Event == EventCurrent && !l.HasLeader() })

	rec := newRecorder()
	a := mustElection(t, "a", "watched", kv, rec.options("a")...)
	stopA := runElection(t, a)
	evs := rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	elected := seen.waitFor(t, "a elected", func(l Leadership) bool { return l.Event == EventElected })
	if elected.Leader != "a" || elected.Token != evs[0].term.Token() || elected.Since.IsZero() {
		t.Fatalf("elected %+v, want a with token %d", elected, evs[0].term.Token())
	}
	renewed := seen.waitFor(t, "a renewed", func(l Leadership) bool { return l.Event == EventRenewed })
	if renewed.Token != elected.Token || renewed.Revision <= elected.Revision || !renewed.Since.Equal(elected.Since) {
		t.Fatalf("renewal %+v lost the term's token or start (%+v)", renewed, elected)
	}
	if got := o.Leadership(); got.Leader != "a" {
		t.Fatalf("Leadership() = %v", got)
	}

	stopA() // a leader marks its release
	stepped := seen.waitFor(t, "a to step down", func(l Leadership) bool { return !l.HasLeader() && l.Revision > renewed.Revision })
	if stepped.Event != EventReleased || stepped.ReleasedBy != "a" || stepped.ReleasedByInstance != a.Instance() || stepped.State != KeyReleased {
		t.Fatalf("a's release reported as %+v, want released by a/%s", stepped, a.Instance())
	}

	// A leader that stops without releasing: the key expires.
	stopB := runElection(t, mustElection(t, "b", "watched", kv, append(rec.options("b"), WithReleaseOnStop(false))...))
	b := seen.waitFor(t, "b elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "b" })
	stopB()
	seen.reset()
	expired := seen.waitFor(t, "b's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if expired.HasLeader() || expired.Revision < b.Revision {
		t.Fatalf("expired %+v", expired)
	}

	// A forced stand-down.
	runElection(t, mustElection(t, "c", "watched", kv, rec.options("c")...))
	seen.waitFor(t, "c elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "c" })
	if err := kv.Delete(context.Background(), "watched"); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "c removed", func(l Leadership) bool { return l.Event == EventRemoved })
	seen.waitFor(t, "c elected again", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "c" })
}

// TestObserverReportsAnExpiryAStandbyTakesAtOnce: a standby takes an
// expired key within milliseconds, before the observer's view can tell
// that it expired; the observer still reports the expiry, then the take.
func TestObserverReportsAnExpiryAStandbyTakesAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	_, seen := newObserver(t, "quick", kv)
	seen.waitFor(t, "no leader at first", func(l Leadership) bool { return l.Event == EventCurrent && !l.HasLeader() })
	rec := newRecorder()
	stopA := runElection(t, mustElection(t, "a", "quick", kv, append(rec.options("a"), WithReleaseOnStop(false))...))
	a := seen.waitFor(t, "a elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "a" })
	runElection(t, mustElection(t, "b", "quick", kv, rec.options("b")...))
	stopA() // a stops renewing: its key expires, and b takes it
	seen.waitFor(t, "b elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "b" })

	seen.mu.Lock()
	defer seen.mu.Unlock()
	var after []Leadership
	for i, l := range seen.list {
		if l.Event == EventElected && l.Leader == "a" {
			after = seen.list[i+1:]
		}
	}
	var events []string
	for _, l := range after {
		events = append(events, fmt.Sprintf("%s %s@%d", l.Event, l.Leader, l.Revision))
	}
	if len(after) < 2 || after[0].Event != EventExpired || after[0].HasLeader() || after[0].Revision < a.Revision ||
		after[1].Leader != "b" {
		t.Fatalf("after a was elected the observer reported %v; want a's expiry (no leader, revision at least %d), then b", events, a.Revision)
	}
}

// TestObserverReportsAnExpiryBeforeAFreshCandidatesTerm: a candidate that
// finds the key absent the moment it expired writes a term that begins at
// once, over no running term: the observer reports the expiry, and the new
// term as no hand-over. The test writes as the two candidates would.
func TestObserverReportsAnExpiryBeforeAFreshCandidatesTerm(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	js := jsFor(kv)
	_, seen := newObserver(t, "fresh", kv)
	seen.waitFor(t, "no leader at first", func(l Leadership) bool { return l.Event == EventCurrent && !l.HasLeader() })
	begin := func(identity string) {
		t.Helper()
		m := nats.NewMsg("$KV." + bucketName + ".fresh")
		m.Data = []byte(identity)
		keymsg.Stamp{Instance: "i-" + identity, Term: keymsg.TermBegins}.Set(m.Header)
		if _, err := js.PublishMsg(context.Background(), m, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			t.Fatalf("%s's campaign: %v", identity, err)
		}
	}
	begin("a")
	seen.waitFor(t, "a elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "a" })
	// a never renews; b finds the key gone and begins its term at once.
	eventually(t, 3*ttl, "a's key to expire", func() bool {
		_, err := kv.Get(context.Background(), "fresh")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	begin("b")
	b := seen.waitFor(t, "b elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "b" })
	if b.HandedOverBy != "" {
		t.Fatalf("b's term, begun after a's key expired, reported as handed over by %s", b.HandedOverBy)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	expired := false
	for _, l := range seen.list {
		if l.Event == EventExpired && !l.HasLeader() {
			expired = true
		}
		if l.Leader == "b" && !expired {
			t.Fatalf("b reported (%s) before a's expiry", l.Event)
		}
	}
}

// TestObserverStartedMidTermKnowsTheLeaderAndTheToken: an observer that
// starts mid-term knows the leader, and for a Conclave leader, whose every
// write says its term, the token; for a leader whose writes say nothing
// (Choria's), the token is unknown.
func TestObserverStartedMidTermKnowsTheLeaderAndTheToken(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "mid", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	_, rev0, _ := value(t, kv, "mid")
	eventually(t, 5*time.Second, "a renewal", func() bool { _, r, _ := value(t, kv, "mid"); return r > rev0 })

	seen := &changes{}
	o, err := NewObserver("mid", jsFor(kv), OnChange(seen.add))
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	l := seen.waitFor(t, "the current leader", func(l Leadership) bool { return l.Event == EventCurrent })
	if l.Leader != "a" || l.Token != rev0 || l.Revision == 0 || l.ExpiresBy.Before(l.Renewed) {
		t.Fatalf("mid-term view %+v: want leader a with token %d", l, rev0)
	}
	if s := l.String(); !containsAll(s, "a leads", fmt.Sprintf("token %d", rev0)) {
		t.Fatalf("String() = %q", s)
	}

	// A leader whose writes say nothing of their term, as Choria's.
	legacy := mustCreate(t, kv, "legacy", "choria-node")
	if _, err := kv.Update(context.Background(), "legacy", []byte("choria-node"), legacy); err != nil {
		t.Fatal(err)
	}
	seen = &changes{}
	o, err = NewObserver("legacy", jsFor(kv), OnChange(seen.add))
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	l = seen.waitFor(t, "the current leader", func(l Leadership) bool { return l.Event == EventCurrent })
	if l.Leader != "choria-node" || l.Token != 0 || !l.Since.IsZero() {
		t.Fatalf("mid-term view of a legacy leader %+v: want its name, unknown token and start", l)
	}
	if s := l.String(); !containsAll(s, "choria-node leads", "token unknown") {
		t.Fatalf("String() = %q", s)
	}
}

func TestNewObserverRejectsBadInput(t *testing.T) {
	t.Parallel()
	if _, err := NewObserver("bad key", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("got %v", err)
	}
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	if _, err := NewObserver("ok", nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil bucket: %v", err)
	}
	if _, err := NewObserver("ok", jsFor(kv), WithLogger(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil logger: %v", err)
	}
	// A candidate's option is refused by name; the shared ones are taken.
	if _, err := NewObserver("ok", jsFor(kv), WithPriority(3)); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithPriority") {
		t.Fatalf("a candidate's option: %v", err)
	}
	if _, err := NewObserver("ok", jsFor(kv), InBucket("OTHER"), WithLogger(nopLogger{}), WithRecorder(nopRecorder{}), OnChange(func(Leadership) {})); err != nil {
		t.Fatalf("the options observers take: %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !contains(s, p) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// tapStore is a real bucket's store seen through a tap: the test can cut
// the watches it handed out (as a broker or network fault would), make
// entries look older or newer than the broker wrote them (a broker clock
// that differs from the local one), and count reads.
type tapStore struct {
	store
	shift time.Duration // subtracted from every entry's Created

	gets    atomic.Int64
	mu      sync.Mutex
	watches []*tapWatcher
}

// newTap returns a tap on kv's store whose entries look shift older.
func newTap(kv jetstream.KeyValue, shift time.Duration) *tapStore {
	return &tapStore{store: realStore(kv), shift: shift}
}

func (k *tapStore) Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error) {
	w, err := k.store.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	tw := &tapWatcher{inner: w, out: make(chan jetstream.KeyValueEntry), cut: make(chan struct{}), shift: k.shift}
	go tw.forward()
	k.mu.Lock()
	k.watches = append(k.watches, tw)
	k.mu.Unlock()
	return tw, nil
}

// SettingsChanges passes on the tapped store's notices of changes of the
// bucket's settings, as the store a candidate or observer uses does.
func (k *tapStore) SettingsChanges(notify func(sent time.Time)) (stop func()) {
	return k.store.(settingsNotifier).SettingsChanges(notify)
}

func (k *tapStore) Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	k.gets.Add(1)
	ent, err := k.store.Latest(ctx, key)
	if ent != nil {
		ent = shifted(ent, k.shift)
	}
	return ent, err
}

// cutWatches ends every watch handed out so far, as if the broker dropped it.
func (k *tapStore) cutWatches() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watches {
		w.Stop()
	}
}

func (k *tapStore) watchCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.watches)
}

// shifted is ent as written shift earlier, with the stamp and TTL it has.
func shifted(ent jetstream.KeyValueEntry, shift time.Duration) jetstream.KeyValueEntry {
	e := ent.(*keymsg.Entry)
	return keymsg.NewEntry(e.Bucket(), e.Key(), e.Value(), e.Revision(), e.Created().Add(-shift), e.Operation(), e.MsgTTL()).WithStamp(e.Stamp())
}

type tapWatcher struct {
	inner jetstream.KeyWatcher
	out   chan jetstream.KeyValueEntry
	cut   chan struct{}
	once  sync.Once
	shift time.Duration
}

func (w *tapWatcher) forward() {
	defer close(w.out)
	for {
		select {
		case ent, ok := <-w.inner.Updates():
			if !ok {
				return
			}
			if ent != nil {
				ent = shifted(ent, w.shift)
			}
			select {
			case w.out <- ent:
			case <-w.cut:
				w.stopInner()
				return
			}
		case <-w.cut:
			w.stopInner()
			return
		}
	}
}

func (w *tapWatcher) stopInner() {
	_ = w.inner.Stop()
	for range w.inner.Updates() {
	}
}

func (w *tapWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.out }

func (w *tapWatcher) Stop() error {
	w.once.Do(func() { close(w.cut) })
	return nil
}

// publishRelease writes identity's release marker over revision rev of key,
// as a holder's graceful release does: a delete marker with a revision check
// whose payload names the holder.
func publishRelease(t *testing.T, nc *nats.Conn, key, identity string, rev uint64) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("$KV." + bucketName + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	m.Data = []byte("released by " + identity)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		t.Fatalf("release marker: %v", err)
	}
	return ack.Sequence
}

func mustCreate(t *testing.T, kv jetstream.KeyValue, key, value string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := kv.Create(ctx, key, []byte(value))
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	return rev
}

// waitExpired waits until key is gone from kv.
func waitExpired(t *testing.T, kv jetstream.KeyValue, key string, within time.Duration) {
	t.Helper()
	eventually(t, within, key+" to expire", func() bool { _, _, ok := value(t, kv, key); return !ok })
}

// newObserver returns an observer of key in kv reporting into a fresh
// changes, running until the test ends.
func newObserver(t *testing.T, key string, kv jetstream.KeyValue, opts ...Option) (*Observer, *changes) {
	t.Helper()
	seen := &changes{}
	o, err := NewObserver(key, jsFor(kv), bucketOptions(kv, append([]Option{OnChange(seen.add), WithLogger(testLogger{t: t})}, opts...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	return o, seen
}

// TestObserverReportsReleasesAndRemovals checks that the observer reads
// every message as ReadEntry does: a holder's release marker is a release
// naming the holder; an empty value, a delete and a purge are removals.
func TestObserverReportsReleasesAndRemovals(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Minute))
	ctx := context.Background()

	_, seen := newObserver(t, "k", kv)
	seen.waitFor(t, "no key at first", func(l Leadership) bool { return l.Event == EventCurrent && l.State == KeyAbsent })
	rev := mustCreate(t, kv, "k", "host1")
	seen.waitFor(t, "host1 elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "host1" })
	marker := publishRelease(t, nc, "k", "host1", rev)
	l := seen.waitFor(t, "host1's release", func(l Leadership) bool { return l.Revision == marker })
	if l.Event != EventReleased || l.State != KeyReleased || l.ReleasedBy != "host1" || l.HasLeader() {
		t.Fatalf("release marker reported as %+v, want released by host1", l)
	}

	rev = mustCreate(t, kv, "k", "host2")
	seen.waitFor(t, "host2 elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "host2" && l.Token == rev })
	emptied, err := kv.Put(ctx, "k", nil) // `nats kv put KEY ""`: not a release
	if err != nil {
		t.Fatal(err)
	}
	l = seen.waitFor(t, "the empty value", func(l Leadership) bool { return l.Revision == emptied })
	if l.Event != EventRemoved || l.State != KeyRemoved || l.ReleasedBy != "" || l.HasLeader() {
		t.Fatalf("empty value reported as %+v, want removed", l)
	}

	rev, err = kv.Update(ctx, "k", []byte("host3"), emptied)
	if err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "host3 elected", func(l Leadership) bool { return l.Event == EventElected && l.Token == rev })
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "the delete", func(l Leadership) bool { return l.Event == EventRemoved && l.Revision > rev && l.State == KeyRemoved })

	rev = mustCreate(t, kv, "k", "host4")
	seen.waitFor(t, "host4 elected", func(l Leadership) bool { return l.Event == EventElected && l.Token == rev })
	if err := kv.Purge(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "the purge", func(l Leadership) bool { return l.Event == EventRemoved && l.Revision > rev && l.State == KeyRemoved })

	// Found at start: a released key.
	rev = mustCreate(t, kv, "found", "host0")
	publishRelease(t, nc, "found", "host0", rev)
	_, found := newObserver(t, "found", kv)
	l = found.waitFor(t, "the state found", func(l Leadership) bool { return l.Event == EventCurrent })
	if l.State != KeyReleased || l.ReleasedBy != "host0" || l.HasLeader() {
		t.Fatalf("found %+v, want released by host0", l)
	}
}

// TestObserverReArmsTheExpiryCheckAfterAWatchRestart: after its watch
// restarts, the observer finds the revision it knew; it must still notice
// when that write expires.
func TestObserverReArmsTheExpiryCheckAfterAWatchRestart(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	tap := newTap(kv, 0)
	rev := mustCreate(t, kv, "ghost", "g") // never renewed
	o, seen := newObserver(t, "ghost", kv, withStore(tap))
	seen.waitFor(t, "g leading", func(l Leadership) bool { return l.Event == EventCurrent && l.Leader == "g" })

	tap.cutWatches()
	eventually(t, 5*time.Second, "the watch to restart", func() bool { return tap.watchCount() >= 2 })
	l := seen.waitFor(t, "g's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if l.HasLeader() || l.Revision != rev || l.State != KeyAbsent {
		t.Fatalf("expired %+v", l)
	}
	if got := o.Leadership(); got.HasLeader() {
		t.Fatalf("Leadership() = %v after the expiry", got)
	}
}

// TestObserverFollowsTTLChanges raises the bucket's TTL under an observer:
// it reports the expiry the new TTL gives, and does not poll meanwhile.
func TestObserverFollowsTTLChanges(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Second))
	tap := newTap(kv, 0)
	o, seen := newObserver(t, "k", kv, withStore(tap))
	seen.waitFor(t, "no key at first", func(l Leadership) bool { return l.Event == EventCurrent })

	rev := mustCreate(t, kv, "k", "g") // never renewed
	created := time.Now()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := setBucketTTL(ctx, js, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "g elected", func(l Leadership) bool { return l.Event == EventElected && l.Token == rev })
	eventually(t, 3*time.Second, "the observer to learn the new TTL", func() bool {
		l := o.Leadership()
		return l.ExpiresBy.Sub(l.Renewed) == 4*time.Second
	})
	l := seen.waitFor(t, "g's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if l.Revision != rev || time.Since(created) < 4*time.Second {
		t.Fatalf("expired %+v %v after the write, want after the new TTL 4s", l, time.Since(created))
	}
	// One read at the new expiry, perhaps one more if the broker was late:
	// not one every 400ms from the old TTL on.
	if n := tap.gets.Load(); n > 3 {
		t.Errorf("the observer read the key %d times for one expiry", n)
	}
}

// TestObserverDoesNotTrustTheBrokersClock runs observers whose clock is
// ahead of the broker's by 2/3 of the TTL (the tap makes every entry look
// 2s older): they predict expiries from when they saw the writes, and read
// the key once or twice, not every 400ms.
func TestObserverDoesNotTrustTheBrokersClock(t *testing.T) {
	const ttl = 3 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	skew := 2 * ttl / 3

	// A write seen as it happens.
	live := newTap(kv, skew)
	_, seen := newObserver(t, "live", kv, withStore(live))
	seen.waitFor(t, "no key at first", func(l Leadership) bool { return l.Event == EventCurrent })
	created := time.Now()
	mustCreate(t, kv, "live", "g")
	seen.waitFor(t, "g elected", func(l Leadership) bool { return l.Event == EventElected })

	// A write found when the observer starts: its age comes from the
	// broker's clock, clamped to the TTL; after one early read the observer
	// waits for the latest the write can expire.
	mustCreate(t, kv, "found", "h")
	found := newTap(kv, skew)
	_, seenFound := newObserver(t, "found", kv, withStore(found))
	seenFound.waitFor(t, "h leading", func(l Leadership) bool { return l.Event == EventCurrent && l.Leader == "h" })

	seen.waitFor(t, "g's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if d := time.Since(created); d < ttl {
		t.Fatalf("expiry reported %v after the write, before the TTL", d)
	}
	seenFound.waitFor(t, "h's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if n := live.gets.Load(); n > 3 {
		t.Errorf("the observer of a live write read the key %d times for one expiry", n)
	}
	if n := found.gets.Load(); n > 4 {
		t.Errorf("the observer of a found write read the key %d times for one expiry", n)
	}
}

// TestObserverTellsAReElectionFromARenewal: the same leader writing again
// is a renewal only while its previous write lives. Re-created right after
// its key expired, it begins a new term with a new token, even within
// TTL + 1s of its previous write. The tap makes the broker's clock 1s ahead
// of the local one, so that the observer's own expiry check comes after the
// re-election (as it may on any machine).
func TestObserverTellsAReElectionFromARenewal(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	_, seen := newObserver(t, "k", kv, withStore(newTap(kv, -time.Second)), ObserveRenewals())
	seen.waitFor(t, "no key at first", func(l Leadership) bool { return l.Event == EventCurrent })

	first := mustCreate(t, kv, "k", "a")
	seen.waitFor(t, "a elected", func(l Leadership) bool { return l.Event == EventElected && l.Token == first })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	renewal, err := kv.Update(ctx, "k", []byte("a"), first)
	if err != nil {
		t.Fatal(err)
	}
	l := seen.waitFor(t, "a's renewal", func(l Leadership) bool { return l.Revision == renewal })
	if l.Event != EventRenewed || l.Token != first {
		t.Fatalf("renewal reported as %+v, want renewed with token %d", l, first)
	}

	waitExpired(t, kv, "k", 5*time.Second)
	again := mustCreate(t, kv, "k", "a")
	l = seen.waitFor(t, "a's new term", func(l Leadership) bool { return l.Revision == again })
	if l.Event != EventElected || l.Token != again || l.Leader != "a" {
		t.Fatalf("re-election after an expiry reported as %+v, want elected with token %d", l, again)
	}
}

// TestObserverEndsWhenTheConnectionCloses: Run ends with an error wrapping
// nats.ErrConnectionClosed, as Election.Start does, instead of retrying on
// a connection that will never come back.
func TestObserverEndsWhenTheConnectionCloses(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	for _, when := range []string{"while running", "before Run"} {
		t.Run(when, func(t *testing.T) {
			nc := connect(t, ts.url())
			seen := &changes{}
			o, err := NewObserver("k", jsFor(openBucket(t, nc)), OnChange(seen.add))
			if err != nil {
				t.Fatal(err)
			}
			if when == "before Run" {
				nc.Close()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			if when == "while running" {
				seen.waitFor(t, "the state found", func(l Leadership) bool { return l.Event == EventCurrent })
				nc.Close()
			}
			select {
			case err := <-done:
				done <- err
				if !errors.Is(err, nats.ErrConnectionClosed) {
					t.Fatalf("Run = %v, want an error wrapping nats.ErrConnectionClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not end after its connection closed")
			}
		})
	}
}
