package streams

import (
	"context"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/nats-io/nats.go/jetstream"
)

// hold is what a campaign knows while its write holds the key.
type hold struct {
	rev   uint64    // revision of our latest confirmed write
	token uint64    // fencing token of the next term: the write that took the key; 0 means rev
	sent  time.Time // send time of our latest confirmed write
	lease time.Time // sent + ttl - margin: the deadline of any term
	wonAt time.Time // when the write that took the key was confirmed

	// from is what the key was when we took it, and fromSeenAt when we
	// learned of that: a removal makes the term wait a TTL from then.
	from       KeyState
	fromSeenAt time.Time

	// ttlRead is true once the bucket's TTL has been read since we took
	// the key: no term begins before, so none rests on a TTL older than
	// itself. ttlRetryAt is when to try reading it again.
	ttlRead    bool
	ttlRetryAt time.Time
	safeAt     time.Time // a term may begin from here on (once ttlRead)

	nextRenew time.Time
	tries     int  // consecutive failed renewals
	inDoubt   bool // a write since rev failed in a way that may have stored it
}

// won records a successful campaign write. The term begins once the TTL has
// been read (confirmTTL) and it is safe: at once after a release, after the
// grace after an expiry, and a full TTL after we saw the marker when someone
// else removed the key, because the leader they removed may not have noticed
// and still counts on its deadline.
func (c *campaigner) won(sent, done time.Time, rev uint64) {
	from := c.view.State
	if from == KeyHeld {
		from = KeyAbsent // held but predicted expired: it was gone, or the write would have failed
	}
	c.move(winning)
	c.hold = hold{
		rev: rev, token: rev, sent: sent, wonAt: done, ttlRetryAt: done,
		lease:      sent.Add(c.tm.ttl - c.tm.margin),
		from:       from,
		fromSeenAt: c.view.seenAt,
		nextRenew:  sent.Add(c.tm.renew),
	}
	c.tries, c.nextCampaign, c.sitOut = 0, time.Time{}, sitOut{}
	c.seenRev = max(c.seenRev, rev)
	c.view = keyView{known: true, Entry: Entry{Key: c.e.key, State: KeyHeld, Leader: c.e.identity, Revision: rev},
		seenAt: done, readAt: done, expiresBy: sent.Add(c.tm.ttl), confirmed: true, ttl: c.tm.ttl}
	c.e.setRenewed(done)
	c.log.Debugf("election %s: %s took the key at revision %d (it was %s)", c.e.key, c.e.identity, rev, from)
}

func (c *campaigner) tickHolder(now time.Time) {
	if c.term != nil && !c.term.Valid() {
		c.log.Warnf("election %s: %s reached its deadline without renewing: standing down", c.e.key, c.e.identity)
		c.finishTerm(CauseDeadline)
		if c.phase == leading {
			c.move(winning) // the key may still be ours: a renewal can begin a new term
		}
	}
	if c.phase == doomed {
		if !now.Before(c.hold.lease) {
			c.dropHold(now, false)
		}
		return
	}
	switch {
	case !now.Before(c.hold.nextRenew):
		c.renew(now)
	case !c.hold.ttlRead:
		if !now.Before(c.hold.ttlRetryAt) {
			c.confirmTTL(now)
		}
	case c.phase == winning && !now.Before(c.hold.safeAt) && now.Before(c.hold.lease):
		c.beginTerm()
	case !now.Before(c.nextTTLCheck):
		c.checkTTL(now)
	}
}

// confirmTTL reads the bucket's TTL after taking the key, bases the lease on
// the lower of that and the TTL we knew, and decides when the term may begin.
func (c *campaigner) confirmTTL(now time.Time) {
	ttl, err := c.readTTL(now)
	if err != nil {
		c.hold.ttlRetryAt = c.clock.Now().Add(jittered(c.tm.retry))
		return
	}
	known := c.tm.ttl
	if !c.adoptTTL(c.clock.Now(), ttl) {
		return // unusable: the key was given up
	}
	c.hold.ttlRead = true
	c.nextTTLCheck = c.clock.Now().Add(c.tm.ttl)
	switch c.hold.from {
	case KeyReleased:
		c.hold.safeAt = c.hold.wonAt
	case KeyRemoved:
		// The deposed leader counts on the TTL it knew: wait by the higher.
		wait := max(known, ttl)
		c.hold.safeAt = later(c.hold.fromSeenAt.Add(wait), c.hold.wonAt.Add(c.e.opts.grace))
		c.log.Infof("election %s: %s took the key at revision %d after it was removed; leading in %v, when a leader that was deposed has surely stood down", c.e.key, c.e.identity, c.hold.rev, c.hold.safeAt.Sub(c.clock.Now()).Round(time.Millisecond))
	default:
		c.hold.safeAt = c.hold.wonAt.Add(c.e.opts.grace)
	}
}

// ttlChecksEvery is how many TTLs, and standbyTTLCheck how long at least, a
// standby lets pass between reads of the bucket's TTL. A leader reads it
// every TTL, so that one in touch with the broker adopts a lowered TTL within
// one (old) TTL; a standby reads it more rarely, because a stream info
// request costs the broker about as much as a synced write, standbys can be
// many, and a standby's TTL only steers its safety-net campaigns: every term
// reads the TTL afresh before it begins. A standby also re-reads it when a
// leader outlives its predicted expiry (see campaign).
const (
	ttlChecksEvery  = 4
	standbyTTLCheck = time.Minute
)

// standbyTTLEvery is how long a standby waits between reads of the TTL.
func standbyTTLEvery(tm timings) time.Duration {
	return max(ttlChecksEvery*tm.ttl, standbyTTLCheck)
}

// checkTTL re-reads the bucket's TTL and adopts a change.
func (c *campaigner) checkTTL(now time.Time) {
	ttl, err := c.readTTL(now)
	done := c.clock.Now()
	if err == nil {
		c.ttlReadAt = now
	}
	wasUnusable := c.ttlUnusable != nil
	usable := err == nil && c.adoptTTL(done, ttl)
	// A leader, or anyone waiting for a usable TTL, reads it every TTL.
	every := c.tm.ttl
	if !c.phase.holds() && c.ttlUnusable == nil {
		every = standbyTTLEvery(c.tm)
	}
	if usable && wasUnusable {
		c.log.Infof("election %s: bucket TTL is %v again, which can hold elections: campaigning", c.e.key, ttl)
		c.ttlUnusable = nil
		every = standbyTTLEvery(c.tm)
		c.view.readAt = time.Time{}
		c.schedule(done)
	}
	if !c.phase.holds() {
		c.notPastLapse(done)
	}
	c.nextTTLCheck = done.Add(jittered(every))
}

// adoptTTL takes in the bucket's TTL as just read. A lower TTL shortens the
// lease at once: the broker applies a new TTL to values already stored; a
// higher one applies from the next write. A TTL that cannot hold elections
// makes a holder give the key up, and stops campaigns until it changes; it
// returns false then.
func (c *campaigner) adoptTTL(now time.Time, ttl time.Duration) bool {
	tm, err := c.e.timings(ttl)
	if err == nil && ttl > 0 && ttl < bucket.MinTTL {
		err = ErrTTLTooSmall
	}
	if ttl == 0 {
		err = ErrInvalidBucket
	}
	if err != nil {
		if c.ttlUnusable == nil {
			c.log.Errorf("election %s: bucket TTL changed from %v to %v, which cannot hold elections (%v): not leading or campaigning until it changes", c.e.key, c.tm.ttl, ttl, err)
		}
		c.ttlUnusable = err
		if c.phase.holds() {
			c.giveUp(now)
		}
		return false
	}
	if ttl == c.tm.ttl {
		return true
	}
	c.log.Warnf("election %s: bucket TTL changed from %v to %v", c.e.key, c.tm.ttl, ttl)
	if ttl < c.tm.ttl && c.phase.holds() {
		c.shortenLease(c.hold.sent.Add(ttl - tm.margin))
		if next := c.hold.sent.Add(tm.renew); next.Before(c.hold.nextRenew) {
			c.hold.nextRenew = next // renew by the new interval, before the shortened lease ends
		}
	}
	c.tm = tm
	c.e.setTimings(tm)
	return true
}

// readTTL asks the broker for the bucket's TTL; 0 means none.
func (c *campaigner) readTTL(now time.Time) (time.Duration, error) {
	ctx, cancel := c.requestContext(now)
	defer cancel()
	st, err := c.store.Status(ctx)
	if err != nil {
		c.failed(err)
		c.log.Debugf("election %s: cannot read the bucket's TTL: %v", c.e.key, err)
		return 0, err
	}
	c.noteBucketBorn(c.clock.Now(), streamCreated(st))
	return st.TTL(), nil
}

// streamCreated returns when the stream behind a bucket's status was
// created, or zero when the status does not say.
func streamCreated(st jetstream.KeyValueStatus) time.Time {
	if bs, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo }); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().Created
	}
	return time.Time{}
}

// shortenLease brings the lease, and the term with it, forward to until.
func (c *campaigner) shortenLease(until time.Time) {
	if until.Before(c.hold.lease) {
		c.hold.lease = until
		if c.term != nil {
			c.term.limit(until)
		}
	}
}

// renew extends our hold on the key with a compare-and-swap on our last
// revision.
func (c *campaigner) renew(now time.Time) {
	c.notifyCampaign(LeaderState)
	ctx, cancel := c.requestContext(now)
	rev, err := c.store.Write(ctx, c.e.key, []byte(c.e.identity), c.hold.rev)
	cancel()
	done := c.clock.Now()
	h := &c.hold
	switch {
	case err == nil:
		h.rev, h.inDoubt, h.tries = rev, false, 0
		h.sent = now
		h.lease = now.Add(c.tm.ttl - c.tm.margin)
		h.nextRenew = now.Add(c.tm.renew)
		c.seenRev = max(c.seenRev, rev)
		c.e.setRenewed(done)
		c.rec.Renewed(c.e.key, done.Sub(now))
		c.view = keyView{known: true, Entry: Entry{Key: c.e.key, State: KeyHeld, Leader: c.e.identity, Revision: rev},
			seenAt: done, readAt: done, expiresBy: now.Add(c.tm.ttl), confirmed: true, ttl: c.tm.ttl}
		if c.term != nil && !c.term.extend(h.lease) {
			// The deadline passed while the renewal was in flight: that term
			// is over. The key is still ours, so a new term begins next tick.
			c.finishTerm(CauseDeadline)
			c.move(winning)
		}
	case isMismatch(err) && h.inDoubt:
		// An earlier renewal failed without an answer and may have been
		// stored, which would explain the mismatch; but a candidate with our
		// identity may also have taken the key after someone removed it, and
		// the two cannot be told apart. Neither can take over before our
		// lease ends, so we lead until then and stop renewing.
		c.move(doomed)
		c.log.Warnf("election %s: renewal of revision %d refused after an earlier renewal's outcome was unknown; leading until the deadline in %v, then standing down", c.e.key, h.rev, h.lease.Sub(done).Round(time.Millisecond))
	case isMismatch(err):
		deposed := done.Before(h.lease)
		cause := CauseExpired
		if deposed {
			cause = CauseDeposed
		}
		c.log.Warnf("election %s: renewal of revision %d refused (%s): standing down", c.e.key, h.rev, cause)
		c.dropHold(done, deposed)
	case c.failed(err):
	default:
		h.inDoubt = h.inDoubt || mayHaveApplied(err)
		h.tries++
		delay := c.tm.retry
		if !done.Before(h.lease) {
			delay = min(c.tm.retry<<min(h.tries, 6), c.tm.ttl/2)
		}
		h.nextRenew = done.Add(jittered(delay))
		c.log.Warnf("election %s: renewal failed (try %d, deadline in %v): %v", c.e.key, h.tries, h.lease.Sub(done).Round(time.Millisecond), err)
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
	rev := c.hold.rev
	c.move(candidate)
	c.hold = hold{}
	if deposed {
		c.sitOut = sitOut{until: now.Add(c.tm.ttl), rev: rev}
	}
	c.view.readAt = time.Time{} // read again before campaigning without a watch
	c.schedule(now)
}

// giveUp hands the key over because the bucket can no longer hold
// elections: it ends the term and releases the key.
func (c *campaigner) giveUp(now time.Time) {
	if c.term != nil {
		c.finishTerm(CauseDeadline)
	}
	if c.phase != doomed {
		if c.lastLost != nil {
			<-c.lastLost // a next leader's OnWon comes after our OnLost
		}
		c.release(now)
	}
	c.move(candidate)
	c.hold = hold{}
	c.nextCampaign = time.Time{}
}

func (c *campaigner) beginTerm() {
	c.move(leading)
	token := c.hold.token
	if token == 0 {
		token = c.hold.rev // a later term of this hold (after a deadline) begins at the latest write
	}
	c.hold.token = 0
	t := newTerm(c.ctx, c.clock, c.e.key, c.e.identity, token, c.hold.lease)
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

// nobodyElseCanLead reports whether no other candidate can still count on
// the key we hold: the one before us released it, or its key expired and any
// grace has passed, or it was removed and we waited a TTL since.
func (c *campaigner) nobodyElseCanLead(now time.Time) bool {
	switch c.hold.from {
	case KeyReleased:
		return true
	case KeyRemoved:
		return c.hold.ttlRead && !now.Before(c.hold.safeAt)
	default:
		return !now.Before(c.hold.wonAt.Add(c.e.opts.grace))
	}
}

// release hands the key over with a delete marker over our own revision. It
// carries a release mark, which lets the next candidate lead at once, only
// when no one else can still count on the key: once our term could begin. A
// holder still waiting out a deposed leader or a grace removes the key
// without the mark, so the next leader waits as we would have.
func (c *campaigner) release(now time.Time) {
	var payload []byte
	if c.nobodyElseCanLead(now) {
		payload = releasePayload(c.e.identity)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.tm.request)
	defer cancel()
	marked, err := c.store.Delete(ctx, c.e.key, c.hold.rev, payload)
	switch {
	case err != nil:
		c.log.Warnf("election %s: could not release revision %d, the key expires within %v: %v", c.e.key, c.hold.rev, c.tm.ttl, err)
	case marked:
		c.log.Debugf("election %s: released revision %d", c.e.key, c.hold.rev)
	default:
		c.log.Debugf("election %s: removed revision %d without a release mark", c.e.key, c.hold.rev)
	}
}
