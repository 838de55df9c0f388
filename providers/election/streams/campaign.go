package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// driver steps a lease machine on its process's scheduler, deciding nothing
// itself: it performs the machine's actions, feeds it their outcomes and the
// watch's messages, and hands its notes to apply. One goroutine at a time
// steps the machine, never while its action is in flight.
type driver struct {
	key, identity string
	instance      string // stamped on writes; "" for an observer
	store         store
	clock         clock.Clock
	m             *machine
	tm            timings // the timings in force, as the machine last noted
	fatal         error   // why the campaign could not go on, as the machine noted
	log           Logger
	// apply passes notes on, and returns what the machine must be told next.
	apply    func([]note) (input, bool)
	before   func(renewal bool) // called before each write
	lastLost <-chan struct{}    // closed once the latest OnLost has returned
	// offer, when set, offers the key, held at rev in the bucket created at
	// epoch, to the candidate to, and returns nil once to took it.
	offer func(ctx context.Context, to handOver, rev uint64, epoch time.Time) error
	// successor, when set, names the standby a stopping leader offers the key
	// to ("" for none) but those in but: asked as the stop is taken and as
	// the offer is made.
	successor func(but ...handOver) handOver
	stopTo    string // the standby the stop offers the key to (handOver.who)

	w      jetstream.KeyWatcher // the watch, or nil
	drains sync.WaitGroup       // stopped watches still being drained
	done   bool
	// waiting are the asks taken, each answered by the first note of its kind
	// in order; those left when the driver finishes get ErrNotLeader.
	waiting    []ask
	stopPosted atomic.Bool // postStop posted the stop

	// The scheduler's, under its mu.
	sched        *scheduler
	added        bool        // on the scheduler, whose loop reads the watch; else stepped by hand (tests)
	inbox        []ask       // inputs posted, not taken yet
	result       *input      // the outcome of the action, not taken yet
	settingsSent time.Time   // a change of the bucket's settings not taken yet, or zero
	watchReady   bool        // the watch may have delivered something
	tickDue      bool        // the wake-up came
	queued       bool        // in the scheduler's ready list
	inFlight     bool        // an action is under way
	ended        bool        // finished: takes nothing more
	wake         wakeup      // when the machine asked to be stepped next; in the heap while asleep
	finished     func()      // called off the loop once the driver ended
	stopChanges  func()      // stops the notices of changes of the settings
	stopOnDone   func() bool // stops the stop that ctx's end posts
}

// ask is a request to the machine, answered on done with the error of the
// first note of kind answer the machine takes after it.
type ask struct {
	in     input
	answer noteKind
	done   chan<- error
}

// answer hands err to the oldest ask waiting for a note of kind k.
func (d *driver) answer(k noteKind, err error) {
	for i, a := range d.waiting {
		if a.answer == k {
			a.done <- err
			d.waiting = append(d.waiting[:i:i], d.waiting[i+1:]...)
			return
		}
	}
}

// post hands the machine a, in order after the asks posted before; once
// the driver has finished, a gets ErrNotLeader.
func (d *driver) post(a ask) { d.sched.post(d, a) }

// launch runs the driver on its scheduler from first until it finishes
// (ctx's end posts a stop), fed by the watch and the notices of changes of
// the bucket's settings. done is called on a goroutine of its own once it
// has finished and the watches it stopped are drained.
func (d *driver) launch(ctx context.Context, first input, done func()) {
	if d.sched == nil {
		d.sched = schedulerFor(d.clock)
	}
	if sc, ok := d.store.(settingsNotifier); ok {
		d.stopChanges = sc.SettingsChanges(func(sent time.Time) { d.sched.settingsChanged(d, sent) })
	}
	d.stopOnDone = context.AfterFunc(ctx, d.postStop)
	d.sched.add(d, first, func() {
		d.drains.Wait()
		done()
	})
}

// postStop tells the machine to stop, once however often it is called.
func (d *driver) postStop() {
	if !d.stopPosted.Swap(true) {
		d.sched.post(d, ask{in: input{kind: inStop}})
	}
}

// settingsNotifier is a store that tells of changes of the bucket's settings.
type settingsNotifier interface {
	SettingsChanges(notify func(sent time.Time)) (stop func())
}

// campaigner drives one Election's machine, passing its notes on to the
// Term, the callbacks and the recorder.
type campaigner struct {
	driver
	e    *Election
	n    *notifier
	rec  Recorder
	ctx  context.Context
	term *Term
}

// newCampaigner drives e's machine; s, when set, is e's steward of who is
// standing, through which a leader offers the key on.
func newCampaigner(e *Election, n *notifier, tm timings, s *steward) *campaigner {
	cfg := machineConfig{
		identity: e.identity, instance: e.instance, key: e.key, writes: true, offers: s != nil,
		grace: e.opts.grace, releaseOnStop: e.opts.releaseOnStop, timings: e.timings,
		random: e.opts.random,
	}
	c := &campaigner{e: e, n: n, rec: e.opts.recorder}
	c.driver = driver{key: e.key, identity: e.identity, instance: e.instance, store: e.store, clock: e.opts.clock,
		m: newMachine(cfg, tm), tm: tm, log: e.opts.log, apply: c.apply, before: c.notifyCampaign,
		sched: schedulerFor(e.opts.clock)}
	if s != nil {
		c.offer = func(ctx context.Context, to handOver, rev uint64, epoch time.Time) error {
			err := s.offer(ctx, to, rev, epoch)
			if err == nil {
				e.setHandedTo(to.to)
			}
			return err
		}
		c.successor = s.successor
	}
	return c
}

// launch campaigns under ctx (caller's child, which Stop ends) until caller
// ends or postStop is called, and returns at once; done gets the result once
// the campaign has wound down. The stop waits on caller (whose one map of
// children the process's elections share), not on ctx. unhealthy is why the
// health check before the start failed, if it did.
func (c *campaigner) launch(caller, ctx context.Context, born time.Time, unhealthy error, done func(error)) {
	c.rec.Started(c.e.key)
	first := c.begin(ctx, born)
	first.unhealthy = unhealthy
	c.driver.launch(caller, first, func() {
		done(fatalError("election "+c.e.key, c.fatal, "campaign again with a new Election"))
	})
}

// fatalError is why who ("election k", "observer k") could not go on, if
// fatal: refused for permissions, or its connection closed (again: what to do).
func fatalError(who string, fatal error, again string) error {
	switch {
	case fatal == nil:
		return nil
	case errors.Is(fatal, ErrPermissionDenied):
		return fmt.Errorf("%s: %w", who, fatal)
	}
	return fmt.Errorf("%s: %w: the connection to the broker was closed; %s on an open connection", who, fatal, again)
}

// begin readies the campaign under ctx and returns its first input; born
// is when the bucket's stream was created, as Start read it.
func (c *campaigner) begin(ctx context.Context, born time.Time) input {
	c.ctx = ctx
	c.log.Debugf("election %s: %s campaigning, ttl %v, renew every %v, safety margin %v",
		c.e.key, c.e.identity, c.tm.ttl, c.tm.renew, c.tm.margin)
	return input{kind: inStart, now: c.clock.Now(), born: born}
}

// handle steps the machine with in, passing its notes on, and returns when
// to step it again and the action to perform first (off the loop), if any.
func (d *driver) handle(in input) (time.Time, action) {
	switch {
	case in.kind == inStop:
		d.nameSuccessor(&in)
	case in.stop != nil:
		stop := *in.stop
		d.nameSuccessor(&stop)
		in.stop = &stop
	}
	out := d.m.step(classified(in))
	for {
		d.takeNotes(out.notes)
		next, ok := d.apply(out.notes)
		if !ok {
			break
		}
		out = d.m.step(classified(next))
	}
	if out.done {
		d.done = true
		return out.wake, action{}
	}
	return out.wake, out.do
}

// nameSuccessor names in stop the standby the policy names now, unless it
// names one.
func (d *driver) nameSuccessor(stop *input) {
	if stop.handOver.to == "" && d.successor != nil {
		stop.handOver = d.successor()
		d.stopTo = stop.handOver.who()
	}
}

// stamp is what a's write says of itself, written by instance.
func (a action) stamp(instance string) keymsg.Stamp {
	st := keymsg.Stamp{Instance: instance, Term: a.term.header()}
	if a.write != 0 {
		st.Write = strconv.FormatUint(a.write, 16)
	}
	return st
}

// watchInput reads what the watch delivered: a message, the end of its
// initial values (a nil entry), or its end.
func (d *driver) watchInput(ent jetstream.KeyValueEntry, ok bool) input {
	now := d.clock.Now()
	if !ok {
		err := errors.New("the watch ended")
		if w, ok := d.w.(interface{ Err() error }); ok && w.Err() != nil {
			err = w.Err()
		}
		d.stopWatch()
		return input{kind: inWatchEnded, now: now, err: err}
	}
	if ent == nil {
		return input{kind: inWatchInitialDone, now: now}
	}
	e := ReadEntry(ent)
	return input{kind: inWatchEntry, now: now, entry: &e}
}

// perform does one action of the machine's and returns its outcome.
func (d *driver) perform(a action) input {
	sent := d.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if a.renewal || a.urgent {
		ctx = transport.WithPriority(ctx, transport.Urgent) // before the process's campaigns and reads
	}
	switch a.kind {
	case doRead:
		ent, err := d.store.Latest(ctx, d.key)
		in := input{kind: inRead, sent: sent, now: d.clock.Now(), err: err}
		if ent != nil && err == nil {
			e := ReadEntry(ent)
			in.entry = &e
		}
		return in
	case doWrite:
		if d.before != nil {
			d.before(a.renewal)
		}
		rev, err := d.store.Write(ctx, d.key, []byte(d.identity), a.expect, a.stamp(d.instance))
		return input{kind: inWrite, sent: sent, now: d.clock.Now(), rev: rev, expect: a.expect, write: a.write, err: err}
	case doRelease:
		d.awaitLastLost()
		var payload []byte
		switch {
		case a.marked && a.handOver.to != "":
			payload = handOverPayload(d.identity, a.handOver.to, a.handOver.within)
		case a.marked:
			payload = releasePayload(d.identity)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), d.tm.request)
		defer rcancel()
		rctx = transport.WithPriority(rctx, transport.Urgent)
		st := keymsg.Stamp{Instance: d.instance}
		if a.marked {
			st.HandOverInstance = a.handOver.instance
		}
		marked, err := d.store.Delete(rctx, d.key, a.expect, payload, st)
		return input{kind: inRelease, sent: sent, now: d.clock.Now(), marked: marked, err: err}
	case doOffer:
		d.awaitLastLost()
		err := errors.New("this candidate cannot offer the key")
		to := a.handOver
		if d.offer != nil {
			octx, ocancel := context.WithTimeout(context.Background(), a.timeout) // counted from now, after OnLost
			to, err = d.offerOnward(octx, a)
			ocancel()
		}
		return input{kind: inOffer, sent: sent, now: d.clock.Now(), handOver: to, err: err}
	case doReadTTL:
		var maxAge time.Duration
		if !a.since.IsZero() {
			maxAge = max(sent.Sub(a.since), 0)
		}
		asked := time.Now()
		st, age, err := d.store.Status(ctx, maxAge)
		readAt := sent
		if err == nil && age > time.Since(asked) {
			// A shared read sent before this one asked: counted from when it
			// was sent, by the election's clock (not the store's); too old
			// by that clock, read afresh.
			readAt = d.clock.Now().Add(-age)
			if readAt.Before(a.since) {
				st, _, err = d.store.Status(ctx, 0)
				readAt = sent
			}
		}
		in := input{kind: inTTL, sent: readAt, now: d.clock.Now(), err: err}
		if err == nil {
			in.ttl, in.born = st.TTL(), transport.StreamCreated(st)
		}
		return in
	case doWatch:
		err := d.makeWatch(a.timeout)
		_, canRestart := restartable(d.w)
		return input{kind: inWatchMade, sent: sent, now: d.clock.Now(), err: err, restartable: canRestart}
	}
	panic(fmt.Sprintf("election %s: bug: unknown action %d", d.key, a.kind))
}

// offerOnward offers the key as a says, and returns whom it offered it to
// last. A stop's offer (orNext) refused outright, by an answer or for want
// of one, goes on to the next best standby (offerTo) while ctx lasts: a copy
// of the same process may stop with the leader, and refuse. An unanswered
// offer is not followed by another: its write may have landed (all are over
// the same revision).
func (d *driver) offerOnward(ctx context.Context, a action) (handOver, error) {
	to, _ := d.offerTo(a, nil)
	err := d.offer(ctx, to, a.expect, a.epoch)
	var refused []handOver
	for err != nil && to.orNext && ctx.Err() == nil {
		refused = append(refused, to)
		next, ok := d.offerTo(a, refused)
		if !ok {
			break
		}
		d.log.Infof("election %s: %s did not take up the offer (%v): offering the key to %s", d.key, to.who(), err, next.who())
		to = next
		err = d.offer(ctx, to, a.expect, a.epoch)
	}
	return to, err
}

// offerTo is whom offer a goes to once those in refused refused it, and
// false when none is left. A stop's offer (orNext) goes to the standby the
// policy names now, as who stands may have changed since the stop began;
// otherwise, or when the policy names no other, the first offer goes where
// a says and there is no next.
func (d *driver) offerTo(a action, refused []handOver) (handOver, bool) {
	to := a.handOver
	if to.orNext && d.successor != nil {
		if next := d.successor(refused...); next.namesAnother(d.identity) {
			next.within, next.orNext = to.within, true
			return next, true
		}
	}
	return to, len(refused) == 0
}

// awaitLastLost waits, before a release or an offer of the key, for the
// latest OnLost to return: the next leader's OnWon comes after it.
func (d *driver) awaitLastLost() {
	if d.lastLost != nil {
		<-d.lastLost
	}
}

// makeWatch subscribes to the key; a watch not set up within timeout
// (network time, not the election's clock) is given up, else it lives
// until stopped.
func (d *driver) makeWatch(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := d.store.Watch(ctx, d.key)
	if ctx.Err() != nil {
		if err == nil {
			kvwatch.StopInBackground(w, &d.drains)
		}
		err = fmt.Errorf("watch not set up within %v: %w", timeout, context.DeadlineExceeded)
	}
	if err != nil {
		return err
	}
	if d.added {
		w = notifying(w, &d.drains, func() { d.sched.notify(d) })
	}
	d.w = w
	return nil
}

// stopWatch stops the watch and drains it (the watcher blocks delivering
// into a full channel until stopped) off the scheduler's loop: stopping a
// shared watch's last subscription waits for its consumer being made
// (seconds, when the broker is slow or refuses it).
func (d *driver) stopWatch() {
	if w := d.w; w != nil {
		d.w = nil
		d.drains.Add(1)
		go func() {
			defer d.drains.Done()
			kvwatch.Stop(w)
		}()
	}
}

// takeNotes logs the machine's noteLog lines and takes in its notes for the
// driver itself.
func (d *driver) takeNotes(notes []note) {
	for _, n := range notes {
		switch n.kind {
		case noteLog:
			switch n.level {
			case levelDebug:
				d.log.Debugf(n.format, n.args...)
			case levelInfo:
				d.log.Infof(n.format, n.args...)
			case levelWarn:
				d.log.Warnf(n.format, n.args...)
			default:
				d.log.Errorf(n.format, n.args...)
			}
		case noteTimings:
			d.tm = *n.timings
		case noteFailed:
			d.fatal = n.err
		case noteStopWatch:
			d.stopWatch()
		case noteRestartWatch:
			if r, ok := restartable(d.w); ok {
				r.Restart() // a shared watch is made again for all, and stays subscribed
			}
		}
	}
}

// apply passes the machine's notes on. It returns what the machine must be
// told next, if anything: that the term ended before an extension reached it.
func (c *campaigner) apply(notes []note) (next input, ok bool) {
	for _, n := range notes {
		switch n.kind {
		case noteBegan:
			c.beginTerm(n.token, n.until, n.from)
		case noteExtended:
			if c.term != nil && !c.term.extend(n.until) {
				next, ok = input{kind: inTermLapsed, now: c.clock.Now()}, true
			}
		case noteLimited:
			if c.term != nil {
				c.term.limit(n.until)
			}
		case noteEnded:
			c.finishTerm(n.cause)
		case noteRenewed:
			c.e.setRenewed(n.at)
			if n.latency >= 0 {
				c.rec.Renewed(c.e.key, n.latency)
			}
		case noteTimings:
			c.e.setTimings(c.tm)
		case noteViewChanged:
			if s := c.e.steward; s != nil {
				s.start(c.sched) // the key can be read: announce the candidate
			}
		case noteHandOver, noteTakeOver:
			c.answer(n.kind, n.err)
		}
	}
	return next, ok
}

func (c *campaigner) notifyCampaign(renewal bool) {
	s := CandidateState
	if renewal {
		s = LeaderState
	}
	c.rec.Campaign(c.e.key, s)
	if cb := c.e.opts.onCampaign; cb != nil {
		c.n.post(func() { cb(s) })
	}
}

func (c *campaigner) beginTerm(token uint64, until time.Time, from KeyState) {
	if s := c.e.steward; s != nil {
		defer s.poke() // a better candidate may stand already
	}
	t := newTerm(c.ctx, c.clock, c.e.key, c.e.identity, token, from, until)
	c.e.setHandedTo("")
	c.term = t
	c.e.setTerm(t)
	c.rec.Won(c.e.key)
	c.rec.Leading(c.e.key, true)
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
	if t == nil {
		return
	}
	if s := c.e.steward; s != nil {
		defer s.poke() // the roll of a leader goes
	}
	c.term = nil
	cause = t.end(cause)
	c.e.setTerm(nil)
	c.rec.Lost(c.e.key, cause)
	c.rec.Leading(c.e.key, false)
	if cause == CauseReleased && c.stopTo != "" {
		c.log.Infof("election %s: %s stopped leading (stopping: offering the key to %s, else releasing it), token %d",
			c.e.key, c.e.identity, c.stopTo, t.Token())
	} else {
		c.log.Infof("election %s: %s stopped leading (%s), token %d", c.e.key, c.e.identity, cause, t.Token())
	}
	lost := c.e.opts.onLost
	c.lastLost = c.n.post(func() {
		if lost != nil {
			lost()
		}
	})
}
