package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
)

// campaigner runs one Election's campaign on a single goroutine: every field
// below is owned by that goroutine. It talks to the outside through the
// Election (under its mutex), the notifier and the store.
//
// The campaign is split by concern: this file holds the loop and the
// candidate's side, view.go what it knows of the key, watch.go the watch,
// hold.go winning, renewing and releasing, phase.go the phases and the moves
// between them.
type campaigner struct {
	e     *Election
	n     *notifier
	store store
	tm    timings
	clock clock.Clock
	log   Logger
	rec   Recorder
	ctx   context.Context

	phase   phase
	view    keyView
	seenRev uint64 // the highest revision seen, so an older message is never taken for news
	watch   keyWatch

	// candidate
	nextCampaign time.Time // zero: nothing scheduled until the view changes
	tries        int       // consecutive failed campaign attempts or reads
	sitOut       sitOut

	// the bucket's TTL
	nextTTLCheck time.Time
	ttlReadAt    time.Time // when the latest successful read of it was sent
	ttlAskedRev  uint64    // the revision whose takeover last made us read it
	ttlUnusable  error     // the bucket's TTL cannot hold elections: no campaign until it can
	bucketBorn   time.Time // when the bucket's stream was created, as last read: a change means it was made again

	hold     hold
	term     *Term
	lastLost <-chan struct{} // closed when the latest OnLost has returned

	// closed is the error of a request that found the connection closed for
	// good: the campaign cannot go on.
	closed error
	// denied is the permission refusal that ended the campaign, if any.
	denied error
	// idle counts loop turns in a row that found something due at once: a
	// guard against a bug that would otherwise spin.
	idle int
}

// sitOut keeps a deposed leader out of the takeover that follows: a forced
// stand-down must move leadership.
type sitOut struct {
	until time.Time
	rev   uint64 // the revision we were deposed at: a later holder ends the sit-out
}

func newCampaigner(e *Election, n *notifier, tm timings) *campaigner {
	return &campaigner{e: e, n: n, store: e.store, tm: tm, clock: e.opts.clock, log: e.opts.log, rec: e.opts.recorder}
}

// run campaigns until ctx ends, and returns an error only if the
// connection was closed for good.
func (c *campaigner) run(ctx context.Context) error {
	if sr, ok := c.rec.(StartRecorder); ok {
		sr.Started(c.e.key)
	}
	c.begin(ctx)
	timer := c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil && c.closed == nil && c.denied == nil {
		c.tick()
		now := c.clock.Now()
		wait := c.nextWake(now).Sub(now)
		if wait <= 0 {
			c.idle++
			if c.idle > spinLimit {
				if c.idle == spinLimit+1 {
					c.log.Errorf("election %s: the campaign found work due %d times in a row without progress (phase %s, view %s): slowing down; please report this", c.e.key, spinLimit, c.phase, c.view.describe())
				}
				wait = c.tm.retry
			}
		} else {
			c.idle = 0
		}
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
		case ent, ok := <-c.watch.updates():
			if !ok {
				c.watchEnded(c.clock.Now())
				continue
			}
			c.onWatch(c.clock.Now(), ent)
		case <-timer.C():
		}
	}
	c.shutdown()
	if c.denied != nil {
		return fmt.Errorf("election %s: %w", c.e.key, c.denied)
	}
	if c.closed != nil {
		return fmt.Errorf("election %s: %w: the connection to the broker was closed; campaign again with a new Election on an open connection", c.e.key, c.closed)
	}
	return nil
}

// begin readies the campaign to run under ctx.
func (c *campaigner) begin(ctx context.Context) {
	c.ctx = ctx
	c.log.Debugf("election %s: %s campaigning, ttl %v, renew every %v, safety margin %v", c.e.key, c.e.identity, c.tm.ttl, c.tm.renew, c.tm.margin)
	now := c.clock.Now()
	c.nextCampaign = now // read the key at once, whether or not a watch comes up
	c.nextTTLCheck = now.Add(jittered(standbyTTLEvery(c.tm)))
}

// spinLimit is how many loop turns in a row may find work due at once
// before the loop slows itself down.
const spinLimit = 1000

// failed notes an error that ends the campaign: a connection closed for good.
func (c *campaigner) failed(err error) bool {
	if errors.Is(err, ErrPermissionDenied) {
		if c.denied == nil {
			c.log.Errorf("election %s: ending the campaign: %v", c.e.key, err)
		}
		c.denied = err
		return true
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		if c.closed == nil {
			c.log.Errorf("election %s: the connection to the broker was closed: ending the campaign", c.e.key)
		}
		c.closed = err
		return true
	}
	return false
}

// move changes the phase; a move that phaseMoves does not allow is a bug,
// logged as such (the table tests fail on it).
func (c *campaigner) move(next phase) {
	if !c.phase.canMove(next) {
		c.log.Errorf("election %s: bug: a campaign cannot move from %s to %s; please report this", c.e.key, c.phase, next)
	}
	c.phase = next
}

// tick does whatever is due.
func (c *campaigner) tick() {
	c.ensureWatch(c.clock.Now())
	now := c.clock.Now()
	if c.phase.holds() {
		c.tickHolder(now)
		return
	}
	switch {
	case !now.Before(c.nextTTLCheck):
		c.checkTTL(now)
	case c.ttlUnusable != nil,
		c.nextCampaign.IsZero(),
		now.Before(later(c.nextCampaign, c.sitOut.until)):
	case !c.viewFresh(now):
		c.read(now)
	case c.takeoverNeedsTTL(now):
		// Read the TTL first, so that the campaign can take the lapsed
		// lease over its revision at once (see leaseLapsed). Once per
		// revision: if the read fails, the campaign waits for the broker.
		c.ttlAskedRev = c.view.Revision
		c.nextTTLCheck = now
	default:
		c.campaign(now)
	}
}

// takeoverNeedsTTL reports whether a held key's lease has lapsed by the TTL
// we know, but the TTL has not been read since we learned of the revision.
func (c *campaigner) takeoverNeedsTTL(now time.Time) bool {
	v := c.view
	return v.State == KeyHeld && v.Revision != 0 && v.Revision != c.ttlAskedRev && v.ttl > 0 &&
		!c.ttlReadAt.After(v.seenAt) && !now.Before(v.seenAt.Add(v.ttl))
}

// viewFresh reports whether a campaign may trust the view: a working watch
// keeps it current; otherwise it must have been read just now.
func (c *campaigner) viewFresh(now time.Time) bool {
	switch {
	case !c.view.known:
		return false
	case c.watch.working() && c.view.confirmed:
		return true
	}
	return now.Sub(c.view.readAt) < c.tm.retry
}

// nextWake returns when tick next has something to do.
func (c *campaigner) nextWake(now time.Time) time.Time {
	wake := now.Add(time.Hour)
	earliest := func(t time.Time) {
		if !t.IsZero() && t.Before(wake) {
			wake = t
		}
	}
	if c.watch.w == nil {
		earliest(c.watch.retryAt)
	} else if c.watch.initial {
		earliest(c.watch.lastEvent.Add(initTimeout(c.tm)))
	}
	switch c.phase {
	case doomed:
		earliest(c.hold.lease)
	case winning, leading:
		earliest(c.hold.nextRenew)
		if !c.hold.ttlRead {
			earliest(c.hold.ttlRetryAt)
		} else {
			earliest(c.nextTTLCheck)
		}
		if c.term != nil {
			earliest(c.hold.lease)
		} else if c.phase == winning && c.hold.ttlRead && now.Before(c.hold.lease) && c.hold.safeAt.Before(c.hold.lease) {
			earliest(c.hold.safeAt)
		}
	case candidate:
		earliest(c.nextTTLCheck)
		if c.ttlUnusable == nil && !c.nextCampaign.IsZero() {
			earliest(later(c.nextCampaign, c.sitOut.until))
		}
	}
	return wake
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// requestTimeout bounds a request by the request timeout and, while this
// candidate holds a lease, by the lease: no request outlives the deadline.
func (c *campaigner) requestTimeout(now time.Time) time.Duration {
	timeout := c.tm.request
	if c.phase.holds() && c.hold.lease.After(now) {
		timeout = min(timeout, c.hold.lease.Sub(now))
	}
	return timeout
}

func (c *campaigner) requestContext(now time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.requestTimeout(now))
}

// read refreshes the view from the store, for a candidate that has no
// working watch or doubts its view.
func (c *campaigner) read(now time.Time) {
	ctx, cancel := c.requestContext(now)
	ent, err := c.store.Latest(ctx, c.e.key)
	cancel()
	done := c.clock.Now()
	if err != nil {
		if c.failed(err) {
			return
		}
		c.tries++
		c.nextCampaign = done.Add(c.tm.standby.Duration(c.tries))
		c.log.Debugf("election %s: cannot read the key (try %d): %v", c.e.key, c.tries, err)
		return
	}
	v := keyView{known: true, Entry: Entry{Key: c.e.key}, seenAt: done}
	if ent != nil {
		v = viewOf(ent, done, c.tm.ttl, false)
	}
	v.readAt = done
	if !c.observe(done, v) {
		// Older than what we know: a stale replica's answer, or a bucket
		// made again, whose revisions start lower. Do not read again at
		// once; check when the bucket was created, which tells them apart
		// (see noteBucketBorn), at most once per TTL. The pause is a
		// retry interval, not the campaign's growing backoff: a stale
		// replica's answer must not delay a takeover.
		c.nextCampaign = later(c.nextCampaign, done.Add(jittered(c.tm.retry)))
		if done.Sub(c.ttlReadAt) >= c.tm.ttl && done.Before(c.nextTTLCheck) {
			c.nextTTLCheck = done
		}
	}
}

// campaign tries to take the key, in the way the view says is possible.
func (c *campaigner) campaign(now time.Time) {
	expect := c.view.expect()
	if c.leaseLapsed(now) {
		// The broker has not expired the key yet (its expiry timer can
		// run hundreds of milliseconds late), but its holder's lease has
		// surely ended: take the key over that very revision.
		expect = c.view.Revision
	}
	c.notifyCampaign(CandidateState)
	ctx, cancel := c.requestContext(now)
	rev, err := c.store.Write(ctx, c.e.key, []byte(c.e.identity), expect)
	cancel()
	done := c.clock.Now()
	switch {
	case err == nil:
		c.won(now, done, rev)
	case isMismatch(err):
		c.tries++
		c.nextCampaign = done.Add(c.tm.standby.Duration(c.tries))
		c.notPastLapse(done)
		// Read the key before the next try, watch or not: a view that
		// missed a renewal predicts the expiry early, and retrying it blind,
		// with a growing backoff, would overshoot the real expiry by as much.
		c.view.readAt, c.view.confirmed = time.Time{}, false
		c.log.Debugf("election %s: campaign for revision %d lost: %v", c.e.key, expect, err)
		if c.view.State == KeyHeld && c.tries == 1 {
			// The leader outlived our prediction: perhaps the TTL was
			// raised. Read it before the next try.
			c.nextTTLCheck = done
		}
		if c.watch.working() && c.viewLooksStale(done) {
			c.log.Debugf("election %s: view of the key looks stale, restarting the watch", c.e.key)
			c.restartWatch(done)
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

// notPastLapse brings the next campaign forward to when the holder's lease
// surely ends (see lapseAt) if a backoff would overshoot it: the takeover
// over the holder's revision is due then, and a growing backoff after
// failed tries must not push it later.
func (c *campaigner) notPastLapse(now time.Time) {
	if at, ok := c.lapseAt(); ok && !c.nextCampaign.IsZero() && at.After(now) && at.Before(c.nextCampaign) {
		c.nextCampaign = at
	}
}

// leaseLapsed reports whether the holder's lease has surely ended (see
// lapseAt), so that a compare-and-swap over its revision may take the key
// without waiting for the broker to expire it.
func (c *campaigner) leaseLapsed(now time.Time) bool {
	at, ok := c.lapseAt()
	return ok && !now.Before(at)
}

// lapseAt returns when the lease of the key's holder, at the revision the
// view shows, has surely ended, and whether that can be told yet. The
// holder counts on its lease until it sent the write plus the TTL less a
// margin; we learned of the write after it was sent, so a TTL after we
// learned of it the lease is over, provided the TTL is the one the holder
// used: we take the longer of the TTL we knew then and one read since (a
// raised TTL we had not read must not cut the lease short). Until such a
// read, only the broker's expiry frees the key. A compare-and-swap that
// finds a later revision fails, as for any campaign.
func (c *campaigner) lapseAt() (time.Time, bool) {
	v := c.view
	if v.State != KeyHeld || v.Revision == 0 || v.ttl <= 0 || !c.ttlReadAt.After(v.seenAt) {
		return time.Time{}, false
	}
	return v.seenAt.Add(max(v.ttl, c.tm.ttl)), true
}

// staleAfter is how long past its predicted expiry a held key may survive
// before a standby suspects its watch missed renewals: well beyond the
// broker's expiry lateness.
const staleAfter = time.Second

// viewLooksStale reports whether failed campaigns suggest the watch missed
// something: the key was free by our view but taking it failed three times,
// or it outlived its predicted expiry by far more than the broker's lateness.
func (c *campaigner) viewLooksStale(now time.Time) bool {
	if c.view.State == KeyHeld {
		return now.Sub(c.view.expiresBy) >= staleAfter
	}
	return c.tries >= 3
}

// observe adopts a newer view of the key, reacts if it undoes our hold, and
// schedules the next campaign. It returns false when it dropped v as older
// than what we know.
func (c *campaigner) observe(now time.Time, v keyView) bool {
	if v.Revision != 0 && v.Revision < c.seenRev {
		if !c.bucketRecreated(v) {
			return false // older than what we know, such as a stale replica's answer
		}
		c.log.Warnf("election %s: the key's revision went back from %d to %d with a later write: the bucket was recreated; following its new revisions", c.e.key, c.seenRev, v.Revision)
		c.seenRev = 0
	}
	stillGone := c.view.State == KeyRemoved && c.view.Revision == 0 && v.State == KeyAbsent // the removal vanishedUnderLease inferred stands
	if c.view.known && (stillGone || v.State == c.view.State && v.Revision == c.view.Revision && sameMessage(c.view.Entry, v.Entry)) {
		// Nothing new: keep what we learned first (when we saw it, when it
		// expires), and note that it is still current.
		c.view.readAt = later(c.view.readAt, v.readAt)
		c.view.confirmed = c.view.confirmed || v.confirmed
		return true
	}
	c.seenRev = max(c.seenRev, v.Revision)
	if !c.phase.holds() && c.vanishedUnderLease(now, v) {
		c.log.Warnf("election %s: the key %s held vanished without a marker %v before it could expire (the bucket deleted and made again, or purged): taking it as a forced removal, so a term begun on it waits a TTL, until %s has surely stood down", c.e.key, c.view.Leader, c.view.expiresBy.Sub(now).Round(time.Millisecond), c.view.Leader)
		v.State, v.Operation = KeyRemoved, jetstream.KeyValuePurge // gone without a marker, as by a purge
	}
	c.view = v
	if c.phase.holds() {
		switch {
		case v.State == KeyAbsent, v.Revision <= c.hold.rev:
			return true // our own write, or a restarted watch finding the key gone: the next renewal decides
		case c.hold.inDoubt && v.State == KeyHeld && v.Leader == c.e.identity:
			return true // perhaps our own write landing late: the next renewal decides
		}
		c.log.Warnf("election %s: key changed under %s (revision %d, %s): standing down", c.e.key, c.e.identity, v.Revision, v.describe())
		c.dropHold(now, true)
		return true
	}
	c.schedule(now)
	return true
}

// vanishedUnderLease reports whether v, showing the key absent, cannot be
// its expiry: the view holds a leader, and the key is gone well before the
// broker could have expired it (a TTL after it received the write, which
// the view's expiresBy estimates). Someone removed it without leaving a
// marker: deleted the bucket's stream and made it again, or purged it. Its
// holder, which may have renewed since our view, still counts on its lease,
// so the key is taken as removed: the next term waits a TTL from now, as
// after any forced stand-down. The margin keeps an expiry seen a little
// early (a late view, another clock) from counting.
func (c *campaigner) vanishedUnderLease(now time.Time, v keyView) bool {
	old := c.view
	return v.State == KeyAbsent && old.known && old.State == KeyHeld &&
		now.Before(old.expiresBy.Add(-c.tm.margin))
}

// sameMessage reports whether two entries of one revision are the same
// message. After a bucket is recreated with revisions that start again, one
// revision can name two messages: a leader of the old bucket and one of the
// new. Taking the second for the first would keep the first's seenAt, and
// a takeover "after its lease" could cut the second leader's lease short.
func sameMessage(a, b Entry) bool {
	return a.Leader == b.Leader && (a.Written.IsZero() || b.Written.IsZero() || a.Written.Equal(b.Written))
}

// noteBucketBorn takes in when the bucket's stream was created, from a read
// of its settings; zero when the store cannot tell. A creation time other
// than the one known means the bucket was deleted and made again: its
// revisions may start lower than those seen, so they are followed from
// now on. A candidate then takes the key as removed now, whatever the new
// bucket shows until a leader writes in it: a leader of the old bucket may
// not have noticed yet, and counts on its lease for up to a TTL. A holder
// whose term has not begun (every term reads the settings first) waits a
// TTL from now, as after a removal; a leader learns it at its next renewal,
// whose revision check fails.
func (c *campaigner) noteBucketBorn(now, born time.Time) {
	if born.IsZero() {
		return
	}
	known := c.bucketBorn
	c.bucketBorn = born
	if known.IsZero() || born.Equal(known) {
		return
	}
	c.log.Warnf("election %s: the bucket was deleted and made again (created %s, before %s): following its new revisions; a leader in the new bucket is awaited or the key is taken as removed", c.e.key, born.Format(time.RFC3339Nano), known.Format(time.RFC3339Nano))
	c.seenRev = 0
	if c.phase.holds() {
		if c.phase == winning && c.term == nil && c.hold.from != KeyRemoved {
			// We took the key of the new bucket without knowing it was
			// new: the old bucket's leader may still count on its lease,
			// so the term waits a TTL from now (see confirmTTL).
			c.hold.from, c.hold.fromSeenAt = KeyRemoved, now
		}
		return
	}
	c.view = keyView{known: true, Entry: Entry{Key: c.e.key, State: KeyRemoved, Operation: jetstream.KeyValuePurge}, seenAt: now, ttl: c.tm.ttl}
	c.schedule(now)
	if c.watch.w != nil {
		c.restartWatch(now)
	}
}

// bucketRecreated reports whether v, whose revision is below any seen,
// belongs to a recreated bucket rather than being a stale read: the broker
// stored it after the message our view holds.
func (c *campaigner) bucketRecreated(v keyView) bool {
	return c.view.known && !v.Written.IsZero() && !c.view.Written.IsZero() && v.Written.After(c.view.Written)
}

// schedule sets the next campaign from the view: at once when the key is
// free to take, at the predicted expiry while someone holds it.
func (c *campaigner) schedule(now time.Time) {
	c.tries = 0
	switch {
	case !c.view.known:
		c.nextCampaign = now // read it
	case c.view.State == KeyHeld:
		if c.view.Revision > c.sitOut.rev {
			c.sitOut = sitOut{} // a new leader: nothing left to sit out
		}
		c.nextCampaign = c.view.expiresBy
	default:
		c.nextCampaign = now
	}
}

func (c *campaigner) notifyCampaign(s State) {
	c.rec.Campaign(c.e.key, s)
	if cb := c.e.opts.onCampaign; cb != nil {
		c.n.post(func() { cb(s) })
	}
}

// shutdown ends the term and hands the key over.
func (c *campaigner) shutdown() {
	if c.term != nil {
		cause := CauseReleased
		switch {
		case c.denied != nil:
			cause = CauseDenied
		case c.closed != nil:
			cause = CauseClosed
		}
		c.finishTerm(cause)
	}
	if c.phase.holds() && c.phase != doomed && c.closed == nil && c.denied == nil && c.e.opts.releaseOnStop {
		if c.lastLost != nil {
			<-c.lastLost // the next leader's OnWon comes after our OnLost
		}
		c.release(c.clock.Now())
	}
	c.stopWatch()
	c.watch.drains.Wait()
}
