package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
)

// viewKind is what a candidate last saw in the election key.
type viewKind int

const (
	viewUnknown  viewKind = iota // not read yet
	viewAbsent                   // no value: never written, expired, or its marker expired
	viewHeld                     // a leader's identity
	viewReleased                 // an empty value: the leader that wrote it has stepped down
	viewRemoved                  // a delete or purge marker: someone removed the key
)

// keyView is a candidate's knowledge of the election key.
type keyView struct {
	kind   viewKind
	rev    uint64    // revision of the latest message seen (kept when the key expires silently)
	value  string    // the leader's identity, for viewHeld
	seenAt time.Time // when this candidate learned of that message, on its clock
	// expiresBy is, for viewHeld, the earliest the broker may have expired
	// the value, as far as this candidate can tell.
	expiresBy time.Time
}

// campaigner runs one Election's campaign on a single goroutine: every field
// below is owned by that goroutine. It talks to the outside through the
// Election (under its mutex) and the notifier.
type campaigner struct {
	e     *Election
	n     *notifier
	tm    timings
	clock clock.Clock
	log   Logger
	rec   Recorder
	ctx   context.Context

	view keyView

	watch          jetstream.KeyWatcher
	watchInit      bool // waiting for the end of the watch's initial values
	watchInitEntry bool // an initial value arrived
	watchRetryAt   time.Time
	watchTries     int
	watchCancel    context.CancelFunc
	watchDownSince time.Time // when the watch went away, while there is none
	lastWatchEvent time.Time
	drains         sync.WaitGroup

	// candidate
	nextCampaign time.Time // zero: nothing scheduled until the view changes
	tries        int       // consecutive failed campaign attempts
	sitOutUntil  time.Time // a deposed leader leaves the next takeover to others

	// holder: this candidate wrote the key's latest value
	holding      bool
	lastRev      uint64    // revision of our latest confirmed write
	nextToken    uint64    // token for the next term of this hold; 0 means lastRev
	lastSent     time.Time // send time of our latest confirmed write
	lease        time.Time // lastSent + ttl - margin
	nextTTLCheck time.Time // when a holder next re-reads the bucket's TTL
	safeAt       time.Time // a term may begin from here on
	nextRenew    time.Time
	renewTries   int
	inDoubt      bool // a write since lastRev failed in a way that may have stored it
	doomed       bool // a renewal was refused while in doubt: lead until lease, then stand down
	term         *Term
	lastLost     <-chan struct{} // closed when the latest OnLost has returned

	// closed is the error of a request that found the connection closed for
	// good: the campaign cannot go on.
	closed error
}

func newCampaigner(e *Election, n *notifier, tm timings) *campaigner {
	return &campaigner{e: e, n: n, tm: tm, clock: e.opts.clock, log: e.opts.log, rec: e.opts.recorder}
}

// run campaigns until ctx ends, and returns an error only if the
// connection was closed for good.
func (c *campaigner) run(ctx context.Context) error {
	c.ctx = ctx
	c.log.Debugf("election %s: %s campaigning, ttl %v, renew every %v, safety margin %v", c.e.key, c.e.identity, c.tm.ttl, c.tm.renew, c.tm.margin)
	timer := c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil && c.closed == nil {
		c.tick()
		wait := c.nextWake().Sub(c.clock.Now())
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		timer.Reset(max(wait, 0))
		var updates <-chan jetstream.KeyValueEntry
		if c.watch != nil {
			updates = c.watch.Updates()
		}
		select {
		case <-ctx.Done():
		case ent, ok := <-updates:
			if !ok {
				c.watchLost()
				continue
			}
			c.onEntry(ent)
		case <-timer.C():
		}
	}
	c.shutdown()
	if c.closed != nil {
		return fmt.Errorf("election %s: %w: the connection to the broker was closed; campaign again with a new Election on an open connection", c.e.key, c.closed)
	}
	return nil
}

// failed notes an error that ends the campaign: a connection closed for good.
func (c *campaigner) failed(err error) bool {
	if errors.Is(err, nats.ErrConnectionClosed) {
		if c.closed == nil {
			c.log.Errorf("election %s: the connection to the broker was closed: ending the campaign", c.e.key)
		}
		c.closed = err
		return true
	}
	return false
}

// tick does whatever is due: at most one request to the broker for the
// campaign itself, so that watch events are never kept waiting long.
func (c *campaigner) tick() {
	now := c.clock.Now()
	if c.watch == nil && !now.Before(c.watchRetryAt) {
		c.startWatch()
		now = c.clock.Now()
	}
	if c.holding {
		c.tickHolder(now)
		return
	}
	// A candidate campaigns from a view its watch has confirmed: until a new
	// watch has delivered the key's current state, the view may be stale. If
	// no watch can be made for a whole TTL (the broker may take writes but
	// not new consumers), it campaigns from the view it has.
	switch {
	case c.watch != nil && c.watchInit:
		return
	case c.watch == nil && (c.watchDownSince.IsZero() || now.Sub(c.watchDownSince) < c.tm.ttl):
		return
	}
	if c.nextCampaign.IsZero() || now.Before(c.nextCampaign) || now.Before(c.sitOutUntil) {
		return
	}
	c.campaign(now)
}

func (c *campaigner) tickHolder(now time.Time) {
	if c.term != nil && !c.term.Valid() {
		c.log.Warnf("election %s: %s reached its deadline without renewing: standing down", c.e.key, c.e.identity)
		c.finishTerm(CauseDeadline)
	}
	if c.doomed {
		if !now.Before(c.lease) {
			c.dropHold(now, false)
		}
		return
	}
	if c.term == nil && !now.Before(c.safeAt) && now.Before(c.lease) {
		c.beginTerm()
	}
	switch {
	case !now.Before(c.nextRenew):
		c.renew(now)
	case !now.Before(c.nextTTLCheck):
		c.checkTTL(now)
	}
}

// ttlChecksEvery is how many TTLs a holder lets pass between reads of the
// bucket's TTL: a stream info request costs the broker about as much as a
// synced write, so reading it at every renewal would add a third to a
// leader's load, for a change operators rarely make.
const ttlChecksEvery = 4

// checkTTL re-reads the bucket's TTL while holding the key. A lower TTL
// shortens the lease at once: the broker applies a new TTL to values already
// stored. A higher one only applies from the next write.
func (c *campaigner) checkTTL(now time.Time) {
	c.nextTTLCheck = now.Add(ttlChecksEvery * c.tm.ttl)
	ttl, err := c.readTTL(now)
	if err != nil || ttl == c.tm.ttl {
		return
	}
	tm, err := c.e.timings(ttl)
	if err != nil {
		c.log.Errorf("election %s: bucket TTL changed from %v to %v, which cannot hold elections (%v): standing down", c.e.key, c.tm.ttl, ttl, err)
		c.shortenLease(c.lastSent)
		return
	}
	c.log.Warnf("election %s: bucket TTL changed from %v to %v", c.e.key, c.tm.ttl, ttl)
	if ttl < c.tm.ttl {
		c.shortenLease(c.lastSent.Add(ttl - tm.margin))
	}
	c.tm = tm
}

// readTTL asks the broker for the bucket's TTL; 0 means none.
func (c *campaigner) readTTL(now time.Time) (time.Duration, error) {
	ctx, cancel := c.requestContext(now)
	defer cancel()
	st, err := c.e.bucket.Status(ctx)
	if err != nil {
		c.failed(err)
		c.log.Debugf("election %s: cannot read the bucket's TTL: %v", c.e.key, err)
		return 0, err
	}
	return st.TTL(), nil
}

// shortenLease brings the lease, and the term with it, forward to until.
func (c *campaigner) shortenLease(until time.Time) {
	if until.Before(c.lease) {
		c.lease = until
		if c.term != nil {
			c.term.limit(until)
		}
	}
}

// nextWake returns when tick next has something to do.
func (c *campaigner) nextWake() time.Time {
	now := c.clock.Now()
	wake := now.Add(time.Hour)
	earliest := func(t time.Time) {
		if !t.IsZero() && t.Before(wake) {
			wake = t
		}
	}
	if c.watch == nil {
		earliest(c.watchRetryAt)
	}
	switch {
	case c.holding && c.doomed:
		earliest(c.lease)
	case c.holding:
		earliest(c.nextRenew)
		earliest(c.nextTTLCheck)
		if c.term != nil {
			earliest(c.lease)
		} else if c.safeAt.After(now) && c.safeAt.Before(c.lease) {
			earliest(c.safeAt)
		}
	case !c.nextCampaign.IsZero():
		earliest(later(c.nextCampaign, c.sitOutUntil))
	}
	return wake
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// requestContext bounds a request by the request timeout and, while this
// candidate holds a lease, by the lease: no request outlives the deadline.
func (c *campaigner) requestContext(now time.Time) (context.Context, context.CancelFunc) {
	timeout := c.tm.request
	if c.holding && c.lease.After(now) {
		timeout = min(timeout, c.lease.Sub(now))
	}
	return context.WithTimeout(context.Background(), timeout)
}

// campaign tries to take the key, in the way the view says is possible.
func (c *campaigner) campaign(now time.Time) {
	var expect uint64
	from := c.view.kind
	switch from {
	case viewReleased, viewRemoved:
		expect = c.view.rev
	default:
		from = viewAbsent // held but predicted expired, or expired: it must now be empty
	}
	c.notifyCampaign(CandidateState)
	ctx, cancel := c.requestContext(now)
	rev, err := c.e.bucket.Update(ctx, c.e.key, []byte(c.e.identity), expect)
	cancel()
	done := c.clock.Now()
	switch {
	case err == nil:
		c.won(now, done, rev, from)
	case isMismatch(err):
		c.tries++
		c.nextCampaign = done.Add(c.tm.standby.Duration(c.tries))
		c.log.Debugf("election %s: campaign for revision %d lost: %v", c.e.key, expect, err)
		if c.viewLooksStale(done) {
			c.log.Debugf("election %s: view of the key looks stale, restarting the watch", c.e.key)
			c.restartWatch()
		}
	case c.failed(err):
	default:
		c.tries++
		c.nextCampaign = done.Add(c.tm.standby.Duration(c.tries))
		if mayHaveApplied(err) {
			c.log.Warnf("election %s: campaign failed with an unknown outcome (%v): if it was stored, the key holds %s's name and is left to expire, because it cannot be told apart from another candidate's with the same identity", c.e.key, err, c.e.identity)
		} else {
			c.log.Warnf("election %s: campaign failed: %v", c.e.key, err)
		}
	}
}

// staleAfter is how long past its predicted expiry a held key may survive
// before a standby suspects its watch missed renewals: well beyond the
// broker's expiry lateness.
const staleAfter = time.Second

// viewLooksStale reports whether failed campaigns suggest the watch missed
// something: the key was free by our view but taking it failed three times,
// or it outlived its predicted expiry by far more than the broker's lateness.
func (c *campaigner) viewLooksStale(now time.Time) bool {
	if c.view.kind == viewHeld {
		return now.Sub(c.view.expiresBy) >= staleAfter
	}
	return c.tries >= 3
}

// won records a successful campaign write. The term begins at safeAt: at
// once after a release, after the grace after an expiry, and after a full
// TTL from when we saw the marker when someone else removed the key, because
// the leader they removed may not have noticed and still counts on its
// deadline.
func (c *campaigner) won(sent, done time.Time, rev uint64, from viewKind) {
	c.holding, c.lastRev, c.nextToken = true, rev, rev
	c.inDoubt, c.doomed = false, false
	c.lastSent, c.nextTTLCheck = sent, done.Add(ttlChecksEvery*c.tm.ttl)
	c.lease = sent.Add(c.tm.ttl - c.tm.margin)
	c.nextRenew = sent.Add(c.tm.renew)
	c.renewTries, c.tries = 0, 0
	c.nextCampaign, c.sitOutUntil = time.Time{}, time.Time{}
	switch from {
	case viewReleased:
		c.safeAt = done
	case viewRemoved:
		// The deposed leader counts on the TTL it knew: if the bucket's TTL
		// was raised since we read it, wait by the higher one.
		wait := c.tm.ttl
		if ttl, err := c.readTTL(done); err == nil {
			wait = max(wait, ttl)
		} else {
			wait = max(wait, 2*c.tm.ttl)
		}
		c.safeAt = later(c.view.seenAt.Add(wait), done.Add(c.e.opts.grace))
		c.log.Infof("election %s: %s took the key at revision %d after it was removed; leading from %v, when a leader that was deposed has surely stood down", c.e.key, c.e.identity, rev, c.safeAt.Sub(done).Round(time.Millisecond))
	default:
		c.safeAt = done.Add(c.e.opts.grace)
	}
	c.e.setRenewed(done)
	c.view = keyView{kind: viewHeld, rev: rev, value: c.e.identity, seenAt: done, expiresBy: sent.Add(c.tm.ttl)}
}

// renew extends our hold on the key with a compare-and-swap on our last
// revision.
func (c *campaigner) renew(now time.Time) {
	c.notifyCampaign(LeaderState)
	ctx, cancel := c.requestContext(now)
	start := time.Now()
	rev, err := c.e.bucket.Update(ctx, c.e.key, []byte(c.e.identity), c.lastRev)
	latency := time.Since(start)
	cancel()
	done := c.clock.Now()
	switch {
	case err == nil:
		c.lastRev, c.inDoubt, c.renewTries = rev, false, 0
		c.lastSent = now
		c.lease = now.Add(c.tm.ttl - c.tm.margin)
		c.nextRenew = now.Add(c.tm.renew)
		c.e.setRenewed(done)
		c.rec.Renewed(c.e.key, latency)
		c.view = keyView{kind: viewHeld, rev: rev, value: c.e.identity, seenAt: done, expiresBy: now.Add(c.tm.ttl)}
		if c.term != nil && !c.term.extend(c.lease) {
			// The deadline passed while the renewal was in flight: that term
			// is over. The key is still ours, so a new term begins next tick.
			c.finishTerm(CauseDeadline)
		}
	case isMismatch(err) && c.inDoubt:
		// An earlier renewal failed without an answer and may have been
		// stored, which would explain the mismatch; but a candidate with our
		// identity may also have taken the key after someone removed it, and
		// the two cannot be told apart. Neither can take over before our
		// lease ends, so we lead until then and stop renewing.
		c.doomed = true
		c.log.Warnf("election %s: renewal of revision %d refused after an earlier renewal's outcome was unknown; leading until the deadline in %v, then standing down", c.e.key, c.lastRev, c.lease.Sub(done).Round(time.Millisecond))
	case isMismatch(err):
		cause := CauseDeposed
		if !done.Before(c.lease) {
			cause = CauseExpired
		}
		c.log.Warnf("election %s: renewal of revision %d refused (%s): standing down", c.e.key, c.lastRev, cause)
		c.dropHold(done, cause == CauseDeposed)
	case c.failed(err):
	default:
		c.inDoubt = c.inDoubt || mayHaveApplied(err)
		c.renewTries++
		delay := c.tm.retry
		if !done.Before(c.lease) {
			delay = min(c.tm.retry<<min(c.renewTries, 6), c.tm.ttl/2)
		}
		c.nextRenew = done.Add(jittered(delay))
		c.log.Warnf("election %s: renewal failed (try %d, deadline in %v): %v", c.e.key, c.renewTries, c.lease.Sub(done).Round(time.Millisecond), err)
	}
}

// dropHold gives up the key: ends the term, if any, and becomes a
// candidate. A deposed leader sits out the next takeover so that a forced
// stand-down moves leadership.
func (c *campaigner) dropHold(now time.Time, deposed bool) {
	cause := CauseDeadline
	if deposed {
		cause = CauseDeposed
	}
	if c.term != nil {
		c.finishTerm(cause)
	}
	c.holding, c.inDoubt, c.doomed = false, false, false
	c.tries = 0
	if deposed {
		c.sitOutUntil = now.Add(c.tm.ttl)
	}
	c.schedule(now)
}

func (c *campaigner) beginTerm() {
	token := c.nextToken
	if token == 0 {
		token = c.lastRev
	}
	c.nextToken = 0
	t := newTerm(c.ctx, c.clock, c.e.key, c.e.identity, token, c.lease)
	c.term = t
	c.e.setTerm(t)
	c.rec.Won(c.e.key)
	c.rec.Leading(c.e.key, true)
	c.log.Infof("election %s: %s became leader, token %d", c.e.key, c.e.identity, token)
	won, leading := c.e.opts.onWon, c.e.opts.onLeading
	c.n.post(func() {
		if won != nil {
			won()
		}
		if leading != nil {
			leading(t)
		}
	})
}

// finishTerm ends the current term with cause, unless it already ended, and
// posts OnLost.
func (c *campaigner) finishTerm(cause Cause) {
	t := c.term
	c.term = nil
	cause = t.end(cause)
	c.e.setTerm(nil)
	c.rec.Lost(c.e.key, cause)
	c.rec.Leading(c.e.key, false)
	c.log.Infof("election %s: %s stopped leading (%s), token %d", c.e.key, c.e.identity, cause, t.Token())
	lost := c.e.opts.onLost
	c.lastLost = c.n.post(func() {
		if lost != nil {
			lost()
		}
	})
}

func (c *campaigner) notifyCampaign(s State) {
	c.rec.Campaign(c.e.key, s)
	if cb := c.e.opts.onCampaign; cb != nil {
		c.n.post(func() { cb(s) })
	}
}

// onEntry takes in what the watch delivered. A nil entry marks the end of
// the initial values.
func (c *campaigner) onEntry(ent jetstream.KeyValueEntry) {
	now := c.clock.Now()
	c.lastWatchEvent = now
	if ent == nil {
		if c.watchInit && !c.watchInitEntry {
			c.observe(now, keyView{kind: viewAbsent, rev: c.view.rev, seenAt: now})
		}
		c.watchInit = false
		return
	}
	initial := c.watchInit
	if initial {
		c.watchInitEntry = true
	}
	if ent.Revision() < c.view.rev || (ent.Revision() == c.view.rev && !(initial && c.view.kind == viewHeld && !c.holding)) {
		return // nothing newer than what we know, such as our own write
	}
	v := keyView{rev: ent.Revision(), seenAt: now}
	switch {
	case ent.Operation() == jetstream.KeyValueDelete || ent.Operation() == jetstream.KeyValuePurge:
		v.kind = viewRemoved
	case len(ent.Value()) == 0:
		v.kind = viewReleased
	default:
		v.kind, v.value = viewHeld, string(ent.Value())
		age := time.Duration(0)
		if initial {
			// Written before we watched: the server's timestamp says how long
			// ago, if the clocks agree. A wrong guess only moves a safety-net
			// campaign, never a deadline.
			age = clamp(time.Since(ent.Created()), 0, c.tm.ttl)
		}
		v.expiresBy = now.Add(c.tm.ttl - age)
	}
	c.observe(now, v)
}

// observe adopts a newer view of the key, reacts if it undoes our hold, and
// schedules the next campaign.
func (c *campaigner) observe(now time.Time, v keyView) {
	c.view = v
	if c.holding {
		switch {
		case v.rev <= c.lastRev, v.kind == viewAbsent:
			return // our own write, or a restarted watch finding the key gone: the next renewal decides
		case c.inDoubt && v.kind == viewHeld && v.value == c.e.identity:
			return // perhaps our own write landing late: the next renewal decides
		}
		c.log.Warnf("election %s: key changed under leader %s (revision %d, %s): standing down", c.e.key, c.e.identity, v.rev, v.describe())
		c.dropHold(now, true)
		return
	}
	c.schedule(now)
}

// schedule sets the next campaign from the view: at once when the key is
// free to take, at the predicted expiry while someone holds it.
func (c *campaigner) schedule(now time.Time) {
	c.tries = 0
	switch c.view.kind {
	case viewUnknown:
		c.nextCampaign = time.Time{}
	case viewHeld:
		c.sitOutUntil = time.Time{} // a new leader: nothing left to sit out
		c.nextCampaign = c.view.expiresBy
	default:
		c.nextCampaign = now
	}
}

func (v keyView) describe() string {
	switch v.kind {
	case viewAbsent:
		return "expired"
	case viewHeld:
		return "held by " + v.value
	case viewReleased:
		return "released"
	case viewRemoved:
		return "removed"
	default:
		return "unknown"
	}
}

func (c *campaigner) startWatch() {
	now := c.clock.Now()
	timeout := c.tm.request
	if c.holding && c.lease.After(now) {
		timeout = min(timeout, c.lease.Sub(now))
	}
	// The watch lives as long as its context, so it cannot carry a timeout:
	// cancel it instead if setting up takes too long.
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(timeout, cancel)
	w, err := c.e.bucket.Watch(ctx, c.e.key)
	if !timer.Stop() {
		if err == nil {
			_ = w.Stop()
			c.drain(w)
		}
		err = fmt.Errorf("watch not set up within %v: %w", timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		if c.failed(err) {
			return
		}
		c.watchDown()
		c.watchTries++
		c.watchRetryAt = c.clock.Now().Add(c.tm.standby.Duration(c.watchTries))
		if c.ctx.Err() == nil {
			c.log.Warnf("election %s: cannot watch the key (try %d), retrying: %v", c.e.key, c.watchTries, err)
		}
		return
	}
	c.watch, c.watchInit, c.watchInitEntry, c.watchTries = w, true, false, 0
	c.watchCancel, c.watchDownSince = cancel, time.Time{}
	c.lastWatchEvent = c.clock.Now()
}

// watchLost handles the watch ending on its own, as when the connection
// closes.
func (c *campaigner) watchLost() {
	c.watch = nil
	c.watchCancel()
	c.watchDown()
	c.watchTries++
	c.watchRetryAt = c.clock.Now().Add(c.tm.standby.Duration(c.watchTries))
	c.log.Debugf("election %s: watch ended, restarting", c.e.key)
}

// restartWatch replaces a watch that seems to have missed changes; the
// candidate campaigns again once the new one has delivered the key's state.
func (c *campaigner) restartWatch() {
	c.stopWatch()
	c.watchDown()
	c.watchRetryAt = c.clock.Now()
}

// watchDown notes when the candidate started being without a watch.
func (c *campaigner) watchDown() {
	if c.watchDownSince.IsZero() {
		c.watchDownSince = c.clock.Now()
	}
}

// stopWatch stops the watch and drains it in the background: the watcher
// blocks delivering into a full channel, and closes it only once stopped.
func (c *campaigner) stopWatch() {
	if c.watch == nil {
		return
	}
	w := c.watch
	c.watch = nil
	_ = w.Stop()
	c.watchCancel()
	c.drain(w)
}

func (c *campaigner) drain(w jetstream.KeyWatcher) {
	c.drains.Add(1)
	go func() {
		defer c.drains.Done()
		for range w.Updates() {
		}
	}()
}

// shutdown ends the term and hands the key over.
func (c *campaigner) shutdown() {
	if c.term != nil {
		cause := CauseReleased
		if c.closed != nil {
			cause = CauseClosed
		}
		c.finishTerm(cause)
	}
	if c.holding && !c.doomed && c.closed == nil && c.e.opts.releaseOnStop {
		if c.lastLost != nil {
			<-c.lastLost // the next leader's OnWon comes after our OnLost
		}
		c.release()
	}
	c.stopWatch()
	c.drains.Wait()
}

// release tells the other candidates we stepped down: first by writing an
// empty value over our own revision, which a standby can take at once
// without waiting, then, if no standby took it, by removing the key so that
// candidates that only create keys (Choria's) can take it too.
func (c *campaigner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), c.tm.request)
	intent, err := c.e.bucket.Update(ctx, c.e.key, nil, c.lastRev)
	cancel()
	if err != nil {
		c.log.Warnf("election %s: could not release revision %d, the key expires within %v: %v", c.e.key, c.lastRev, c.tm.ttl, err)
		return
	}
	c.log.Debugf("election %s: released at revision %d", c.e.key, intent)
	if c.takenWithin(intent, c.tm.handoff) {
		return
	}
	ctx, cancel = context.WithTimeout(context.Background(), c.tm.request)
	defer cancel()
	if err := c.e.bucket.Delete(ctx, c.e.key, jetstream.LastRevision(intent)); err != nil && !isMismatch(err) {
		c.log.Warnf("election %s: could not remove the released key: %v", c.e.key, err)
	}
}

// takenWithin waits up to d for the watch to show a write after rev.
func (c *campaigner) takenWithin(rev uint64, d time.Duration) bool {
	if c.watch == nil {
		return false
	}
	timer := time.NewTimer(d) // real time: this waits on the network, not on the election's clock
	defer timer.Stop()
	for {
		select {
		case ent, ok := <-c.watch.Updates():
			if !ok {
				c.watch = nil
				c.watchCancel()
				return false
			}
			if ent != nil && ent.Revision() > rev {
				return true
			}
		case <-timer.C:
			return false
		}
	}
}
