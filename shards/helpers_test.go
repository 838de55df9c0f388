package shards_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// testTTL is the test brokers' bucket TTL: short, so that crashed members'
// keys expire quickly.
const testTTL = 2 * time.Second

// wait bounds every wait for an event.
const wait = 30 * time.Second

func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	return brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = testTTL })
}

// fleet is the members of one group in a test, and what their callbacks
// told: who holds each shard, every term's token, and violations of the
// group's promises (two holders at once, a token that did not grow). The
// callbacks are recorded by member label: a member's identity unless the
// test gave it another (startAs), so that two members under one identity
// are told apart.
type fleet struct {
	t      *testing.T
	url    string
	group  string
	n      int
	mu     sync.Mutex
	holder map[int]string    // shard → label of the member holding it, per the callbacks
	tokens map[int]uint64    // shard → last token
	moves  map[int]int       // shard → terms begun since resetMoves
	revAt  map[int]time.Time // shard → when its last holder's term ended
	gaps   []time.Duration   // revoked → next assigned, per shard moved
	// declined are the log lines, since resetMoves, of offers of a shard
	// not taken up: the key then went by a release, not a hand-over.
	declined []string
	errs     []string
	change   chan struct{} // poked on every callback
	rec      *countingRecorder
}

func newFleet(t *testing.T, b *broker.Broker, group string, n int) *fleet {
	return &fleet{
		t: t, url: b.ClientURL(), group: group, n: n,
		holder: map[int]string{}, tokens: map[int]uint64{}, moves: map[int]int{}, revAt: map[int]time.Time{},
		change: make(chan struct{}, 1), rec: &countingRecorder{moved: map[shards.MoveCause]int{}},
	}
}

// member is one running member.
type member struct {
	id     string // its label in the fleet's records
	g      *shards.Group
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func (f *fleet) poke() {
	select {
	case f.change <- struct{}{}:
	default:
	}
}

// connect returns a new connection to the fleet's broker, closed when the
// test ends.
func (f *fleet) connect() (*nats.Conn, jetstream.JetStream) {
	f.t.Helper()
	return natstest.Connect(f.t, f.url)
}

// start starts member id on a connection of its own.
func (f *fleet) start(id string, opts ...shards.Option) *member {
	f.t.Helper()
	nc, js := f.connect()
	return f.startOn(nc, js, id, opts...)
}

// startOn starts member id on nc.
func (f *fleet) startOn(nc *nats.Conn, js jetstream.JetStream, id string, opts ...shards.Option) *member {
	f.t.Helper()
	return f.launch(nc, js, id, id, f.n, opts...)
}

// startAs starts member id on a connection of its own, its callbacks
// recorded under label.
func (f *fleet) startAs(label, id string, opts ...shards.Option) *member {
	f.t.Helper()
	nc, js := f.connect()
	return f.launch(nc, js, label, id, f.n, opts...)
}

// startCount starts member id on a connection of its own, given n shards
// rather than the fleet's count.
func (f *fleet) startCount(id string, n int, opts ...shards.Option) *member {
	f.t.Helper()
	nc, js := f.connect()
	return f.launch(nc, js, id, id, n, opts...)
}

// launch starts member id of a group of n shards on nc, its callbacks
// recorded under label.
func (f *fleet) launch(nc *nats.Conn, js jetstream.JetStream, label, id string, n int, opts ...shards.Option) *member {
	f.t.Helper()
	all := append([]shards.Option{
		shards.OnAssigned(func(s int, term *streams.Term) { f.assigned(label, s, term) }),
		shards.OnRevoked(func(s int) { f.revoked(label, s) }),
		shards.WithRecorder(f.rec),
		shards.WithLogger(f.logger(label)),
	}, opts...)
	g, err := shards.NewGroup(id, f.group, n, js, all...)
	if err != nil {
		f.t.Fatalf("NewGroup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{id: label, g: g, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- g.Start(ctx) }()
	f.t.Cleanup(func() { m.stop(f.t) })
	return m
}

// stop ends the member and waits for Start to return.
func (m *member) stop(t *testing.T) error {
	t.Helper()
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	m.cancel = nil
	select {
	case err := <-m.done:
		return err
	case <-time.After(wait):
		t.Errorf("%s: Start did not return within %v", m.id, wait)
		return nil
	}
}

func (f *fleet) assigned(id string, s int, term *streams.Term) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.poke()
	if h, ok := f.holder[s]; ok {
		f.errs = append(f.errs, fmt.Sprintf("shard %d assigned to %s while %s holds it", s, id, h))
	}
	if term.Token() <= f.tokens[s] {
		f.errs = append(f.errs, fmt.Sprintf("shard %d: token %d after %d", s, term.Token(), f.tokens[s]))
	}
	if term.Key() != shards.Key(f.group, s) {
		f.errs = append(f.errs, fmt.Sprintf("shard %d: term of key %s", s, term.Key()))
	}
	f.holder[s], f.tokens[s] = id, term.Token()
	f.moves[s]++
	if at, ok := f.revAt[s]; ok {
		f.gaps = append(f.gaps, time.Since(at))
		delete(f.revAt, s)
	}
}

func (f *fleet) revoked(id string, s int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.poke()
	if f.holder[s] != id {
		f.errs = append(f.errs, fmt.Sprintf("shard %d revoked from %s, held by %q", s, id, f.holder[s]))
	}
	delete(f.holder, s)
	f.revAt[s] = time.Now()
}

// counts returns how many shards each member holds, per the callbacks.
func (f *fleet) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := map[string]int{}
	for _, id := range f.holder {
		c[id]++
	}
	return c
}

// logger logs member label's lines to the test, from info up, and records
// those that say an offer of a shard was not taken up.
func (f *fleet) logger(label string) *logrus.Entry {
	l := brokertest.Logger(f.t)
	l.Logger.SetLevel(max(l.Logger.GetLevel(), logrus.InfoLevel))
	l.Logger.AddHook(declinedHook{f, label})
	return l.WithField("member", label)
}

// declinedHook records in its fleet the log lines of an offer of the key
// not taken up (see the election's onOffer).
type declinedHook struct {
	f     *fleet
	label string
}

func (h declinedHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h declinedHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, "did not take up the offer") {
		h.f.mu.Lock()
		h.f.declined = append(h.f.declined, h.label+": "+e.Message)
		h.f.mu.Unlock()
	}
	return nil
}

// resetMoves forgets the terms and gaps counted so far.
func (f *fleet) resetMoves() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.moves)
	f.gaps, f.declined = nil, nil
	clear(f.revAt)
	f.rec.reset()
}

// await waits until cond holds over the counts, failing after wait.
func (f *fleet) await(what string, cond func(c map[string]int) bool) {
	f.t.Helper()
	deadline := time.After(wait)
	for {
		c := f.counts()
		if cond(c) {
			return
		}
		select {
		case <-f.change:
		case <-time.After(200 * time.Millisecond): // the counts may hold without a callback
		case <-deadline:
			f.t.Fatalf("%s: not within %v; holding %v", what, wait, c)
		}
	}
}

// spread returns a condition: every member in ids holds between lo and hi
// shards, all of the group's shards are held, and nobody else holds any.
func (f *fleet) spread(ids []string, lo, hi int) func(map[string]int) bool {
	return func(c map[string]int) bool {
		total := 0
		for _, id := range ids {
			if c[id] < lo || c[id] > hi {
				return false
			}
			total += c[id]
		}
		return total == f.n && len(c) == len(ids)
	}
}

// check fails the test with every violation the callbacks saw.
func (f *fleet) check() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs {
		f.t.Error(e)
	}
}

// heldAgree checks that each member's Held matches the callbacks.
func (f *fleet) heldAgree(ms ...*member) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range ms {
		var want []int
		for s, id := range f.holder {
			if id == m.id {
				want = append(want, s)
			}
		}
		slices.Sort(want)
		if got := m.g.Held(); !slices.Equal(got, want) {
			f.t.Errorf("%s: Held() = %v, callbacks say %v", m.id, got, want)
		}
	}
}

// countingRecorder counts moves by cause.
type countingRecorder struct {
	mu    sync.Mutex
	moved map[shards.MoveCause]int
}

func (r *countingRecorder) Holding(string, string, int) {}
func (r *countingRecorder) Left(string, string)         {}
func (r *countingRecorder) Moved(_ string, cause shards.MoveCause) {
	r.mu.Lock()
	r.moved[cause]++
	r.mu.Unlock()
}
func (r *countingRecorder) snapshot() map[shards.MoveCause]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.moved)
}
func (r *countingRecorder) reset() { r.mu.Lock(); clear(r.moved); r.mu.Unlock() }

var errUnhealthy = errors.New("unhealthy on purpose")

// logRecorder is a member's logger that passes every line to the test's
// log and keeps the warnings and errors (every line, when all), for a test
// to wait on.
type logRecorder struct {
	t      *testing.T
	prefix string
	all    bool
	mu     sync.Mutex
	lines  []string
	change chan struct{}
}

func newLogRecorder(t *testing.T, member string) *logRecorder {
	return &logRecorder{t: t, prefix: member + ": ", change: make(chan struct{}, 1)}
}

// newFullLogRecorder returns a logRecorder that keeps every line, debug
// and info included.
func newFullLogRecorder(t *testing.T, member string) *logRecorder {
	l := newLogRecorder(t, member)
	l.all = true
	return l
}

func (l *logRecorder) Debugf(f string, a ...any) { l.pass("DEBUG ", f, a...) }
func (l *logRecorder) Infof(f string, a ...any)  { l.pass("INFO ", f, a...) }
func (l *logRecorder) Warnf(f string, a ...any)  { l.keep("WARN ", f, a...) }
func (l *logRecorder) Errorf(f string, a ...any) { l.keep("ERROR ", f, a...) }

// pass logs a debug or info line, and keeps it when all.
func (l *logRecorder) pass(level, f string, a ...any) {
	if l.all {
		l.keep(level, f, a...)
		return
	}
	l.t.Logf(l.prefix+level+f, a...)
}

func (l *logRecorder) keep(level, f string, a ...any) {
	line := level + fmt.Sprintf(f, a...)
	l.t.Log(l.prefix + line)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	select {
	case l.change <- struct{}{}:
	default:
	}
}

// await waits until a line kept contains every one of parts, and returns
// it; it fails the test after wait.
func (l *logRecorder) await(parts ...string) string {
	l.t.Helper()
	return l.awaitAny(parts)
}

// awaitAny waits until a line kept contains every one of the parts of one
// of choices, and returns it; it fails the test after wait.
func (l *logRecorder) awaitAny(choices ...[]string) string {
	l.t.Helper()
	deadline := time.After(wait)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			for _, parts := range choices {
				if containsAll(line, parts) {
					l.mu.Unlock()
					return line
				}
			}
		}
		l.mu.Unlock()
		select {
		case <-l.change:
		case <-deadline:
			l.t.Fatalf("no line mentioning any of %q within %v", choices, wait)
		}
	}
}

// count returns how many lines kept contain every one of parts.
func (l *logRecorder) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if containsAll(line, parts) {
			n++
		}
	}
	return n
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
