package streams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestNewElectionRejectsBadInput(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	for _, tc := range []struct {
		name, identity, key string
		bucket              jetstream.KeyValue
		opts                []Option
		want                error
		says                string
	}{
		{"empty key", "n1", "", kv, nil, ErrInvalidKey, "is empty"},
		{"wildcard key", "n1", "my.*", kv, nil, ErrInvalidKey, `contains '*'`},
		{"space in key", "n1", "my app", kv, nil, ErrInvalidKey, `contains ' '`},
		{"leading dot", "n1", ".app", kv, nil, ErrInvalidKey, "dot"},
		{"reserved prefix", "n1", "_kv_x", kv, nil, ErrInvalidKey, "reserves"},
		{"empty identity", "", "app", kv, nil, ErrInvalidIdentity, "host name"},
		{"padded identity", " n1", "app", kv, nil, ErrInvalidIdentity, "spaces"},
		{"control in identity", "n1\n", "app", kv, nil, ErrInvalidIdentity, "control"},
		{"nil JetStream", "n1", "app", nil, nil, ErrInvalidOption, "pass jetstream.New(nc)"},
		{"nil backoff", "n1", "app", kv, []Option{WithBackoff(nil)}, ErrInvalidOption, "WithBackoff(nil)"},
		{"negative grace", "n1", "app", kv, []Option{WithGrace(-time.Second)}, ErrInvalidOption, "negative"},
		{"zero margin", "n1", "app", kv, []Option{WithSafetyMargin(0)}, ErrInvalidOption, "WithSafetyMargin(0s) must be positive"},
		{"zero renew", "n1", "app", kv, []Option{WithRenewInterval(0)}, ErrInvalidOption, "WithRenewInterval(0s) must be positive"},
		{"zero timeout", "n1", "app", kv, []Option{WithRequestTimeout(0)}, ErrInvalidOption, "WithRequestTimeout(0s) must be positive"},
		{"negative minimum term", "n1", "app", kv, []Option{WithMinTerm(-time.Second)}, ErrInvalidOption, "WithMinTerm(-1s) must be positive"},
		{"nil clock", "n1", "app", kv, []Option{WithClock(nil)}, ErrInvalidOption, "nil"},
		{"nil logger", "n1", "app", kv, []Option{WithLogger(nil)}, ErrInvalidOption, "nil"},
		{"nil recorder", "n1", "app", kv, []Option{WithRecorder(nil)}, ErrInvalidOption, "nil"},
		{"an observer's option", "n1", "app", kv, []Option{OnChange(func(Leadership) {})}, ErrInvalidOption, "OnChange serves observers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewElection(tc.identity, tc.key, jsFor(tc.bucket), bucketOptions(tc.bucket, tc.opts...)...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	for _, key := range []string{"my_app", "a/b=c-d", "team.app.v2"} {
		if _, err := NewElection("n1", key, jsFor(kv)); err != nil {
			t.Errorf("valid key %q rejected: %v", key, err)
		}
	}
}

func TestStartRejectsBucketsThatCannotHoldElections(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	js, _ := jetstream.New(nc)
	for _, tc := range []struct {
		name string
		cfg  jetstream.KeyValueConfig
		opts []Option
		want []error
		says string
	}{
		{"TTL too small", jetstream.KeyValueConfig{Bucket: "SMALL", TTL: 500 * time.Millisecond}, nil, []error{ErrInvalidBucket, ErrTTLTooSmall}, "below 1s, the minimum"},
		{"no TTL", jetstream.KeyValueConfig{Bucket: "FOREVER"}, nil, []error{ErrInvalidBucket}, "never expire"},
		{"history", jetstream.KeyValueConfig{Bucket: "HIST", TTL: 5 * time.Second, History: 5}, nil, []error{ErrInvalidBucket}, "keeps 5 values per key"},
		{"limit markers", jetstream.KeyValueConfig{Bucket: "MARKERS", TTL: 5 * time.Second, LimitMarkerTTL: 5 * time.Second}, nil, []error{ErrInvalidBucket}, "limit markers"},
		{"value size", jetstream.KeyValueConfig{Bucket: "TINY", TTL: 5 * time.Second, MaxValueSize: 4}, nil, []error{ErrInvalidBucket}, "at most 4 bytes"},
		{"margin vs TTL", jetstream.KeyValueConfig{Bucket: "MARGIN", TTL: 2 * time.Second}, []Option{WithSafetyMargin(time.Second)}, []error{ErrInvalidOption}, "below half"},
		{"renew vs TTL", jetstream.KeyValueConfig{Bucket: "RENEW", TTL: 2 * time.Second}, []Option{WithRenewInterval(time.Second)}, []error{ErrInvalidOption}, "no room to retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := js.CreateKeyValue(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			jsOf.Store(kv, js)
			e := mustElection(t, "a-long-identity", "app", kv, tc.opts...)
			done := make(chan error, 1)
			go func() { done <- e.Start(context.Background()) }()
			select {
			case err := <-done:
				for _, want := range tc.want {
					if !errors.Is(err, want) {
						t.Fatalf("Start = %v, want %v", err, want)
					}
				}
				if !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("Start = %v, want it to say %q", err, tc.says)
				}
			case <-time.After(10 * time.Second):
				e.Stop()
				t.Fatal("Start did not reject the bucket")
			}
		})
	}
}

// TestObserverRefusesABucketWithoutTTL: an observer's Run ends with
// ErrInvalidBucket naming the observer and the bucket.
func TestObserverRefusesABucketWithoutTTL(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	js, err := jetstream.New(connect(t, ts.url()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "FOREVER"}); err != nil {
		t.Fatal(err)
	}
	o, err := NewObserver("app", js, InBucket("FOREVER"))
	if err != nil {
		t.Fatal(err)
	}
	err = o.Run(ctx)
	if !errors.Is(err, ErrInvalidBucket) || !strings.HasPrefix(err.Error(), "observer app: ") || !strings.Contains(err.Error(), "bucket FOREVER has no TTL") {
		t.Fatalf("Run = %v, want ErrInvalidBucket from observer app saying bucket FOREVER has no TTL", err)
	}
}

func TestSingleCandidateLeadsWithItsIdentityAsValue(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	var campaigns atomic.Int32
	e := mustElection(t, "n1.example.net", "my_app", kv, append(rec.options("n1"), OnCampaign(func(State) { campaigns.Add(1) }))...)
	if e.State() != UnknownState || e.IsLeader() {
		t.Fatalf("before Start: state %v, leader %v", e.State(), e.IsLeader())
	}
	stop := runElection(t, e)
	evs := rec.waitFor(t, 5*time.Second, "n1 to win", func(evs []event) bool { return wins(evs, "n1") == 1 })
	if !e.IsLeader() || e.State() != LeaderState {
		t.Fatalf("after OnWon: leader %v state %v", e.IsLeader(), e.State())
	}
	got, rev, ok := value(t, kv, "my_app")
	if !ok || got != "n1.example.net" {
		t.Fatalf("key holds %q (present %v), want the identity", got, ok)
	}
	term := evs[0].term
	if term.Token() == 0 || term.Token() > rev || term.Identity() != "n1.example.net" || term.Key() != "my_app" {
		t.Fatalf("term %v: token %d, key revision %d", term, term.Token(), rev)
	}
	if !term.Valid() || term.Context().Err() != nil || term.Err() != nil {
		t.Fatal("term of the leader is not valid")
	}
	if until := term.ValidUntil(); until.Before(time.Now()) || until.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("valid until %v, want within the TTL from now", until)
	}
	// Renewals keep it leader past the TTL.
	rev0 := rev
	eventually(t, 5*time.Second, "renewals", func() bool { _, r, _ := value(t, kv, "my_app"); return r > rev0+1 })
	if !e.IsLeader() || len(rec.snapshot()) != 1 || campaigns.Load() < 3 {
		t.Fatalf("after renewals: leader %v, events %s, campaigns %d", e.IsLeader(), describe(rec.snapshot()), campaigns.Load())
	}
	stop()
	evs = rec.snapshot()
	if len(evs) != 2 || evs[1].won || evs[1].cause != CauseReleased {
		t.Fatalf("after Stop: %s", describe(evs))
	}
	if term.Valid() || term.Context().Err() == nil || !errors.Is(term.Err(), ErrTermEnded) {
		t.Fatal("term still valid after Stop")
	}
	select {
	case <-term.Context().Done():
	default:
		t.Fatal("term context not done after Stop")
	}
	if e.State() != UnknownState || e.IsLeader() {
		t.Fatalf("after Stop: state %v leader %v", e.State(), e.IsLeader())
	}
	// Released: with no standby to take it, the key is removed so that any
	// candidate can create it.
	if v, _, ok := value(t, kv, "my_app"); ok {
		t.Fatalf("released key still holds %q", v)
	}
	if err := e.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start = %v", err)
	}
}

func TestStopBeforeStartAndStopFromCallbacks(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))

	e := mustElection(t, "n1", "early", kv)
	e.Stop()
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("Start after Stop = %v", err)
	}

	for _, where := range []string{"OnWon", "OnLeading", "OnCampaign"} {
		t.Run(where, func(t *testing.T) {
			var e *Election
			var lost, won atomic.Int32
			stopper := func() {
				e.Stop()
				e.Stop()
				_ = e.IsLeader()
				_ = e.State()
			}
			opts := []Option{OnLost(func() { lost.Add(1) }), OnWon(func() { won.Add(1) })}
			switch where {
			case "OnWon":
				opts = append(opts, OnWon(func() { won.Add(1); stopper() }))
			case "OnLeading":
				opts = append(opts, OnLeading(func(*Term) { stopper() }))
			case "OnCampaign":
				opts = append(opts, OnCampaign(func(State) { stopper() }))
			}
			e = mustElection(t, "n1", "cb_"+strings.ToLower(where), kv, opts...)
			done := make(chan error, 1)
			go func() { done <- e.Start(context.Background()) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Stop from a callback deadlocked")
			}
			if won.Load() != lost.Load() {
				t.Fatalf("won %d times, lost %d times", won.Load(), lost.Load())
			}
		})
	}
}

func TestContextCancelEndsTheCampaign(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	e := mustElection(t, "n1", "ctx", kv, rec.options("n1")...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Start(ctx) }()
	rec.waitFor(t, 5*time.Second, "a win", func(evs []event) bool { return wins(evs, "") == 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start = %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
	evs := rec.snapshot()
	if len(evs) != 2 || evs[1].cause != CauseReleased {
		t.Fatalf("events: %s", describe(evs))
	}
}

func TestGracefulHandoffOrdersLostBeforeWon(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(5*time.Second))
	rec := newRecorder()
	var inLost atomic.Bool
	var overlapped atomic.Bool
	a := mustElection(t, "a", "handoff", kv, append(rec.options("a"), WithLogger(testLogger{t, "a: "}), OnLost(func() {
		inLost.Store(true)
		time.Sleep(50 * time.Millisecond) // a slow OnLost: the next leader must wait for it
		rec.add(event{who: "a", won: false, term: nil})
		inLost.Store(false)
	}))...)
	stopA := runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "handoff", kv, append(rec.options("b"), WithLogger(testLogger{t, "b: "}), OnWon(func() {
		if inLost.Load() {
			overlapped.Store(true)
		}
	}))...)
	runElection(t, b)
	time.Sleep(200 * time.Millisecond) // b is watching; nothing may change
	if leader(rec.snapshot()) != "a" {
		t.Fatalf("leader changed without a stop: %s", describe(rec.snapshot()))
	}
	start := time.Now()
	stopA()
	rec.waitFor(t, 5*time.Second, "b to win", func(evs []event) bool { return wins(evs, "b") == 1 })
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("handoff took %v, want far less than the 5s TTL", took)
	}
	if overlapped.Load() {
		t.Fatal("b won while a's OnLost was still running")
	}
	got, _, _ := value(t, kv, "handoff")
	if got != "b" {
		t.Fatalf("key holds %q after handoff", got)
	}
}

// TestAnOnLostThatOutlivesItsLeaseHoldsNoElection: the key is not renewed
// while a stopping leader's OnLost runs, so one that outlives the lease
// lets the key expire and the standby lead, as after a crash: the order of
// a graceful hand-over (TestGracefulHandoffOrdersLostBeforeWon) holds only
// for an OnLost that returns within the lease.
func TestAnOnLostThatOutlivesItsLeaseHoldsNoElection(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	inLost, release := make(chan struct{}), make(chan struct{})
	a := mustElection(t, "a", "hung", kv, append(rec.options("a"), OnLost(func() {
		close(inLost)
		<-release
	}))...)
	stopA := runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	var wonWhileLost atomic.Bool
	b := mustElection(t, "b", "hung", kv, append(rec.options("b"), OnWon(func() {
		select {
		case <-inLost:
			select {
			case <-release:
			default:
				wonWhileLost.Store(true)
			}
		default:
		}
	}))...)
	runElection(t, b)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stopA() }()
	rec.waitFor(t, 10*ttl, "b to win while a's OnLost hangs", func(evs []event) bool { return wins(evs, "b") == 1 })
	close(release)
	<-stopped
	if !wonWhileLost.Load() {
		t.Fatal("b won, but not while a's OnLost ran")
	}
	if got, _, _ := value(t, kv, "hung"); got != "b" {
		t.Fatalf("key holds %q, want b", got)
	}
}

func TestTokensGrowAcrossTermsAndBrokerRestarts(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Second))
	var tokens []uint64
	for i := 0; i < 4; i++ {
		rec := newRecorder()
		e := mustElection(t, "n1", "tokens", kv, rec.options("n1")...)
		stop := runElection(t, e)
		evs := rec.waitFor(t, 10*time.Second, "a win", func(evs []event) bool { return wins(evs, "") == 1 })
		tokens = append(tokens, evs[0].term.Token())
		stop()
		if i == 1 {
			// Let everything expire, then restart the broker: the stream's
			// sequence, and with it the token, must carry on.
			eventually(t, 5*time.Second, "the bucket to empty", func() bool {
				st, err := kv.Status(context.Background())
				return err == nil && st.Values() == 0
			})
			ts.restart()
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not grow", tokens)
		}
	}
}

func TestReleaseOnStopFalseLeavesTheKeyToExpire(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "norelease", kv, append(rec.options("a"), WithReleaseOnStop(false))...)
	stopA := runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	stopA()
	if v, _, ok := value(t, kv, "norelease"); !ok || v != "a" {
		t.Fatalf("key holds %q (present %v) after a stop without release", v, ok)
	}
	b := mustElection(t, "b", "norelease", kv, rec.options("b")...)
	start := time.Now()
	runElection(t, b)
	rec.waitFor(t, 5*time.Second, "b to win", func(evs []event) bool { return wins(evs, "b") == 1 })
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("b won after %v: it should have waited for the key to expire", took)
	}
}

func TestConcurrentCandidatesElectOne(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		e := mustElection(t, "host", "many", kv, rec.options(string(rune('a'+i)))...)
		wg.Add(1)
		go func() { defer wg.Done(); runElection(t, e) }()
	}
	wg.Wait()
	rec.waitFor(t, 5*time.Second, "one win", func(evs []event) bool { return wins(evs, "") == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := wins(rec.snapshot(), ""); n != 1 {
		t.Fatalf("%d wins among ten candidates: %s", n, describe(rec.snapshot()))
	}
}

// TestAStreamThatIsNoBucketIsRefused: a stream named as the bucket's that
// is no KV bucket (it keeps every message of a key) ends a candidate's
// Start and an observer's Run with ErrInvalidBucket saying so, instead of
// retrying.
func TestAStreamThatIsNoBucketIsRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_PLAIN", Subjects: []string{"$KV.PLAIN.>"}}); err != nil {
		t.Fatal(err)
	}
	e, err := NewElection("a", "app", js, InBucket("PLAIN"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewObserver("app", js, InBucket("PLAIN"))
	if err != nil {
		t.Fatal(err)
	}
	for what, run := range map[string]func(context.Context) error{"Start": e.Start, "Run": o.Run} {
		err := run(ctx)
		if !errors.Is(err, ErrInvalidBucket) || !strings.Contains(err.Error(), "not a key-value bucket") {
			t.Errorf("%s = %v, want ErrInvalidBucket saying the stream is not a key-value bucket", what, err)
		}
	}
}
