package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/internal/kvwatch"
)

// Event says what changed in an election, as an Observer saw it.
type Event string

const (
	// EventCurrent is the state found when the observer started, or a
	// leader found after the observer lost track (its watch restarted) that
	// it cannot tell from the one it knew: the token is then unknown.
	EventCurrent Event = "current"
	// EventElected means a leader began a term.
	EventElected Event = "elected"
	// EventRenewed means the leader renewed its term.
	EventRenewed Event = "renewed"
	// EventReleased means the leader stepped down and marked the key free
	// (KeyReleased): a standby may lead at once. Leadership.ReleasedBy
	// names the leader that released it.
	EventReleased Event = "released"
	// EventRemoved means someone other than the leader removed the key
	// (KeyRemoved): a delete or purge, or an empty value written over it.
	// It is a forced stand-down: the next leader waits a TTL before acting.
	EventRemoved Event = "removed"
	// EventExpired means the leader stopped renewing and the key expired.
	EventExpired Event = "expired"
)

// Leadership is who leads an election, as an observer knows it.
type Leadership struct {
	// Key is the election.
	Key string
	// Event is what last changed.
	Event Event
	// State is what the key's latest message says (see ReadEntry): held,
	// released, removed, or absent (no message: never written or expired).
	State KeyState
	// Leader is the leader's identity, or "" when there is no leader.
	Leader string
	// ReleasedBy is the identity of the leader that stepped down, when
	// State is KeyReleased.
	ReleasedBy string
	// Token is the fencing token of the current term: the revision of the
	// write that began it. It is 0 when the observer did not see the term
	// begin: it started watching mid-term, or lost its watch and cannot
	// tell whether the term it finds is the one it knew.
	Token uint64
	// Revision is the revision of the key's latest message.
	Revision uint64
	// Since is when the current term began, by the broker's clock, or zero
	// when the observer did not see it begin.
	Since time.Time
	// Renewed is when the key was last written, by the broker's clock.
	Renewed time.Time
	// ExpiresBy is when the key expires unless renewed again, by the
	// broker's clock: Renewed plus the bucket's current TTL. The broker may
	// expire it a little later. The observer itself does not compare this
	// with the local clock: it predicts expiries from when it saw the write.
	ExpiresBy time.Time
}

// HasLeader reports whether someone leads.
func (l Leadership) HasLeader() bool { return l.Leader != "" }

// String describes l in one line.
func (l Leadership) String() string {
	if !l.HasLeader() {
		return fmt.Sprintf("%s: no leader (%s)", l.Key, l.Event)
	}
	token := "token unknown"
	if l.Token != 0 {
		token = fmt.Sprintf("token %d", l.Token)
	}
	return fmt.Sprintf("%s: %s leads (%s, %s, revision %d)", l.Key, l.Leader, l.Event, token, l.Revision)
}

// ObserverOption configures an Observer.
type ObserverOption func(*observerOptions) error

type observerOptions struct {
	onChange func(Leadership)
	renewals bool
	log      Logger
	js       jetstream.JetStream
}

// ObserveWithJetStream gives the observer the JetStream context of its
// bucket's connection, as WithJetStream does a candidate: the observer then
// shares its watch with the candidates and observers of the process that
// follow the same election on that connection, and its watch's heartbeats
// follow the bucket's TTL.
func ObserveWithJetStream(js jetstream.JetStream) ObserverOption {
	return func(o *observerOptions) error {
		if js == nil {
			return fmt.Errorf("%w: ObserveWithJetStream: the JetStream context is nil", ErrInvalidOption)
		}
		o.js = js
		return nil
	}
}

// OnChange sets a function called with each change of leadership, on the
// observer's goroutine. With ObserveRenewals, renewals are changes too.
func OnChange(cb func(Leadership)) ObserverOption {
	return func(o *observerOptions) error { o.onChange = cb; return nil }
}

// ObserveRenewals makes renewals count as changes for OnChange.
func ObserveRenewals() ObserverOption {
	return func(o *observerOptions) error { o.renewals = true; return nil }
}

// ObserverLogger sets where the observer logs.
func ObserverLogger(l Logger) ObserverOption {
	return func(o *observerOptions) error {
		if l == nil {
			return fmt.Errorf("%w: ObserverLogger(nil)", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// Observer follows one election without campaigning: who leads, since when,
// with which token, and when nobody does. It learns of changes from a watch
// of the key, and notices expiries (which the broker does not announce) by
// checking the key when the leader's renewal is overdue.
//
// It predicts expiries on its own monotonic clock, from when it saw each
// write, never by comparing the broker's timestamps with the local clock
// (which may differ by any amount). It follows changes of the bucket's TTL:
// it reads the TTL again every few TTLs, whenever its watch restarts and
// whenever a renewal is overdue.
type Observer struct {
	key    string
	bucket jetstream.KeyValue
	hub    *watchHub
	opts   observerOptions

	mu      sync.Mutex
	current Leadership
	ttl     time.Duration

	// The rest is used only by Run's goroutine.

	// seenAt is when, on the local monotonic clock, the observer saw the
	// key's latest write; age is how old that write was by then: 0 for a
	// write the watch delivered as it happened, estimated from the broker's
	// clock (and clamped to [0, TTL]) for one found when the watch began.
	seenAt time.Time
	age    time.Duration
	// gap means the next entry may not directly follow the latest one the
	// observer knows: before the first entry, after the watch restarted,
	// after a read got ahead of the watch.
	gap bool
	// checkAt is when to read the key to see whether it expired; zero when
	// nobody leads.
	checkAt time.Time
	// overdue counts the checks in a row that found the leader's latest
	// write still there after it should have expired.
	overdue int
	// closed is the error of a connection closed for good; Run then ends.
	closed   error
	ttlWarn  bool // warned that the bucket has no usable TTL
	lastWarn string
}

// NewObserver returns an observer of election key in bucket.
func NewObserver(key string, bucket jetstream.KeyValue, opts ...ObserverOption) (*Observer, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if bucket == nil {
		return nil, fmt.Errorf("%w: bucket is nil", ErrInvalidOption)
	}
	o := observerOptions{log: nopLogger{}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Observer{key: key, bucket: bucket, hub: hubFor(bucket, o.js, o.log), opts: o, current: Leadership{Key: key}}, nil
}

// Leadership returns the latest state the observer knows.
func (o *Observer) Leadership() Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current
}

const (
	// expiryCheckDelay is how long past a predicted expiry the observer
	// checks the key: the broker expires keys up to a few hundred
	// milliseconds late.
	expiryCheckDelay = 400 * time.Millisecond
	// minCheckInterval is the least time between two reads of the key: the
	// observer never polls faster, whatever the clocks say.
	minCheckInterval = 250 * time.Millisecond
	// observerRequestTimeout bounds each request to the broker.
	observerRequestTimeout = 5 * time.Second
)

// ttlRefreshInterval is how often the observer reads the bucket's TTL again
// while nothing else makes it: three TTLs, between 3s and 3m.
func ttlRefreshInterval(ttl time.Duration) time.Duration {
	return min(max(3*ttl, 3*time.Second), 3*time.Minute)
}

// Run follows the election until ctx ends, then returns nil. It returns an
// error if the bucket cannot hold elections, or one wrapping
// nats.ErrConnectionClosed once the connection is closed for good; while
// the broker is unreachable it retries.
func (o *Observer) Run(ctx context.Context) error {
	var st jetstream.KeyValueStatus
	err := backoff.FiveSec.For(ctx, func(try int) error {
		rctx, cancel := context.WithTimeout(ctx, observerRequestTimeout)
		defer cancel()
		var err error
		st, err = o.bucket.Status(rctx)
		if o.fatal(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			o.opts.log.Warnf("observer %s: cannot read bucket %s (try %d), retrying: %v", o.key, o.bucket.Bucket(), try+1, err)
		}
		return err
	})
	switch {
	case o.closed != nil:
		return o.closedError()
	case err != nil:
		return nil // ctx ended
	case st.TTL() <= 0:
		return fmt.Errorf("%w: bucket %s has no TTL", ErrInvalidBucket, st.Bucket())
	}
	o.mu.Lock()
	o.ttl = st.TTL()
	o.mu.Unlock()

	o.gap = true
	for try := 0; ctx.Err() == nil; try++ {
		delivered, err := o.follow(ctx)
		if o.closed != nil {
			return o.closedError()
		}
		if ctx.Err() != nil {
			break
		}
		if delivered {
			try = 0
		}
		o.opts.log.Warnf("observer %s: watch failed, restarting: %v", o.key, err)
		_ = backoff.Sleep(ctx, backoff.FiveSec.Duration(try))
		o.gap = true
		o.refreshTTL(ctx) // the TTL may have changed while the watch was down
		if o.closed != nil {
			return o.closedError()
		}
	}
	return nil
}

// fatal notes err if it says the connection is closed for good.
func (o *Observer) fatal(err error) bool {
	if err != nil && errors.Is(err, nats.ErrConnectionClosed) {
		if o.closed == nil {
			o.opts.log.Errorf("observer %s: the connection to the broker was closed: ending", o.key)
			o.closed = err
		}
		return true
	}
	return false
}

func (o *Observer) closedError() error {
	return fmt.Errorf("observer %s: %w: the connection to the broker was closed; observe again with a new Observer on an open connection", o.key, o.closed)
}

// follow runs one watch until it ends. delivered says whether it got as far
// as delivering the key's state.
func (o *Observer) follow(ctx context.Context) (delivered bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := o.hub.subscribe(wctx, o.key, o.bucketTTL())
	if err != nil {
		o.fatal(err)
		return false, err
	}
	defer kvwatch.Stop(w)
	// The expiry check of the state known before a restart holds while the
	// new watch starts: an entry with a revision already seen changes
	// nothing, and must not leave the check unarmed.
	check := time.NewTimer(o.untilCheck())
	defer check.Stop()
	refresh := time.NewTimer(ttlRefreshInterval(o.bucketTTL()))
	defer refresh.Stop()
	initial, sawEntry := true, false
	for {
		select {
		case <-ctx.Done():
			return delivered, nil
		case ent, ok := <-w.Updates():
			if !ok {
				err := errors.New("watch closed")
				if hw, ok := w.(interface{ Err() error }); ok {
					err = hw.Err()
				}
				if o.fatal(err); o.closed != nil {
					return delivered, o.closed
				}
				return delivered, err
			}
			if ent == nil {
				if initial && !sawEntry {
					o.noValue()
				}
				initial, delivered = false, true
			} else {
				sawEntry = sawEntry || initial
				o.onEntry(ent, initial)
			}
		case <-check.C:
			o.checkExpiry(ctx)
		case <-refresh.C:
			o.refreshTTL(ctx)
			refresh.Reset(ttlRefreshInterval(o.bucketTTL()))
		}
		if o.closed != nil {
			return delivered, o.closed
		}
		resetTimer(check, o.untilCheck())
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// untilCheck is how long until the next expiry check; an hour when none is
// due (nobody leads).
func (o *Observer) untilCheck() time.Duration {
	if o.checkAt.IsZero() {
		return time.Hour
	}
	return max(time.Until(o.checkAt), 0)
}

// noValue handles a watch that starts with the key absent.
func (o *Observer) noValue() {
	o.gap = false
	prev := o.Leadership()
	switch {
	case prev.Event == "":
		o.publish(Leadership{Key: o.key, Event: EventCurrent, State: KeyAbsent}, true)
	case prev.HasLeader():
		// The watch restarted and the key is gone: it expired meanwhile.
		o.publish(Leadership{Key: o.key, Event: EventExpired, State: KeyAbsent, Revision: prev.Revision}, true)
	}
	o.checkAt = time.Time{}
}

// onEntry applies a message of the key, from the watch or from a read.
// initial says it is the state a new watch found.
func (o *Observer) onEntry(ent jetstream.KeyValueEntry, initial bool) {
	prev := o.Leadership()
	if ent.Revision() <= prev.Revision {
		if ent.Revision() == prev.Revision {
			// A restarted watch found the very message the observer knew:
			// nothing happened in between. Its expiry check stays armed.
			o.gap = false
		}
		return // seen already, or older than what a read found
	}
	now := time.Now()
	ttl := o.bucketTTL()
	gap := o.gap || initial
	o.gap = false
	e := ReadEntry(ent)
	l := Leadership{Key: o.key, State: e.State, Revision: e.Revision, Renewed: e.Written}
	first := prev.Event == ""
	switch e.State {
	case KeyReleased:
		l.Event, l.ReleasedBy = EventReleased, e.ReleasedBy
	case KeyRemoved:
		l.Event = EventRemoved
	case KeyHeld:
		l.Leader, l.ExpiresBy = e.Leader, e.Written.Add(ttl)
		switch {
		case first:
			l.Event = EventCurrent // mid-term: the write that began the term is gone
		case gap && prev.HasLeader() && prev.Leader == l.Leader:
			// The same leader after a gap: a renewal of the term the
			// observer knew, or a new term that began unseen. It cannot
			// tell, so it does not vouch for a token.
			l.Event = EventCurrent
		case gap:
			l.Event = EventElected // someone else leads, since an unseen write
		case o.renews(prev, e, now, ttl):
			l.Event, l.Token, l.Since = EventRenewed, prev.Token, prev.Since
		default:
			l.Event, l.Token, l.Since = EventElected, e.Revision, e.Written
		}
		o.seenAt, o.age, o.overdue = now, 0, 0
		if gap {
			o.age = min(max(time.Now().Round(0).Sub(e.Written), 0), ttl)
		}
	}
	if first {
		l.Event = EventCurrent
	}
	o.schedule(l, now)
	o.publish(l, l.Event != EventRenewed || o.opts.renewals)
}

// renews reports whether e, a write by a leader seen right after prev on a
// live watch, renews prev's term rather than beginning a new one.
//
// It does only when the observer saw prev's write, nothing came in between
// (no marker, no expiry, no restart of the watch: the caller checks), and
// prev's write could not yet have expired when e's was made, by two
// measures: the observer's own clock (e arrived less than a TTL after prev
// did) and the broker's (e was stored less than a TTL after prev). The first
// catches an e delivered late, the second a prev delivered late (or found
// when the watch began); neither compares the broker's clock with ours.
//
// The threshold is the TTL itself, not the TTL plus the broker's expiry
// lateness (up to a few hundred milliseconds): the broker never expires a
// key early, so a write more than a TTL after the previous one may be a new
// term, and a candidate that saw the key vanish re-creates it in a few
// milliseconds, well inside that lateness. Each way of being wrong:
//   - A new term taken for a renewal (the old rule, "the same leader within
//     TTL + 1s") reports the old term's token: a resource fenced by the
//     observer's token would still accept the deposed term's late writes.
//     Silent and unsafe, so the rule leans the other way.
//   - A renewal taken for a new term reports a token above the leader's
//     own: a resource fenced by it rejects the leader's writes, loudly, and
//     nothing unsafe follows. It needs a renewal stored a full TTL after the
//     previous write, which a Conclave leader never makes (it steps down a
//     margin before the TTL from sending its last write), or a TTL raised
//     without the observer knowing yet.
//
// What the rule cannot see: a watch that reconnects (nats.go resumes it
// without telling) skips messages replaced meanwhile, so a delete and a
// re-election by the same leader inside one TTL during the outage looks
// like a renewal.
func (o *Observer) renews(prev Leadership, e Entry, now time.Time, ttl time.Duration) bool {
	return prev.HasLeader() && prev.Leader == e.Leader &&
		now.Sub(o.seenAt) < ttl &&
		e.Written.Sub(prev.Renewed) < ttl
}

// schedule sets the expiry check for l, seen at now.
func (o *Observer) schedule(l Leadership, now time.Time) {
	if !l.HasLeader() {
		o.checkAt = time.Time{}
		return
	}
	o.checkAt = o.predictedCheck(now)
}

// predictedCheck is when to check the latest write for expiry: a little
// after it expires by the observer's estimate, and never sooner than
// minCheckInterval from now.
func (o *Observer) predictedCheck(now time.Time) time.Time {
	at := o.seenAt.Add(o.bucketTTL() - o.age + expiryCheckDelay)
	if soonest := now.Add(minCheckInterval); at.Before(soonest) {
		at = soonest
	}
	return at
}

// overdueCheck is when to check again a write found still there after its
// predicted expiry: by the time it must have expired (seen plus TTL: it
// cannot be younger than when the observer saw it) and then less and less
// often, up to once a TTL, as only a late broker or an unseen TTL change
// explains it.
func (o *Observer) overdueCheck(now time.Time) time.Time {
	ttl := o.bucketTTL()
	step := min(expiryCheckDelay<<min(o.overdue-1, 10), max(ttl, expiryCheckDelay))
	at := now.Add(max(step, minCheckInterval))
	if bound := o.seenAt.Add(ttl + expiryCheckDelay); bound.After(at) {
		at = bound
	}
	return at
}

func (o *Observer) bucketTTL() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ttl
}

// refreshTTL reads the bucket's TTL again and, if it changed, moves the
// expiry check.
func (o *Observer) refreshTTL(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, observerRequestTimeout)
	defer cancel()
	st, err := o.bucket.Status(rctx)
	if o.fatal(err) || ctx.Err() != nil {
		return
	}
	if err != nil {
		o.warn("observer %s: cannot read the bucket's TTL: %v", o.key, err)
		return
	}
	o.lastWarn = ""
	ttl := st.TTL()
	if ttl <= 0 {
		if !o.ttlWarn {
			o.opts.log.Warnf("observer %s: bucket %s has no TTL any more: keys never expire; keeping the TTL %v", o.key, st.Bucket(), o.bucketTTL())
			o.ttlWarn = true
		}
		return
	}
	o.ttlWarn = false
	o.mu.Lock()
	old := o.ttl
	o.ttl = ttl
	if ttl != old && o.current.HasLeader() {
		o.current.ExpiresBy = o.current.Renewed.Add(ttl)
	}
	o.mu.Unlock()
	if ttl == old {
		return
	}
	o.opts.log.Infof("observer %s: the bucket's TTL changed from %v to %v", o.key, old, ttl)
	if o.checkAt.IsZero() {
		return
	}
	now := time.Now()
	if o.overdue == 0 {
		o.checkAt = o.predictedCheck(now)
	} else {
		o.checkAt = o.overdueCheck(now)
	}
}

// checkExpiry reads the key when its renewal is overdue: the broker expires
// keys silently.
func (o *Observer) checkExpiry(ctx context.Context) {
	cur := o.Leadership()
	if !cur.HasLeader() {
		o.checkAt = time.Time{}
		return
	}
	// A raised TTL explains an overdue renewal: read it first.
	o.refreshTTL(ctx)
	now := time.Now()
	if o.closed != nil || ctx.Err() != nil {
		return
	}
	if o.checkAt.After(now) {
		return // the TTL grew: not due yet
	}
	rctx, cancel := context.WithTimeout(ctx, observerRequestTimeout)
	defer cancel()
	ent, err := o.bucket.Get(rctx, o.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		o.publish(Leadership{Key: o.key, Event: EventExpired, State: KeyAbsent, Revision: cur.Revision}, true)
		o.checkAt = time.Time{}
	case o.fatal(err), ctx.Err() != nil:
	case err != nil:
		o.warn("observer %s: cannot check for expiry: %v", o.key, err)
		o.overdue++
		o.checkAt = o.overdueCheck(now)
	case ent.Revision() == cur.Revision:
		o.lastWarn = ""
		o.overdue++ // the broker is late expiring it, or the age estimate was high
		o.checkAt = o.overdueCheck(now)
	case ent.Revision() < cur.Revision:
		// A stale read (a replica behind): try again later.
		o.overdue++
		o.checkAt = o.overdueCheck(now)
	default:
		// The watch is behind: take the newer value. What came between is
		// unknown.
		o.gap = true
		o.onEntry(ent, false)
	}
}

// warn logs a warning, once while it repeats.
func (o *Observer) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if msg == o.lastWarn {
		o.opts.log.Debugf("%s", msg)
		return
	}
	o.lastWarn = msg
	o.opts.log.Warnf("%s", msg)
}

// publish records l and, if notify, tells OnChange.
func (o *Observer) publish(l Leadership, notify bool) {
	o.mu.Lock()
	o.current = l
	o.mu.Unlock()
	if notify && o.opts.onChange != nil {
		o.opts.onChange(l)
	}
}
