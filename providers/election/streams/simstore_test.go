package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/simkv"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// simStore is the store a campaign sees over a simkv bucket on a fake
// clock: every call is a call of the bucket at the clock's now, so the
// broker's rules (compare-and-swap on the latest revision, markers, MaxAge
// expiry, a TTL change applied to stored messages, a bucket made again)
// are simkv's, which conformance_test.go holds to a real nats-server.
// Errors are those transport.Store returns for the same answers, so the
// machine classifies them alike. What simkv does not model, because it is
// a fault of the network or the client rather than a rule of the broker
// (a refused or stuck watch, a write that times out, a watch that misses a
// change, a lagging replica, a watch that ends), is set on the adapter.
// It is safe for concurrent use.
type simStore struct {
	clk *clocktest.Fake

	mu      sync.Mutex
	b       *simkv.Bucket
	watches []*simWatch
	// stamps holds what each write said of itself, by revision and when
	// it was stored, as the real store's headers carry it.
	stamps map[simWriteID]keymsg.Stamp
	calls  map[string]int

	// watchRefusal, when set, refuses new watches.
	watchRefusal error
	// watchesStuck makes new watches deliver nothing at all.
	watchesStuck bool
	// writeFailure, when set, fails every write (not deletes) with it.
	writeFailure error
	// missNextChange keeps the next change from every watch, as a watch
	// that missed it would.
	missNextChange bool
	// staleRead, when set, is what reads return instead of the latest
	// message, as a lagging replica answers.
	staleRead *simkv.Msg
}

// storeKey is the one key the campaign tests elect on.
const storeKey = "k"

// newSimStore makes an empty bucket with MaxAge ttl, created at the
// clock's now, without per-message TTLs (as Choria's buckets are).
func newSimStore(clk *clocktest.Fake, ttl time.Duration) *simStore {
	return &simStore{
		clk:    clk,
		b:      simkv.New(clk.Now(), ttl, false),
		stamps: map[simWriteID]keymsg.Stamp{},
		calls:  map[string]int{},
	}
}

var _ store = (*simStore)(nil)

func (s *simStore) Status(context.Context, time.Duration) (jetstream.KeyValueStatus, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["status"]++
	ttl, created, err := s.b.Status(s.clk.Now())
	s.deliverLocked(0)
	if err != nil {
		return nil, 0, s.gone(err, jetstream.ErrBucketNotFound)
	}
	return simStatus{ttl: ttl, created: created}, 0, nil
}

func (s *simStore) Write(_ context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["write"]++
	if s.writeFailure != nil {
		return 0, s.writeFailure
	}
	now := s.clk.Now()
	n, err := s.b.Put(now, key, value, rev, 0)
	if err != nil {
		return 0, s.writeError(key, err)
	}
	s.stamps[simWriteID{n, now}] = st
	s.deliverLocked(n)
	return n, nil
}

func (s *simStore) Delete(_ context.Context, key string, rev uint64, payload []byte, st keymsg.Stamp) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["delete"]++
	now := s.clk.Now()
	n, err := s.b.Delete(now, key, rev, payload)
	if err != nil {
		return false, s.writeError(key, err)
	}
	s.stamps[simWriteID{n, now}] = st
	s.deliverLocked(n)
	return len(payload) > 0, nil
}

func (s *simStore) Latest(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["latest"]++
	msg, err := s.b.Latest(s.clk.Now(), key)
	s.deliverLocked(0)
	if err != nil {
		return nil, s.gone(err, jetstream.ErrStreamNotFound)
	}
	if s.staleRead != nil {
		msg = s.staleRead
	}
	if msg == nil {
		return nil, nil // a nil *keymsg.Entry would not be a nil entry
	}
	return s.entryLocked(msg), nil
}

func (s *simStore) Watch(_ context.Context, key string) (jetstream.KeyWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["watch"]++
	if s.watchRefusal != nil {
		return nil, s.watchRefusal
	}
	w := &simWatch{s: s, c: make(chan jetstream.KeyValueEntry, 1024)}
	if s.watchesStuck {
		return w, nil // never registered: it delivers nothing
	}
	kw, err := s.b.Watch(s.clk.Now(), key)
	if err != nil {
		return nil, s.gone(err, jetstream.ErrStreamNotFound)
	}
	w.kw = kw
	s.watches = append(s.watches, w)
	s.deliverLocked(0)
	return w, nil
}

// writeError is what transport.Store returns for a write the bucket
// refused: for a compare-and-swap that found another revision, the
// server's "wrong last sequence" naming the key's latest revision; for a
// missing bucket, no answer from its stream.
func (s *simStore) writeError(key string, err error) error {
	if errors.Is(err, simkv.ErrWrongRevision) {
		var latest uint64
		if msg, _ := s.b.Latest(s.clk.Now(), key); msg != nil {
			latest = msg.Revision
		}
		return transport.MapMismatch(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
			Description: fmt.Sprintf("wrong last sequence: %d", latest)})
	}
	return s.gone(err, jetstream.ErrNoStreamResponse)
}

// gone returns missing, the real store's error for a call on a bucket
// that does not exist, when err says so; err itself otherwise.
func (s *simStore) gone(err, missing error) error {
	if errors.Is(err, simkv.ErrNoBucket) {
		return missing
	}
	return err
}

// entryLocked reads msg as the transport does, with its writer's stamp.
func (s *simStore) entryLocked(msg *simkv.Msg) *keymsg.Entry {
	st := s.stamps[simWriteID{msg.Revision, msg.Written}]
	return keymsg.NewEntry(bucketName, msg.Key, msg.Value, msg.Revision, msg.Written, simOp(msg.Op), msg.TTL).WithStamp(st)
}

// deliverLocked hands each watch what the bucket queued for it, and ends
// the watches the bucket ended. With missNextChange set and missed, the
// revision just stored, it is kept from every watch instead.
func (s *simStore) deliverLocked(missed uint64) {
	skip := missed != 0 && s.missNextChange
	if skip {
		s.missNextChange = false
	}
	live := s.watches[:0]
	for _, w := range s.watches {
		for {
			d, ok := w.kw.Next()
			if !ok {
				break
			}
			switch {
			case d.InitialDone:
				w.backlog = append(w.backlog, nil)
			case skip && d.Msg.Revision == missed:
			default:
				w.backlog = append(w.backlog, s.entryLocked(d.Msg))
			}
		}
		w.flushLocked()
		if w.kw.Ended() && len(w.backlog) == 0 {
			w.endLocked()
			continue
		}
		live = append(live, w)
	}
	clear(s.watches[len(live):])
	s.watches = live
}

// put writes value as someone other than the campaign would (an
// operator, another candidate, without a stamp) whatever the key holds,
// and returns its revision.
func (s *simStore) put(value string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	n, err := s.b.Put(now, storeKey, []byte(value), s.latestRevLocked(now), 0)
	if err != nil {
		panic(err)
	}
	s.deliverLocked(n)
	return n
}

// latestRevLocked is the key's latest revision at now, 0 when it has no
// message; s.mu is held.
func (s *simStore) latestRevLocked(now time.Time) uint64 {
	if msg, _ := s.b.Latest(now, storeKey); msg != nil {
		return msg.Revision
	}
	return 0
}

// remove writes a delete marker carrying payload (nil: an operator's
// plain delete) whatever the key holds, and returns its revision.
func (s *simStore) remove(payload []byte) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	n, err := s.b.Delete(now, storeKey, s.latestRevLocked(now), payload)
	if err != nil {
		panic(err)
	}
	s.deliverLocked(n)
	return n
}

// purge writes a purge marker, as kv.Purge does, and returns its revision.
func (s *simStore) purge() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.b.Purge(s.clk.Now(), storeKey)
	s.deliverLocked(n)
	return n
}

// vanish removes the key without a marker, as a stream purge does.
func (s *simStore) vanish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Vanish(s.clk.Now(), storeKey)
}

// recreate deletes the bucket and makes it again with the same TTL, as
// `nats kv rm` and `nats kv add` do: the key has no message, revisions
// start again at 1, the stream's creation time changes, and the watches
// end with the old stream.
func (s *simStore) recreate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	ttl, _, _ := s.b.Status(now)
	s.b.Recreate(now, ttl, false)
	s.deliverLocked(0)
}

// skipRevisions writes n messages to another key and removes them, so
// the key's next revision is n higher, as in a bucket long in use.
func (s *simStore) skipRevisions(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	var rev uint64
	for range n {
		var err error
		if rev, err = s.b.Put(now, "filler", nil, rev, 0); err != nil {
			panic(err)
		}
	}
	s.b.Vanish(now, "filler")
}

// endWatches ends every watch, as a consumer lost with its stream or its
// heartbeats is: each delivers what it has, then its channel closes.
func (s *simStore) endWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverLocked(0)
	for _, w := range s.watches {
		w.kw.Stop()
		w.endLocked()
	}
	s.watches = nil
}

// setTTL changes the bucket's TTL, which the broker applies to stored
// messages too.
func (s *simStore) setTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.SetTTL(s.clk.Now(), ttl)
}

// expireLate makes the broker expire every message stored from now on
// late by that much, as its MaxAge timer can.
func (s *simStore) expireLate(late time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.SetLateness(func(uint64) time.Duration { return late })
}

// refuseWatches makes new watches fail with err (nil: accept them again).
func (s *simStore) refuseWatches(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchRefusal = err
}

// stickWatches makes new watches deliver nothing at all (false: deliver
// again).
func (s *simStore) stickWatches(stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchesStuck = stuck
}

// failWrites makes every write fail with err (nil: succeed again).
func (s *simStore) failWrites(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeFailure = err
}

// missNext keeps the next change of the key from every watch.
func (s *simStore) missNext() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missNextChange = true
}

// readStale makes reads return msg, as a lagging replica would (nil:
// answer with the latest message again).
func (s *simStore) readStale(msg *simkv.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.staleRead = msg
}

// latestMsg is the key's latest message as the bucket holds it, nil when
// it has none.
func (s *simStore) latestMsg() *simkv.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg, _ := s.b.Latest(s.clk.Now(), storeKey)
	return msg
}

// latest is what the key shows now.
func (s *simStore) latest() Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg, _ := s.b.Latest(s.clk.Now(), storeKey)
	if msg == nil {
		return Entry{State: KeyAbsent}
	}
	return ReadEntry(s.entryLocked(msg))
}

// settings are the bucket's TTL and when its stream was created.
func (s *simStore) settings() (ttl time.Duration, created time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl, created, _ = s.b.Status(s.clk.Now())
	return ttl, created
}

// count is how many times the store was asked call ("status", "write",
// "delete", "latest", "watch").
func (s *simStore) count(call string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[call]
}

// simWatch is a simkv watch as a jetstream.KeyWatcher: what the bucket
// queues for it goes to its channel, in order; its channel closes when it
// is stopped or ends.
type simWatch struct {
	s  *simStore
	kw *simkv.Watcher // nil for a stuck watch
	c  chan jetstream.KeyValueEntry
	// backlog is what the bucket delivered that the channel has had no
	// room for yet (nil: the end of the initial values).
	backlog []jetstream.KeyValueEntry
	ended   bool
}

// flushLocked moves the backlog into the channel as far as it has room.
func (w *simWatch) flushLocked() {
	for len(w.backlog) > 0 && !w.ended {
		select {
		case w.c <- w.backlog[0]:
			w.backlog = w.backlog[1:]
		default:
			return
		}
	}
}

func (w *simWatch) endLocked() {
	if !w.ended {
		w.ended = true
		close(w.c)
	}
}

func (w *simWatch) Updates() <-chan jetstream.KeyValueEntry { return w.c }

func (w *simWatch) Stop() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.kw != nil {
		w.kw.Stop()
	}
	w.endLocked()
	w.s.watches = slices.DeleteFunc(w.s.watches, func(x *simWatch) bool { return x == w })
	return nil
}

// simStatus is the status of a simulated bucket: its TTL and when its
// stream was created, as a bucket's status says.
type simStatus struct {
	ttl     time.Duration
	created time.Time
}

// StreamInfo carries the stream's creation time, as a bucket's status does.
func (f simStatus) StreamInfo() *jetstream.StreamInfo {
	return &jetstream.StreamInfo{Created: f.created}
}

func (f simStatus) Bucket() string                   { return bucketName }
func (f simStatus) Values() uint64                   { return 0 }
func (f simStatus) History() int64                   { return 1 }
func (f simStatus) TTL() time.Duration               { return f.ttl }
func (f simStatus) BackingStore() string             { return "simkv" }
func (f simStatus) Bytes() uint64                    { return 0 }
func (f simStatus) IsCompressed() bool               { return false }
func (f simStatus) LimitMarkerTTL() time.Duration    { return 0 }
func (f simStatus) Metadata() map[string]string      { return nil }
func (f simStatus) Config() jetstream.KeyValueConfig { return jetstream.KeyValueConfig{TTL: f.ttl} }

// errRefused is how a broker refuses a watch it has no room for.
var errRefused = errors.New("nats: API error: code=400 err_code=10026 description=maximum consumers limit reached")

// sim drives one campaign by hand on a fake clock and a simStore: every
// step runs on the test's goroutine, so each decision can be checked.
type sim struct {
	t     *testing.T
	clk   *clocktest.Fake
	st    *simStore
	e     *Election
	c     *campaigner
	n     *notifier
	log   *logSink
	turns int       // loop turns taken, to catch spinning
	wake  time.Time // when the campaign asked to be stepped next
	mu    sync.Mutex
	won   int
	lost  int
	terms []*Term
}

// simStart is when the TestCampaign* tests begin. Each drives one
// campaign step by step (newSim) on a fake clock and a simStore: each
// decision of the campaign is checked at the instant it is made. The
// real-NATS tests check the same behaviours end to end.
var simStart = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newSim(t *testing.T, st *simStore, identity string, opts ...Option) *sim {
	t.Helper()
	s := &sim{t: t, clk: st.clk, st: st, log: &logSink{t: t, prefix: identity + ": "}}
	// A fixed seed: a table test runs the same way every time.
	rng := rand.New(rand.NewPCG(uint64(len(identity)), 7))
	opts = append([]Option{withStore(st), WithClock(st.clk), WithLogger(s.log), withRandom(rng.Int64N),
		OnWon(func() { s.mu.Lock(); s.won++; s.mu.Unlock() }),
		OnLost(func() { s.mu.Lock(); s.lost++; s.mu.Unlock() }),
		OnLeading(func(term *Term) { s.mu.Lock(); s.terms = append(s.terms, term); s.mu.Unlock() }),
	}, opts...)
	e, err := NewElection(identity, storeKey, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ttl, created := st.settings()
	tm, err := e.timings(ttl)
	if err != nil {
		t.Fatal(err)
	}
	e.setTimings(tm)
	s.e, s.n = e, newNotifier()
	s.c = newCampaigner(e, s.n, tm, nil)
	s.wake = s.handle(s.c.begin(context.Background(), created)) // born as Start reads it
	t.Cleanup(func() { s.n.close() })
	return s
}

// handle steps the campaign with in, performing what it asks on the
// test's goroutine, as the scheduler does off its loop, until it asks for
// nothing, and returns when to step it next.
func (s *sim) handle(in input) time.Time {
	for {
		wake, act := s.c.handle(in)
		if act.kind == doNothing {
			return wake
		}
		in = s.c.perform(act)
	}
}

// updates is the campaign's watch's channel, or nil without a watch.
func (s *sim) updates() <-chan jetstream.KeyValueEntry {
	if s.c.w == nil {
		return nil
	}
	return s.c.w.Updates()
}

// pump hands the campaign whatever its watch has delivered.
func (s *sim) pump() {
	for {
		select {
		case ent, ok := <-s.updates():
			s.wake = s.handle(s.c.watchInput(ent, ok))
		default:
			return
		}
	}
}

// step takes one turn of the campaign's loop without moving the clock.
func (s *sim) step() time.Time {
	s.pump()
	if !s.wake.After(s.clk.Now()) {
		s.wake = s.handle(input{kind: inTick, now: s.clk.Now()})
	}
	s.pump()
	s.turns++
	return s.wake
}

// run takes loop turns, moving the clock to each wake-up, for d of fake
// time. It fails the test if the loop spins: many turns at one instant.
func (s *sim) run(d time.Duration) {
	s.t.Helper()
	end := s.clk.Now().Add(d)
	sameInstant := 0
	for {
		wake := s.step()
		now := s.clk.Now()
		if !wake.After(now) {
			sameInstant++
			if sameInstant > 50 {
				s.t.Fatalf("campaign spins: %d turns at %v with work due (phase %s, view %s)", sameInstant, now, s.c.m.phase, s.c.m.view.describe())
			}
			continue
		}
		sameInstant = 0
		if wake.After(end) {
			s.clk.Advance(end.Sub(now))
			s.step()
			return
		}
		s.clk.Advance(wake.Sub(now))
	}
}

// stop shuts the campaign down as Stop would.
func (s *sim) stop() {
	s.pump()
	s.wake = s.handle(input{kind: inStop, now: s.clk.Now()})
	if !s.c.done {
		s.t.Fatalf("the campaign did not finish when stopped (phase %s)", s.c.m.phase)
	}
	s.c.drains.Wait()
}

// callbacks waits for queued callbacks to run and returns the counts.
func (s *sim) callbacks() (won, lost int) {
	<-s.n.post(func() {})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.won, s.lost
}

// lastTerm returns the latest term OnLeading was given.
func (s *sim) lastTerm() *Term {
	s.t.Helper()
	<-s.n.post(func() {})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.terms) == 0 {
		s.t.Fatal("no term began")
	}
	return s.terms[len(s.terms)-1]
}

func (s *sim) leading() bool { return s.e.IsLeader() }

// logSink sends logs to t.Log and fails the test on a logged bug.
type logSink struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	lines  []string
}

func (l *logSink) add(level, f string, a ...any) {
	line := level + " " + fmt.Sprintf(f, a...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	l.t.Log(l.prefix + line)
	if strings.Contains(line, "bug:") || strings.Contains(line, "without progress") {
		l.t.Errorf("logged a bug: %s", line)
	}
}

func (l *logSink) Debugf(f string, a ...any) { l.add("DEBUG", f, a...) }
func (l *logSink) Infof(f string, a ...any)  { l.add("INFO", f, a...) }
func (l *logSink) Warnf(f string, a ...any)  { l.add("WARN", f, a...) }
func (l *logSink) Errorf(f string, a ...any) { l.add("ERROR", f, a...) }

// count returns how many lines at level contain s.
func (l *logSink) count(level, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.HasPrefix(line, level+" ") && strings.Contains(line, s) {
			n++
		}
	}
	return n
}
