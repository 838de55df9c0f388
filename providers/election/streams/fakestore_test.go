package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// fakeStore is an in-memory election bucket of one key on a fake clock: the
// store a campaign sees, with the broker's rules (compare-and-swap on the
// latest revision, markers, expiry TTL after each write) and no network.
type fakeStore struct {
	mu       sync.Mutex
	clk      *clocktest.Fake
	ttl      time.Duration
	seq      uint64
	msg      *transport.Entry // the key's latest message, nil when it has none
	expires  time.Time
	watchers []*fakeWatcher
	// watchErr, when set, refuses new watches; stuckWatch makes new watches
	// deliver nothing at all.
	watchErr   error
	stuckWatch bool
	// writeErr, when set, fails every write as a timeout would.
	writeErr error
	// silent, when set, keeps the next change from the watchers, as a
	// watch that missed it would.
	silent bool
	// late is how late the store expires a message, as a broker's expiry
	// timer can be.
	late  time.Duration
	calls map[string]int
	// created is when the bucket's stream was made, as its status says.
	created time.Time
	// stale, when set, is what reads return instead of the latest message,
	// as a lagging replica answers.
	stale *transport.Entry
}

func newFakeStore(clk *clocktest.Fake, ttl time.Duration) *fakeStore {
	return &fakeStore{clk: clk, ttl: ttl, calls: map[string]int{}, created: clk.Now()}
}

// expireLocked drops the message once the clock passed its expiry.
func (s *fakeStore) expireLocked() {
	if s.msg != nil && !s.clk.Now().Before(s.expires.Add(s.late)) {
		s.msg = nil // silent, as a MaxAge expiry is
	}
}

func (s *fakeStore) appendLocked(op jetstream.KeyValueOp, value []byte) uint64 {
	s.seq++
	now := s.clk.Now()
	s.msg = transport.NewEntry(bucketName, "k", value, s.seq, now, op, 0)
	s.expires = now.Add(s.ttl)
	if s.silent {
		s.silent = false
		return s.seq
	}
	for _, w := range s.watchers {
		w.send(s.msg)
	}
	return s.seq
}

func (s *fakeStore) lastLocked() uint64 {
	s.expireLocked()
	if s.msg == nil {
		return 0
	}
	return s.msg.Revision()
}

func (s *fakeStore) Status(context.Context, time.Duration) (jetstream.KeyValueStatus, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["status"]++
	return fakeStatus{ttl: s.ttl, created: s.created}, 0, nil
}

func (s *fakeStore) Write(_ context.Context, _ string, value []byte, rev uint64, _ transport.Stamp) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["write"]++
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	if s.lastLocked() != rev {
		return 0, jetstream.ErrKeyExists
	}
	return s.appendLocked(jetstream.KeyValuePut, value), nil
}

func (s *fakeStore) Delete(_ context.Context, _ string, rev uint64, payload []byte, _ transport.Stamp) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["delete"]++
	if s.lastLocked() != rev {
		return false, jetstream.ErrKeyExists
	}
	s.appendLocked(jetstream.KeyValueDelete, payload)
	return payload != nil, nil
}

func (s *fakeStore) Latest(context.Context, string) (jetstream.KeyValueEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["latest"]++
	if s.stale != nil {
		return s.stale, nil
	}
	s.expireLocked()
	if s.msg == nil {
		return nil, nil
	}
	return s.msg, nil
}

func (s *fakeStore) Watch(context.Context, string) (jetstream.KeyWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["watch"]++
	if s.watchErr != nil {
		return nil, s.watchErr
	}
	w := &fakeWatcher{s: s, c: make(chan jetstream.KeyValueEntry, 1024)}
	if !s.stuckWatch {
		s.expireLocked()
		if s.msg != nil {
			w.c <- s.msg
		}
		w.c <- nil
		s.watchers = append(s.watchers, w)
	}
	return w, nil
}

// outside changes the key as someone other than the campaign would: an
// operator, another candidate.
func (s *fakeStore) put(value string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(jetstream.KeyValuePut, []byte(value))
}

func (s *fakeStore) mark(op jetstream.KeyValueOp, payload []byte) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(op, payload)
}

// vanish removes the key without a marker, as a stream purge does.
func (s *fakeStore) vanish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msg = nil
}

// recreate deletes the bucket and makes it again, as `nats kv rm` and `nats
// kv add` do: the key has no message, revisions start again at 1, and the
// stream's creation time changes. Watches are left to the caller
// (endWatches), as whether they survive depends on the client.
func (s *fakeStore) recreate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msg, s.seq, s.created = nil, 0, s.clk.Now()
}

// endWatches ends every watch, as a deleted stream ends its consumers.
func (s *fakeStore) endWatches() {
	s.mu.Lock()
	ws := append([]*fakeWatcher(nil), s.watchers...)
	s.mu.Unlock()
	for _, w := range ws {
		_ = w.Stop()
	}
}

func (s *fakeStore) setTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl = ttl
	if s.msg != nil {
		s.expires = s.msg.Created().Add(ttl) // the broker applies a new MaxAge to stored messages
	}
}

func (s *fakeStore) latest() Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	if s.msg == nil {
		return Entry{}
	}
	return ReadEntry(s.msg)
}

func (s *fakeStore) count(call string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[call]
}

type fakeWatcher struct {
	s       *fakeStore
	c       chan jetstream.KeyValueEntry
	stopped bool
}

func (w *fakeWatcher) send(ent jetstream.KeyValueEntry) {
	if !w.stopped {
		w.c <- ent
	}
}

func (w *fakeWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.c }

func (w *fakeWatcher) Stop() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.c)
		for i, o := range w.s.watchers {
			if o == w {
				w.s.watchers = append(w.s.watchers[:i], w.s.watchers[i+1:]...)
				break
			}
		}
	}
	return nil
}

type fakeStatus struct {
	ttl     time.Duration
	created time.Time
}

// StreamInfo carries the stream's creation time, as a bucket's status does.
func (f fakeStatus) StreamInfo() *jetstream.StreamInfo {
	return &jetstream.StreamInfo{Created: f.created}
}

func (f fakeStatus) Bucket() string                   { return bucketName }
func (f fakeStatus) Values() uint64                   { return 0 }
func (f fakeStatus) History() int64                   { return 1 }
func (f fakeStatus) TTL() time.Duration               { return f.ttl }
func (f fakeStatus) BackingStore() string             { return "fake" }
func (f fakeStatus) Bytes() uint64                    { return 0 }
func (f fakeStatus) IsCompressed() bool               { return false }
func (f fakeStatus) LimitMarkerTTL() time.Duration    { return 0 }
func (f fakeStatus) Metadata() map[string]string      { return nil }
func (f fakeStatus) Config() jetstream.KeyValueConfig { return jetstream.KeyValueConfig{TTL: f.ttl} }

// sim drives one campaign by hand on a fake clock and a fake store: every
// step runs on the test's goroutine, so each decision can be checked.
type sim struct {
	t     *testing.T
	clk   *clocktest.Fake
	st    *fakeStore
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

func newSim(t *testing.T, st *fakeStore, identity string, opts ...Option) *sim {
	t.Helper()
	s := &sim{t: t, clk: st.clk, st: st, log: &logSink{t: t, prefix: identity + ": "}}
	// A fixed seed: a table test runs the same way every time.
	rng := rand.New(rand.NewPCG(uint64(len(identity)), 7))
	opts = append([]Option{withStore(st), WithClock(st.clk), WithLogger(s.log), withRandom(rng.Int64N),
		OnWon(func() { s.mu.Lock(); s.won++; s.mu.Unlock() }),
		OnLost(func() { s.mu.Lock(); s.lost++; s.mu.Unlock() }),
		OnLeading(func(term *Term) { s.mu.Lock(); s.terms = append(s.terms, term); s.mu.Unlock() }),
	}, opts...)
	e, err := NewElection(identity, "k", nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := e.timings(st.ttl)
	if err != nil {
		t.Fatal(err)
	}
	e.setTimings(tm)
	s.e, s.n = e, newNotifier()
	s.c = newCampaigner(e, s.n, tm, nil)
	s.wake = s.handle(s.c.begin(context.Background(), st.created)) // born as Start reads it
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

var errRefused = errors.New("nats: API error: code=400 err_code=10026 description=maximum consumers limit reached")
