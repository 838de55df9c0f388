package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/standing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const bucketName = "CHORIA_LEADER_ELECTION"

// testServer is an in-process nats-server with JetStream that can be
// restarted on the same port and store.
type testServer struct {
	t    testing.TB
	dir  string
	port int
	mu   sync.Mutex
	srv  *server.Server
}

func newTestServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{t: t, dir: t.TempDir(), port: natstest.FreePort(t)}
	ts.start()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	opts := &server.Options{
		ServerName: "test", Host: "127.0.0.1", Port: ts.port,
		JetStream: true, StoreDir: ts.dir, NoLog: true, NoSigs: true,
		SyncAlways: true,
	}
	var srv *server.Server
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		srv, err = server.NewServer(opts)
		if err != nil {
			ts.t.Fatalf("server: %v", err)
		}
		go srv.Start()
		if srv.ReadyForConnections(10 * time.Second) {
			break
		}
		srv.Shutdown()
		srv.WaitForShutdown()
		if time.Now().After(deadline) {
			ts.t.Fatalf("server on port %d did not start", ts.port)
		}
	}
	ts.mu.Lock()
	ts.srv = srv
	ts.mu.Unlock()
}

func (ts *testServer) stop() {
	ts.mu.Lock()
	srv := ts.srv
	ts.srv = nil
	ts.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

func (ts *testServer) restart() {
	ts.stop()
	ts.start()
}

func (ts *testServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", ts.port) }

// connect returns a connection that reconnects forever, closed at cleanup.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, _ := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.ReconnectJitter(0, 0), nats.NoCallbacksAfterClientClose())
	return nc
}

// bucketConfig is the election bucket as the broker provisions it.
func bucketConfig(ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: bucketName, TTL: ttl, History: 1, Storage: jetstream.FileStorage, MaxValueSize: 1024}
}

func createBucket(t testing.TB, nc *nats.Conn, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	for storeNotReady(err) && ctx.Err() == nil {
		// A bucket deleted just before (recreateBucket): the server
		// removes its store in the background, and on a busy machine
		// refuses to make it again until it has. Ask again until then.
		time.Sleep(50 * time.Millisecond)
		kv, err = js.CreateKeyValue(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	allowMsgTTL(t, js, cfg.Bucket)
	jsOf.Store(kv, js)
	return kv
}

// storeNotReady reports whether err is the server's refusal to make a
// stream's store ("error creating store for stream", 10049).
func storeNotReady(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10049
}

// createPlainBucket is createBucket without per-message TTLs, as on a NATS
// server that Conclave's broker did not provision.
func createPlainBucket(t testing.TB, nc *nats.Conn, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	jsOf.Store(kv, js)
	return kv
}

// allowMsgTTL turns on per-message TTLs on bucket's stream, as the broker
// provisions it: without limit markers.
func allowMsgTTL(t testing.TB, js jetstream.JetStream, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowMsgTTL = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("allow per-message TTLs: %v", err)
	}
}

// openBucket opens the election bucket over nc.
func openBucket(t testing.TB, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucketName)
	if err != nil {
		t.Fatalf("open bucket: %v", err)
	}
	jsOf.Store(kv, js)
	return kv
}

// event is one callback, stamped on a shared sequence and the monotonic clock.
type event struct {
	who   string
	won   bool
	seq   int64
	at    time.Time
	term  *Term
	cause Cause
}

// recorder collects OnWon/OnLost of many candidates and checks them.
type recorder struct {
	mu     sync.Mutex
	seq    atomic.Int64
	events []event
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

// options returns the callbacks for candidate who.
func (r *recorder) options(who string) []Option {
	var term *Term
	return []Option{
		OnLeading(func(t *Term) {
			term = t
			r.add(event{who: who, won: true, term: t})
		}),
		OnLost(func() {
			r.add(event{who: who, won: false, term: term, cause: term.Cause()})
		}),
	}
}

func (r *recorder) add(ev event) {
	ev.seq = r.seq.Add(1)
	ev.at = time.Now()
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// waitFor waits until cond holds on the events or the deadline passes.
func (r *recorder) waitFor(t testing.TB, within time.Duration, what string, cond func([]event) bool) []event {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		evs := r.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-r.wake:
		case <-time.After(10 * time.Millisecond):
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; events: %s", within, what, describe(r.snapshot()))
		}
	}
}

func describe(evs []event) string {
	s := ""
	for _, e := range evs {
		kind := "lost"
		if e.won {
			kind = "won"
		}
		s += fmt.Sprintf("\n  #%d %s %s", e.seq, e.who, kind)
		if e.term != nil {
			s += fmt.Sprintf(" token %d", e.term.Token())
		}
		if !e.won {
			s += " (" + e.cause.String() + ")"
		}
	}
	return s
}

// leader returns who leads after evs, or "" for nobody.
func leader(evs []event) string {
	leading := map[string]bool{}
	for _, e := range evs {
		leading[e.who] = e.won
	}
	for who, l := range leading {
		if l {
			return who
		}
	}
	return ""
}

func wins(evs []event, who string) int {
	n := 0
	for _, e := range evs {
		if e.won && (who == "" || e.who == who) {
			n++
		}
	}
	return n
}

// span is one term as the library promises it: from the moment IsLeader
// turned true (Term.Started) to OnLost or the term's deadline, whichever was
// first (OnLost only reports an end the clock already decided).
type span struct {
	who        string
	token      uint64
	start, end time.Time
	open       bool
}

// spans turns a recorder's events into terms, failing t on a loss without a
// win or a second win without a loss in between.
func spans(t testing.TB, evs []event) []span {
	t.Helper()
	var out []span
	current := map[string]int{}
	for _, e := range evs {
		i, leading := current[e.who]
		if e.won {
			if leading {
				t.Fatalf("%s won twice without losing in between:%s", e.who, describe(evs))
			}
			current[e.who] = len(out)
			out = append(out, span{who: e.who, token: e.term.Token(), start: e.term.Started(), open: true})
			continue
		}
		if !leading {
			t.Fatalf("%s lost without having won:%s", e.who, describe(evs))
		}
		delete(current, e.who)
		end := e.at
		if vu := e.term.ValidUntil(); vu.Before(end) {
			end = vu
		}
		out[i].end, out[i].open = end, false
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// checkHistory fails t on overlapping terms, a loss without a win, or a
// fencing token that does not grow from term to term.
func checkHistory(t testing.TB, evs []event) []span {
	t.Helper()
	ss := spans(t, evs)
	for i := 1; i < len(ss); i++ {
		prev, cur := ss[i-1], ss[i]
		if prev.open || cur.start.Before(prev.end) {
			t.Fatalf("%s (token %d) led from %v while %s (token %d) led until %v (open %v):%s",
				cur.who, cur.token, cur.start.Format("15:04:05.000000"), prev.who, prev.token, prev.end.Format("15:04:05.000000"), prev.open, describe(evs))
		}
		if cur.token <= prev.token {
			t.Fatalf("token %d of %s does not exceed the previous %d:%s", cur.token, cur.who, prev.token, describe(evs))
		}
	}
	return ss
}

// runElection starts e in the background; the returned func stops it and
// waits for Start to return, failing t if it does not or returns an error.
func runElection(t testing.TB, e *Election) (stop func()) {
	t.Helper()
	return runElectionAllowing(t, e, nil)
}

// runElectionAllowing is runElection where Start may also return an error
// wrapping allowed.
func runElectionAllowing(t testing.TB, e *Election, allowed error) (stop func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			e.Stop()
			select {
			case err := <-done:
				if err != nil && (allowed == nil || !errors.Is(err, allowed)) {
					t.Errorf("Start returned %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("Start of %s did not return after Stop", e.Identity())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// jsOf maps each bucket the helpers opened to its JetStream context, so
// that mustElection can pass it to NewElection as every real user does.
var jsOf sync.Map

// mustElection makes a candidate in kv's bucket over its JetStream context,
// as the framework does (see jsFor and bucketOptions).
func mustElection(t testing.TB, identity, key string, kv jetstream.KeyValue, opts ...Option) *Election {
	t.Helper()
	e, err := NewElection(identity, key, jsFor(kv), bucketOptions(kv, opts...)...)
	if err != nil {
		t.Fatalf("NewElection: %v", err)
	}
	return e
}

// eventually polls cond until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value returns the key's current value, or "" and false when absent.
func value(t testing.TB, kv jetstream.KeyValue, key string) (string, uint64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, false
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(e.Value()), e.Revision(), true
}

// testLogger sends election logs to t.Log.
type testLogger struct {
	t      testing.TB
	prefix string
}

func (l testLogger) Debugf(f string, a ...any) { l.t.Logf(l.prefix+"DEBUG "+f, a...) }
func (l testLogger) Infof(f string, a ...any)  { l.t.Logf(l.prefix+"INFO "+f, a...) }
func (l testLogger) Warnf(f string, a ...any)  { l.t.Logf(l.prefix+"WARN "+f, a...) }
func (l testLogger) Errorf(f string, a ...any) { l.t.Logf(l.prefix+"ERROR "+f, a...) }

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

// setBucketTTL changes the bucket's TTL on its stream, keeping every other
// setting (per-message TTLs cannot be turned off again, so the KV API's
// UpdateKeyValue, which would, is refused on a bucket that has them).
func setBucketTTL(ctx context.Context, js jetstream.JetStream, ttl time.Duration) error {
	st, err := js.Stream(ctx, "KV_"+bucketName)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = ttl, min(ttl, 2*time.Minute)
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// waitStanding waits until who is standing in election key lists a
// candidate of each identity in names.
func waitStanding(t testing.TB, nc *nats.Conn, key string, names ...string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%v to stand in %s", names, key), func() bool {
		cs, err := standing.Standing(context.Background(), nc, bucketName, key, 100*time.Millisecond)
		if err != nil {
			return false
		}
		for _, n := range names {
			if !slices.ContainsFunc(cs, func(c standing.Candidate) bool { return c.Identity == n }) {
				return false
			}
		}
		return true
	})
}

// standAsOlder answers who is standing in election key as c, over nc, and
// nothing else: a candidate of a version that does not take offers of the
// key, so that a hand-over to it ends in a release naming it.
func standAsOlder(t testing.TB, nc *nats.Conn, key string, c standing.Candidate) {
	t.Helper()
	body, _ := json.Marshal(c)
	sub, err := nc.Subscribe(standing.CandidatesSubject(bucketName, key), func(m *nats.Msg) { _ = m.Respond(body) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// errCheckFails is a failing health check's error, as a candidate's
// steward hands it to the machine.
var errCheckFails = errors.New("the health check fails")

// jsFor returns the JetStream context the helpers opened kv with, for
// NewElection: nil for nil.
func jsFor(kv jetstream.KeyValue) jetstream.JetStream {
	if kv == nil {
		return nil
	}
	if js, ok := jsOf.Load(kv); ok {
		return js.(jetstream.JetStream)
	}
	return nil
}

// bucketOptions returns opts after what a candidate or observer needs to
// follow kv, a bucket the helpers opened: InBucket with its name (Start
// opens it over jsFor's context, as in production).
func bucketOptions(kv jetstream.KeyValue, opts ...Option) []Option {
	if kv == nil {
		return opts
	}
	return append([]Option{InBucket(kv.Bucket())}, opts...)
}

// realStore is the production store of kv, a bucket the helpers opened, for
// a test to wrap with faults and give a candidate or observer (withStore).
func realStore(kv jetstream.KeyValue) store { return newStore(kv, jsFor(kv), nopLogger{}) }

// withStore replaces the bucket with s: for table tests with a fake store.
func withStore(s store) Option {
	return func(o *options) error { o.store = s; return nil }
}

// withRandom makes the machine's jitter come from random: for tests that
// must run the same way every time.
func withRandom(random func(n int64) int64) Option {
	return func(o *options) error { o.random = random; return nil }
}

// count returns how many functions it has been given to run so far.
func (t *turns) count() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.served
}
