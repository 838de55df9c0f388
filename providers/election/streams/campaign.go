package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// driver runs a lease machine on a single goroutine: it performs the
// machine's actions on the store, feeds it their outcomes and the watch's
// messages, and hands the machine's notes to apply. It decides nothing
// itself. A candidate's campaigner and an Observer are drivers.
type driver struct {
	key, identity string
	instance      string // stamped on writes; "" for an observer
	store         store
	clock         clock.Clock
	m             *machine
	log           Logger // where the machine's noteLog lines go
	// apply passes notes on, and returns what the machine must be told
	// next, if anything.
	apply func([]note) (input, bool)
	// before is called before each write with whether it renews.
	before func(renewal bool)
	// lastLost, when set, is waited for before a release or an offer.
	lastLost func() <-chan struct{}
	// offer, when set, offers the key, held at rev in the bucket created at
	// epoch, to the candidate to, and returns nil once to took it (doOffer).
	offer func(ctx context.Context, to handOver, rev uint64, epoch time.Time) error
	// successor, when set, names the standby a stopping leader offers the
	// key to ("" for none): asked once, as the campaign stops.
	successor func() handOver
	// stopTo is the standby the stop offers the key to, once stopping.
	stopTo string

	w      jetstream.KeyWatcher // the watch, or nil
	cancel context.CancelFunc   // ends the watch's context
	drains sync.WaitGroup       // stopped watches still being drained
	done   bool

	// asks are requests to the machine from other goroutines (HandOver,
	// an offer of the key), answered in order, each by the first note of
	// its kind; exited closes when the loop has ended, and the asks not
	// answered then get ErrNotLeader.
	asks    chan ask
	exited  chan struct{}
	waiting []ask
}

// ask is a request to the machine, and where its outcome goes: the error of
// the first note of kind answer the machine takes after it.
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

// loop steps the machine until it finishes: with inStop once ctx ends, with
// what the watch delivers, and with inTick when it asked to be woken.
func (d *driver) loop(ctx context.Context, wake time.Time) {
	timer := d.clock.NewTimer(time.Hour)
	defer timer.Stop()
	var changes <-chan time.Time
	if sc, ok := d.store.(settingsNotifier); ok {
		var stop func()
		changes, stop = sc.SettingsChanges()
		defer stop()
	}
	defer func() {
		if d.exited != nil {
			close(d.exited)
		}
		for _, a := range d.waiting {
			a.done <- ErrNotLeader
		}
		d.waiting = nil
	}()
	stopped := false
	for !d.done {
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		timer.Reset(max(wake.Sub(d.clock.Now()), 0))
		done := ctx.Done()
		if stopped {
			done = nil
		}
		select {
		case <-done:
			stopped = true
			in := input{kind: inStop, now: d.clock.Now()}
			if d.successor != nil {
				in.handOver = d.successor()
				d.stopTo = in.handOver.to
			}
			wake = d.handle(in)
		case ent, ok := <-d.updates():
			wake = d.handle(d.watchInput(ent, ok))
		case <-timer.C():
			wake = d.handle(input{kind: inTick, now: d.clock.Now()})
		case a := <-d.asks:
			if a.done != nil {
				d.waiting = append(d.waiting, a)
			}
			a.in.now = d.clock.Now()
			wake = d.handle(a.in)
		case sent := <-changes:
			// The bucket's settings changed: read them, served by the
			// read the process made since.
			now := d.clock.Now()
			wake = d.handle(input{kind: inAskTTL, now: now, sent: now.Add(-time.Since(sent))})
		}
	}
	d.drains.Wait()
}

// settingsNotifier is a store that tells of changes of the bucket's
// settings (see transport.Store.SettingsChanges).
type settingsNotifier interface {
	SettingsChanges() (<-chan time.Time, func())
}

// campaigner drives one Election's lease machine and passes its notes on to
// the Term, the callbacks and the recorder.
type campaigner struct {
	driver
	e        *Election
	n        *notifier
	log      Logger
	rec      Recorder
	ctx      context.Context
	term     *Term
	lastLost <-chan struct{} // closed when the latest OnLost has returned
}

func newCampaigner(e *Election, n *notifier, tm timings) *campaigner {
	cfg := machineConfig{
		identity: e.identity, key: e.key, writes: true,
		grace: e.opts.grace, releaseOnStop: e.opts.releaseOnStop, timings: e.timings,
		random: e.opts.random,
	}
	c := &campaigner{e: e, n: n, log: e.opts.log, rec: e.opts.recorder}
	c.driver = driver{key: e.key, identity: e.identity, instance: e.instance, store: e.store, clock: e.opts.clock,
		m: newMachine(cfg, tm), log: e.opts.log, apply: c.apply, before: c.notifyCampaign,
		lastLost: func() <-chan struct{} { return c.lastLost },
		asks:     make(chan ask), exited: make(chan struct{})}
	return c
}

// run campaigns until ctx ends, and returns an error only if the campaign
// could not go on: the connection was closed for good, or permission was
// refused.
func (c *campaigner) run(ctx context.Context, born time.Time) error {
	if sr, ok := c.rec.(StartRecorder); ok {
		sr.Started(c.e.key)
	}
	c.loop(ctx, c.begin(ctx, born))
	switch fatal := c.m.fatal; {
	case errors.Is(fatal, ErrPermissionDenied):
		return fmt.Errorf("election %s: %w", c.e.key, fatal)
	case fatal != nil:
		return fmt.Errorf("election %s: %w: the connection to the broker was closed; campaign again with a new Election on an open connection", c.e.key, fatal)
	}
	return nil
}

// begin starts the machine under ctx; born is when the bucket's stream was
// created, as Start read it.
func (c *campaigner) begin(ctx context.Context, born time.Time) time.Time {
	c.ctx = ctx
	tm := c.m.tm
	c.log.Debugf("election %s: %s campaigning, ttl %v, renew every %v, safety margin %v", c.e.key, c.e.identity, tm.ttl, tm.renew, tm.margin)
	return c.handle(input{kind: inStart, now: c.clock.Now(), born: born})
}

// handle steps the machine with in, performs what it asks until it asks
// for nothing, and returns when to step it again.
func (d *driver) handle(in input) time.Time {
	out := d.m.step(classified(in))
	for {
		logNotes(d.log, out.notes)
		d.watchNotes(out.notes)
		if next, ok := d.apply(out.notes); ok {
			out = d.m.step(classified(next))
			continue
		}
		if out.done {
			d.done = true
			return out.wake
		}
		if out.do.kind == doNothing {
			return out.wake
		}
		out = d.m.step(classified(d.perform(out.do)))
	}
}

// updates is the watch's channel, or nil (never ready) without a watch.
func (d *driver) updates() <-chan jetstream.KeyValueEntry {
	if d.w == nil {
		return nil
	}
	return d.w.Updates()
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
		rev, err := d.store.Write(ctx, d.key, []byte(d.identity), a.expect, transport.Stamp{Instance: d.instance, Term: a.term.header()})
		return input{kind: inWrite, sent: sent, now: d.clock.Now(), rev: rev, expect: a.expect, err: err}
	case doRelease:
		d.awaitLastLost()
		var payload []byte
		switch {
		case a.marked && a.handOver.to != "":
			payload = handOverPayload(d.identity, a.handOver.to, a.handOver.within)
		case a.marked:
			payload = releasePayload(d.identity)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), d.m.tm.request)
		defer rcancel()
		rctx = transport.WithPriority(rctx, transport.Urgent)
		marked, err := d.store.Delete(rctx, d.key, a.expect, payload, transport.Stamp{Instance: d.instance})
		return input{kind: inRelease, sent: sent, now: d.clock.Now(), marked: marked, err: err}
	case doOffer:
		d.awaitLastLost()
		err := errors.New("this candidate cannot offer the key")
		if d.offer != nil {
			octx, ocancel := context.WithTimeout(context.Background(), a.timeout) // counted from now, after OnLost
			err = d.offer(octx, a.handOver, a.expect, a.epoch)
			ocancel()
		}
		return input{kind: inOffer, sent: sent, now: d.clock.Now(), err: err}
	case doReadTTL:
		var maxAge time.Duration
		if !a.since.IsZero() {
			maxAge = max(sent.Sub(a.since), 0)
		}
		asked := time.Now()
		st, age, err := d.store.Status(ctx, maxAge)
		readAt := sent
		if err == nil && age > time.Since(asked) {
			// A shared read sent before this one asked for it: the machine
			// counts from when it was sent, by the election's clock, which
			// need not be the store's. Too old by that clock: read afresh.
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
		_, restartable := d.w.(interface{ Restart() })
		return input{kind: inWatchMade, sent: sent, now: d.clock.Now(), err: err, restartable: restartable}
	}
	panic(fmt.Sprintf("election %s: bug: unknown action %d", d.key, a.kind))
}

// awaitLastLost waits, before a release or an offer of the key, for the
// latest OnLost to return: the next leader's OnWon comes after it.
func (d *driver) awaitLastLost() {
	if d.lastLost == nil {
		return
	}
	if lost := d.lastLost(); lost != nil {
		<-lost
	}
}

// makeWatch subscribes to the key; a watch not set up within timeout is
// given up.
func (d *driver) makeWatch(timeout time.Duration) error {
	// The watch lives as long as its context, so it cannot carry a timeout:
	// cancel it instead if setting up takes too long.
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(timeout, cancel) // network time, not the election's clock
	w, err := d.store.Watch(ctx, d.key)
	if !timer.Stop() {
		if err == nil {
			kvwatch.StopInBackground(w, &d.drains)
		}
		err = fmt.Errorf("watch not set up within %v: %w", timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return err
	}
	d.w, d.cancel = w, cancel
	return nil
}

// stopWatch stops the watch and drains it in the background: the watcher
// blocks delivering into a full channel, and closes it only once stopped.
func (d *driver) stopWatch() {
	if d.w == nil {
		return
	}
	kvwatch.StopInBackground(d.w, &d.drains)
	d.w = nil
	d.cancel()
}

// logNotes logs the machine's noteLog lines to log, in order.
func logNotes(log Logger, notes []note) {
	for _, n := range notes {
		if n.kind != noteLog {
			continue
		}
		switch n.level {
		case levelDebug:
			log.Debugf(n.format, n.args...)
		case levelInfo:
			log.Infof(n.format, n.args...)
		case levelWarn:
			log.Warnf(n.format, n.args...)
		default:
			log.Errorf(n.format, n.args...)
		}
	}
}

// watchNotes stops or restarts the watch as the machine's notes say.
func (d *driver) watchNotes(notes []note) {
	for _, n := range notes {
		switch n.kind {
		case noteStopWatch:
			d.stopWatch()
		case noteRestartWatch:
			if r, ok := d.w.(interface{ Restart() }); ok {
				r.Restart() // a shared watch is made again for all, and stays subscribed
			}
		}
	}
}

// apply passes the machine's notes on. It returns what the machine must be
// told next, if anything: that the term ended by its clock before an
// extension reached it.
func (c *campaigner) apply(notes []note) (next input, ok bool) {
	for _, n := range notes {
		switch n.kind {
		case noteBegan:
			c.beginTerm(n.token, n.until)
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
			c.e.setTimings(c.m.tm)
		case noteViewChanged:
			if s := c.e.steward; s != nil {
				s.start() // the key can be read: announce the candidate
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

func (c *campaigner) beginTerm(token uint64, until time.Time) {
	if s := c.e.steward; s != nil {
		defer s.poke() // a better candidate may stand already
	}
	// The machine is ours (this goroutine steps it); its hold is the one
	// that began this term.
	t := newTerm(c.ctx, c.clock, c.e.key, c.e.identity, token, c.m.hold.from, until)
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
		// The outcome of the offer is logged as it is known, and read
		// from HandedOverTo.
		c.log.Infof("election %s: %s stopped leading (stopping: offering the key to %s, else releasing it), token %d", c.e.key, c.e.identity, c.stopTo, t.Token())
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
