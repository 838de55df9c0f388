package streams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket/fit"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/nostanding"
	"github.com/conclave-io/conclave/providers/election/internal/errs"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// Election is one candidate campaigning in one election: a key in a
// JetStream KV bucket whose value is the leader's identity. Create one with
// NewElection, run it with Start, end it with Stop or by cancelling Start's
// context. Its methods are safe for concurrent use, callbacks included.
type Election struct {
	identity string
	instance string
	key      string
	js       jetstream.JetStream
	store    store // set by Start once it opened the bucket (earlier by tests)
	opts     options

	mu          sync.Mutex
	started     bool
	running     bool
	stopped     bool
	cancel      context.CancelFunc
	term        *Term
	lastRenewal time.Time
	tm          timings      // as the campaign last adopted them
	campaign    *campaigner  // the running campaign, for HandOver
	handedTo    string       // who took the key up when the latest term ended, "" for none
	steward     *steward     // announces the candidate and moves leadership where it should go
	waiting     *queuedBegin // while it waits to begin (enqueueBegin)
}

// NewElection returns a candidate named identity for the election key, in
// the bucket CHORIA_LEADER_ELECTION (or the one InBucket names), over the
// JetStream context js of the connection to campaign on, whose watches it
// shares with the process's other candidates on that connection. It checks
// its arguments, returning errors wrapping ErrInvalidKey, ErrInvalidIdentity
// or ErrInvalidOption (js nil included), but does not talk to the broker:
// Start opens the bucket and checks its settings.
func NewElection(identity, key string, js jetstream.JetStream, opts ...Option) (*Election, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := errs.ValidateIdentity(identity); err != nil {
		return nil, err
	}
	o, err := newOptions(js, opts, false)
	if err != nil {
		return nil, err
	}
	instance := o.instance
	if instance == "" {
		instance = keymsg.RandomInstance()
	}
	return &Election{identity: identity, instance: instance, key: key, js: js, store: o.store, opts: o}, nil
}

// ValidateKey returns an error wrapping ErrInvalidKey unless key is a valid
// NATS KV key that names one election (no wildcards).
func ValidateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %q %s: use letters, digits and the characters - _ / = . (a dot not first or last), for example \"my_app\"", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("is empty")
	case strings.HasPrefix(key, ".") || strings.HasSuffix(key, "."):
		return bad("starts or ends with a dot")
	case strings.Contains(key, ".."):
		return bad("has an empty token between dots")
	case strings.HasPrefix(key, "_kv"):
		return bad("starts with _kv, which NATS reserves")
	}
	for _, r := range key {
		if !nameRune(r, "-_/=.") {
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	return nil
}

// Identity returns the candidate's identity.
func (e *Election) Identity() string { return e.identity }

// Key returns the election key.
func (e *Election) Key() string { return e.key }

// Instance is this candidate's own name among the candidates that share
// its identity (the copies of a program on one host, say): random unless
// WithInstance set it. Who is standing lists candidates by instance, a
// hand-over may name one, and every write to the key carries it (the
// Conclave-Instance header) so observers tell copies apart; the key's value
// stays the identity, as Choria's tools show it.
func (e *Election) Instance() string { return e.instance }

// Start campaigns until ctx ends or Stop is called, and returns nil then.
// It first opens the bucket and reads its settings, retrying with backoff
// while the broker is unreachable or the bucket does not exist (logging
// why, once for each cause), and returns an error wrapping ErrInvalidBucket
// if they cannot hold elections safely. It returns an error wrapping
// nats.ErrConnectionClosed once the connection is closed for good, or
// ErrPermissionDenied once the broker refused the election's requests for
// permissions: neither is retried, a leader then stands down at once
// (CauseClosed, CauseDenied), and either, met once Stop was called, ends
// the stop and is no error. A leader that stops gets OnLost and, unless
// WithReleaseOnStop(false), offers its key to the best-ranked healthy
// standby it knows of (as HandOver does), or else releases it; Start
// returns after that. A candidate that never wrote its key stops at once
// (a claim in flight within a second); one that did keeps its requests'
// and release's timeouts. A second Start returns ErrAlreadyStarted.
func (e *Election) Start(ctx context.Context) error {
	result := make(chan error, 1)
	e.Launch(ctx, func(err error) { result <- err })
	return <-result
}

// Launch starts the campaign as Start does and returns at once; ended,
// unless nil, is called with what Start would return once the campaign has
// wound down, on a goroutine of its own (it may block, and call the
// Election's methods). It runs many candidates in one process: they share
// one scheduler, and a candidate at rest holds no goroutine, where Start
// holds its caller's. Elections launched together begin (open the bucket,
// read its settings) at most 64 at a time per connection and bucket. Stop,
// or the end of ctx, ends the campaign as with Start, at once for one still
// waiting to begin.
func (e *Election) Launch(ctx context.Context, ended func(error)) {
	if ended == nil {
		ended = func(error) {}
	}
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		go ended(ErrAlreadyStarted)
		return
	}
	e.started = true
	if e.stopped {
		e.mu.Unlock()
		go ended(nil)
		return
	}
	caller := ctx
	ctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	e.running = true
	e.mu.Unlock()
	e.enqueueBegin(caller, ctx, func(err error) {
		cancel()
		e.locked(func() { e.running = false })
		ended(err)
	})
}

// begin opens the bucket, reads its settings and sets the campaign going,
// then returns (see enqueueBegin); finish is called with the campaign's
// outcome once it has wound down, on a goroutine of its own.
func (e *Election) begin(caller, ctx context.Context, finish func(error)) {
	ttl, born, err := e.awaitBucket(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = nil
		}
		go finish(err)
		return
	}
	tm, err := e.timings(ttl)
	if err != nil {
		go finish(err)
		return
	}
	e.setTimings(tm)
	if e.opts.healthCheck != nil {
		// The first check is the user's code: it runs off the turn of
		// beginning, which the next election takes.
		go e.setGoing(caller, ctx, tm, born, finish)
		return
	}
	e.setGoing(caller, ctx, tm, born, finish)
}

// setGoing sets the campaign going on the process's scheduler, once the
// bucket's settings are read (see begin).
func (e *Election) setGoing(caller, ctx context.Context, tm timings, born time.Time, finish func(error)) {
	n := newNotifier()
	var s *steward
	var unhealthy error
	// Benchmarks may run candidates without who is standing (nostanding).
	if nc := connOf(e.js); nc != nil && e.opts.store == nil && !nostanding.Marked(ctx) {
		if e.opts.minTerm == 0 {
			e.opts.minTerm = max(2*tm.ttl, 10*time.Second)
		}
		s = newSteward(e, nc, e.opts.bucket, born)
		// The steward outlives the campaign's context: a leader that stops
		// still knows whom to offer the key to, and answers who is
		// standing until it has wound down.
		s.ctx, s.campaign, s.caller = context.WithoutCancel(ctx), ctx, caller
		if e.opts.healthCheck != nil {
			// An unhealthy candidate must not win at start.
			unhealthy = s.checkBeforeStart(ctx)
		}
	}
	c := newCampaigner(e, n, tm, s)
	e.mu.Lock()
	e.campaign, e.steward = c, s
	stopped := e.stopped // Stop came before the campaign could be told
	e.mu.Unlock()
	c.launch(caller, ctx, born, unhealthy, func(err error) {
		if s != nil {
			s.stop()
		}
		n.close()
		finish(err)
	})
	if stopped {
		c.postStop()
	}
}

// tell passes in to the running campaign's machine, if any.
func (e *Election) tell(in input) {
	if c := e.current(); c != nil {
		c.post(ask{in: in})
	}
}

// current returns the running campaign, or nil.
func (e *Election) current() *campaigner {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.campaign
}

// HandOver hands a running term over to the candidate named to: an
// identity (any of its copies), an instance (see Instance), or
// identity/instance; a copy of this one's identity is another candidate.
// It first asks who is standing: when no candidate so named answers, or the
// one named is unhealthy or stopping, it returns an error wrapping
// ErrHandOverRefused and the term goes on. Otherwise the term ends (OnLost,
// CauseHandedOver) and the leader offers the key to that candidate over
// core NATS; it takes the key with one write over the leader's last
// revision, its term beginning as after a release (Choria's candidates see
// a takeover). Not taken up within the offer timeout (the request timeout,
// at most 1s and the window below), the key is released with a mark naming
// to, or nobody if to refused the offer: the election's other Conclave
// candidates, this one included, leave a key so marked to to for a quarter
// TTL (0.5s to 5s) from when they learn of the release; Choria's see an
// ordinary release. It returns once to took the key or the key is
// released, or with an error wrapping ErrNotLeader when this candidate does
// not lead (or stops meanwhile), ErrHandOverTooSoon while a leader deposed
// before this term may still count on the key (the term goes on; ask again
// later), ErrInvalidIdentity for a bad name, or the release's error (the
// term has ended; the key expires in its time).
func (e *Election) HandOver(ctx context.Context, to string) error {
	if err := errs.ValidateIdentity(to); err != nil {
		return fmt.Errorf("election %s: hand over: %w", e.key, err)
	}
	if to == e.instance || to == e.identity+"/"+e.instance {
		return fmt.Errorf("election %s: hand over: %w: %q is this candidate; name another", e.key, ErrInvalidIdentity, to)
	}
	e.mu.Lock()
	c, s := e.campaign, e.steward
	e.mu.Unlock()
	if c == nil || !e.IsLeader() {
		return fmt.Errorf("election %s: hand over: %w", e.key, ErrNotLeader)
	}
	ho := handOver{to: to}
	switch {
	case s != nil:
		// Checked before the term ends, not to leave the election
		// without a leader.
		t, err := s.target(ctx, to)
		if err != nil {
			return fmt.Errorf("election %s: hand over to %s: %w", e.key, to, err)
		}
		ho = handOver{to: t.Identity, instance: t.Instance}
	case to == e.identity:
		return fmt.Errorf("election %s: hand over: %w: %q is this candidate; name another", e.key, ErrInvalidIdentity, to)
	}
	return e.handOver(ctx, ho)
}

// handOver asks the running campaign to hand its term over to ho.
func (e *Election) handOver(ctx context.Context, ho handOver) error {
	c := e.current()
	if c == nil {
		return fmt.Errorf("election %s: hand over: %w", e.key, ErrNotLeader)
	}
	to := ho.to
	if ho.instance != "" {
		to += " (instance " + ho.instance + ")"
	}
	done := make(chan error, 1)
	c.post(ask{in: input{kind: inHandOver, handOver: ho}, answer: noteHandOver, done: done})
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("election %s: hand over to %s: %w", e.key, to, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeOver takes up a leader's offer of the key: it returns nil once this
// candidate's write holds the key, and why not otherwise.
func (e *Election) takeOver(ctx context.Context, req standing.HandOverRequest) error {
	c := e.current()
	if c == nil {
		return errors.New("the candidate is not campaigning")
	}
	done := make(chan error, 1)
	in := input{kind: inOffered, from: req.From, expect: req.Revision, born: req.Epoch}
	c.post(ask{in: in, answer: noteTakeOver, done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the campaign and returns at once; Start returns when the
// election has wound down. A term that has not begun does not begin, unless
// its beginning is being decided at that instant (then OnLost follows at
// once). It is safe to call from any goroutine, more than once, before
// Start, and from inside a callback.
func (e *Election) Stop() {
	e.mu.Lock()
	e.stopped = true
	cancel, c, waiting := e.cancel, e.campaign, e.waiting
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	// The campaign's stop waits on Start's context, not on its child that
	// cancel ends (see campaigner.launch, enqueueBegin).
	if waiting != nil {
		waiting.leave()
	}
	if c != nil {
		c.postStop()
	}
}

// HandedOverTo returns the candidate that took up the key this one offered,
// on Stop or by HandOver, as its latest term ended (or, stopped before a
// term began on a key it had taken, as it stopped). It is "" when the key
// went otherwise (a release, a loss), has not gone, or was never held. Read
// after Start returns, it tells whether the stop handed over, and to whom.
func (e *Election) HandedOverTo() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.handedTo
}

// IsLeader reports whether this candidate leads at this instant, read from
// the clock: it turns false the moment the local deadline passes, before
// any timer or goroutine has run.
func (e *Election) IsLeader() bool {
	t := e.Term()
	return t != nil && t.Valid()
}

// State returns LeaderState while IsLeader, CandidateState while the election
// runs otherwise, and UnknownState when it is not running.
func (e *Election) State() State {
	e.mu.Lock()
	running, t := e.running, e.term
	e.mu.Unlock()
	switch {
	case t != nil && t.Valid():
		return LeaderState
	case running:
		return CandidateState
	default:
		return UnknownState
	}
}

// Term returns the current term, or nil when this candidate has not led since
// its last term ended. The term may have just expired: check its Valid.
func (e *Election) Term() *Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// Healthy returns nil unless this candidate believes it leads but its last
// successful renewal is older than the renew interval in force (it follows
// the bucket's TTL) plus tolerance: a leader whose renewals fail or are
// wedged. It is meant for liveness probes.
func (e *Election) Healthy(tolerance time.Duration) error {
	e.mu.Lock()
	t, last, interval := e.term, e.lastRenewal, e.tm.renew
	e.mu.Unlock()
	if t == nil || !t.Valid() {
		return nil
	}
	if age := e.opts.clock.Now().Sub(last); age > interval+tolerance {
		return fmt.Errorf("election %s: leader %s last renewed %v ago, longer than the renew interval %v plus tolerance %v", e.key, e.identity, age.Round(time.Millisecond), interval, tolerance)
	}
	return nil
}

// locked runs f under e.mu.
func (e *Election) locked(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
}

func (e *Election) setTerm(t *Term)         { e.locked(func() { e.term = t }) }
func (e *Election) setTimings(tm timings)   { e.locked(func() { e.tm = tm }) }
func (e *Election) setRenewed(at time.Time) { e.locked(func() { e.lastRenewal = at }) }
func (e *Election) setHandedTo(to string)   { e.locked(func() { e.handedTo = to }) }
func (e *Election) setStore(st store)       { e.locked(func() { e.store = st }) }

// ttl is the bucket's TTL in force, as the campaign last read it.
func (e *Election) ttl() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tm.ttl
}

// awaitBucket opens the bucket (see bucketAccess.await) and returns its
// TTL, checked, and when its stream was created (zero if the store cannot
// tell).
func (e *Election) awaitBucket(ctx context.Context) (time.Duration, time.Time, error) {
	timeout := cmp.Or(e.opts.requestTimeout, 5*time.Second) // the option is > 0 when given
	b := bucketAccess{js: e.js, name: e.opts.bucket, who: "election " + e.key, timeout: timeout, stop: ctx, log: e.opts.log}
	st, status, err := b.await(ctx, e.store)
	e.setStore(st)
	switch {
	case errors.Is(err, nats.ErrConnectionClosed):
		return 0, time.Time{}, fmt.Errorf("election %s: %w: give NewElection a JetStream context of an open connection", e.key, err)
	case errors.Is(err, ErrPermissionDenied):
		return 0, time.Time{}, fmt.Errorf("election %s: %w", e.key, err)
	case err != nil:
		return 0, time.Time{}, err
	}
	ttl, invalid := checkBucket(status, e.identity)
	return ttl, transport.StreamCreated(status), invalid
}

// checkBucket returns the bucket's TTL, or why it cannot hold elections:
// the problems package fit refuses, each wrapped with ErrInvalidBucket (and
// a short TTL also with ErrTTLTooSmall).
func checkBucket(st jetstream.KeyValueStatus, identity string) (time.Duration, error) {
	cfg := jetstream.StreamConfig{MaxAge: st.TTL(), MaxMsgsPerSubject: st.History()}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		cfg = bs.StreamInfo().Config
	}
	var problems []error
	for _, p := range fit.Refused(fit.Check(cfg, fit.Use{Identity: identity})) {
		err := fmt.Errorf("bucket %s: %w", st.Bucket(), p)
		if p.Kind == fit.ShortTTL {
			err = fmt.Errorf("%w: %w", ErrTTLTooSmall, err)
		}
		problems = append(problems, fmt.Errorf("%w: %w", ErrInvalidBucket, err))
	}
	return st.TTL(), errors.Join(problems...)
}

// connOf returns the connection behind js, or nil.
func connOf(js jetstream.JetStream) *nats.Conn {
	if js == nil {
		return nil
	}
	return js.Conn()
}
