package streams

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/bucket"
)

// machine is the election's lease machine: all one candidate (or, with
// writes off, one observer) knows of its key, and every decision it takes.
// It does no I/O and reads no clock: step takes what happened, and when,
// and returns what to do and when to step again, both from plan. The
// driver performs one action at a time and steps its result in first.
type machine struct {
	cfg machineConfig
	tm  timings
	log noteLogger
	out *output // while a step runs: what it outputs

	phase   phase
	view    keyView
	seenRev uint64 // the highest revision seen in this epoch
	// seenWritten: the latest broker write time of messages up to seenRev
	// (zero while seenRev's is unknown, lest a stale answer pass for a new
	// bucket's); a lower revision written after it is of a bucket made again.
	seenWritten time.Time
	gone        *keyView // the held view the key was last found gone from, as expired
	// displaced: what a view replaced by a bare revision (onCampaign) or a
	// bucket made again (noteBucketBorn) showed, until the next view.
	displaced  *keyView
	doubt      *doubtfulWrite // our latest campaign write of unknown outcome (adoptDoubt)
	remadeSeen time.Time      // a message showed the bucket made again, its creation time unread
	epoch      time.Time      // the bucket's stream creation time, as last read

	nextCampaign time.Time // zero: nothing scheduled until the view changes
	// confirmDue: a read is due, the watch having begun with the key absent
	// while we knew it held at confirmFrom, from which the read judges it.
	confirmDue  time.Time
	confirmFrom time.Time
	tries       int // consecutive failed campaign attempts or reads
	sitOut      sitOut

	nextTTLCheck time.Time
	ttlSince     time.Time // a read sent at or after it serves that check (askTTL)
	ttlReadAt    time.Time // when the latest successful read of the TTL was sent
	ttlAskedRev  uint64    // the revision whose takeover last made us read it
	ttlUnusable  error     // the TTL cannot hold elections: no campaign until it can
	unhealthy    error     // the health check fails: no campaign until it passes

	hold *hold  // while phase.holds(); see held
	term uint64 // the running term's token; 0: none runs (tokens are revisions)
	// handOver: the hand-over under way, or a stop's offer to a standby
	// (orNext) before its release.
	handOver *handOver
	taking   takeOver // when rev is set: an offer taken up, its write due or under way

	watch watchState

	mode     mode
	fatal    error   // a permission refusal or a connection closed for good
	fatalOut outcome // which of the two fatal was
}

// held returns the hold, or a fresh zero one while phase.holds() is false.
func (m *machine) held() *hold {
	if m.hold != nil {
		return m.hold
	}
	return &hold{}
}

// kept returns v to keep beside the view, or nil if v is not known.
func kept(v keyView) *keyView {
	if !v.known {
		return nil
	}
	return &v
}

type machineConfig struct {
	identity, key string
	instance      string // ours: tells apart copies of our identity ("": not known)
	writes        bool   // false for an observer
	grace         time.Duration
	releaseOnStop bool
	offers        bool // the driver can offer the key to a candidate (doOffer)
	timings       func(ttl time.Duration) (timings, error)
	random        func(n int64) int64 // in [0, n): the jitter, which a simulation replays
}

// handOver is a hand-over of the election to candidate to, which has
// within to take the key before the others do.
type handOver struct {
	to          string
	instance    string // the instance of to offered the key ("": any)
	within      time.Duration
	orNext      bool  // a stop's offer: on a refusal, made to the next standby (driver.offerOnward)
	declined    error // the offer was not taken up (declinedOut: how); the release names to
	declinedOut outcome
}

// who names ho's candidate for the log: identity[/instance].
func (ho handOver) who() string {
	if ho.instance == "" {
		return ho.to
	}
	return ho.to + "/" + ho.instance
}

// self names us for the log as handOver.who does.
func (m *machine) self() string { return handOver{to: m.cfg.identity, instance: m.cfg.instance}.who() }

// namesAnother reports whether ho names a candidate other than us: another
// identity, or a copy of ours named by its instance.
func (ho handOver) namesAnother(identity string) bool {
	return ho.to != "" && (ho.to != identity || ho.instance != "")
}

// takeOver is an offer of the key from a leader whose term ended: write
// over rev, which from holds; the term may begin at once (rule 1).
type takeOver struct {
	from string
	rev  uint64
}

// sitOut keeps a deposed leader out of the takeover that follows (a forced
// stand-down must move leadership), and others out of a hand-over's window.
type sitOut struct {
	until time.Time
	rev   uint64 // the revision we were deposed at: a later holder ends the sit-out
	past  bool   // rev is of a bucket deleted since (noteBucketBorn)
}

// hold is what a machine knows while its write holds the key.
type hold struct {
	rev   uint64    // revision of our latest confirmed write
	token uint64    // the next term's token: the write that took the key; 0 means rev
	sent  time.Time // send time of our latest confirmed write
	lease time.Time // leaseEnd(sent): the deadline of any term
	wonAt time.Time // when the write that took the key was confirmed

	// What the key was when we took it, when we learned of that, and the
	// TTL we knew then (earlierHoldersGone).
	from       KeyState
	fromSeenAt time.Time
	fromTTL    time.Duration
	// held: for a key we saw held and then found gone (at goneAt), the view
	// we judged its expiry by, by the higher of its TTL and fromTTL.
	held   *keyView
	goneAt time.Time

	ttlRead    bool      // the TTL was read since we took the key, by a read sent at or after ttlSince
	ttlRetryAt time.Time // when to try that read again
	ttlSince   time.Time

	lapsed    time.Time // the lease whose lapse last made us read the settings again
	nextRenew time.Time
	tries     int  // consecutive failed renewals
	inDoubt   bool // a write since rev failed in a way that may have stored it
	saidWaits bool // our latest write said the term waits: its first renewal tells observers its token
	// namesTerm: our latest write renewed a term (ended since if none
	// runs); a later term waits for a renewal saying it waits, or observers
	// would report the earlier term's token. renewalNames: what the renewal
	// under way says.
	namesTerm, renewalNames bool
	// foundOnStop: a write in doubt taken up while stopping, released only
	// with the mark (after an unmarked one standbys wait longer than its expiry).
	foundOnStop bool
}

// watchState is what the machine knows of its watch: an accelerator, never
// a gate. Without a working one, the machine reads the key on its timers.
type watchState struct {
	mode        watchMode
	restartable bool      // it can be made again in place
	sawInitial  bool      // an initial value arrived
	lastEvent   time.Time // when it last delivered anything, or was made
	retryAt     time.Time // when to try again while there is none
	tries       int       // consecutive failures to make one
	logged      string    // the last failure logged as a warning
}

type watchMode uint8

const (
	watchDown     watchMode = iota // none: made again at retryAt
	watchStarting                  // made; the key's current state not yet delivered
	watchWorking                   // delivering the key's changes
)

func (w *watchState) working() bool { return w.mode == watchWorking }

// stop marks the watch down; it reports whether one was made.
func (w *watchState) stop() (wasUp bool) {
	wasUp, w.mode = w.mode != watchDown, watchDown
	return wasUp
}

// doubtfulWrite is a campaign write of unknown outcome: its number
// (action.write), send time, expected revision, and what the machine knew
// as it was written.
type doubtfulWrite struct {
	write  uint64
	sent   time.Time
	expect uint64
	view   keyView
	gone   *keyView
	epoch  time.Time
	remade time.Time
}

// input is what happened, as the driver tells the machine.
type input struct {
	kind   inputKind
	now    time.Time // when it happened: for a request, when its answer came
	sent   time.Time // for a request: when it was sent
	entry  *Entry    // a message seen; nil: the key has no message
	live   bool      // a watch delivered entry as it was written (not an initial value)
	rev    uint64    // a write's new revision
	expect uint64    // the revision the write expected
	write  uint64    // the number the write carried (action.write)
	ttl    time.Duration
	born   time.Time // when the bucket's stream was created; zero if unknown
	err    error     // for messages; the machine decides on out (see classified)
	out    outcome
	// conflict: for outMismatch, the key's latest revision if the broker named it
	conflict    uint64
	logged      bool     // err was logged already (by a shared watch)
	marked      bool     // a release carried its mark
	restartable bool     // the watch made can be made again in place (a shared one)
	handOver    handOver // inHandOver: to whom, within what; inStop: the standby to offer the key to
	unhealthy   error    // inHealth, inStart: why the health check failed; nil: it passed
	from        string   // inOffered: the leader offering the key over expect, in the bucket born
	// stop: a stop posted while this action was in flight, taken before
	// anything the outcome made due: no term begins once Stop was called.
	stop *input
}

type inputKind int

const (
	inStart inputKind = iota
	inTick
	inStop
	inRead
	inWrite
	inRelease
	inTTL
	inWatchMade
	inWatchEntry
	inWatchInitialDone
	inWatchEnded
	inTermLapsed // the driver's term ended by its clock before an extension reached it
	inAskTTL     // the driver wants the bucket's TTL read now (an observer judging a write)
	inHandOver   // hand the election over to in.handOver.to (Election.HandOver)
	inHealth     // the health check passed, or failed (in.unhealthy)
	inOffered    // in.from, which ended its term, offers us the key over in.expect
	inOffer      // the outcome of doOffer: nil when the candidate took the key
)

// action is what the driver must do now.
type action struct {
	kind    actionKind
	expect  uint64        // doWrite, doRelease: the revision the key must be at
	renewal bool          // doWrite: a renewal rather than a campaign
	term    termMark      // doWrite: what the write says of its term
	urgent  bool          // doWrite: goes before the process's routine requests, as renewals do
	marked  bool          // doRelease: carry the release mark
	timeout time.Duration // bound on the request
	// since: for doReadTTL, a read sent at or after since serves (such as
	// another election's). Zero: a new read.
	since    time.Time
	handOver handOver  // a marked doRelease: the candidate it names; doOffer: the one offered the key
	epoch    time.Time // doOffer: the bucket's creation time as we know it
	// write: for a doWrite that takes the key, a number drawn for it alone:
	// seen in the key, it says a write of unknown outcome is ours (doubt).
	write uint64
}

// urgentAction reports whether a goes before routine requests.
func (a action) urgentAction() bool {
	return a.renewal || a.urgent || a.kind == doRelease || a.kind == doOffer
}

type actionKind int

const (
	doNothing actionKind = iota
	doRead
	doWrite
	doRelease
	doReadTTL
	doWatch
	// doOffer offers the key, held at expect, to handOver.to, which
	// answers once it took it (or did not): a request over core NATS.
	doOffer
)

// note tells the driver of a change to pass on.
type note struct {
	kind    noteKind
	token   uint64
	until   time.Time
	cause   Cause
	latency time.Duration
	at      time.Time
	err     error    // noteHandOver, noteTakeOver: why it did not happen, or nil; noteFailed: why the campaign ends
	from    KeyState // noteBegan: what the key was when this hold took it
	timings *timings // noteTimings: the timings now in force
	view    *keyView // an observer's noteViewChanged: the view as the step left it
	level   logLevel // noteLog: the line, formatted by the driver's logger if it logs at level
	format  string
	args    []any
}

type noteKind int

const (
	noteBegan noteKind = iota
	noteExtended
	noteLimited
	noteEnded
	noteRenewed
	noteTimings
	noteViewChanged  // the view of the key changed (observers report it)
	noteTTLRead      // a read of the bucket's settings was answered
	noteStopWatch    // stop the watch
	noteRestartWatch // the watch seems to have missed changes: make it again
	noteHandOver     // a hand-over asked for is done (err nil) or refused
	noteTakeOver     // an offer of the key was taken up (err nil) or not
	noteLog          // a line for the driver's log: level, format, args
	noteFailed       // the campaign cannot go on (err): permission refused, or the connection closed for good
)

type logLevel uint8

const (
	levelDebug logLevel = iota
	levelInfo
	levelWarn
	levelError
)

// noteLogger is the machine's Logger: each line goes out as a noteLog.
type noteLogger struct{ m *machine }

func (l noteLogger) Debugf(f string, a ...any) { l.m.logNote(levelDebug, f, a) }
func (l noteLogger) Infof(f string, a ...any)  { l.m.logNote(levelInfo, f, a) }
func (l noteLogger) Warnf(f string, a ...any)  { l.m.logNote(levelWarn, f, a) }
func (l noteLogger) Errorf(f string, a ...any) { l.m.logNote(levelError, f, a) }

func (m *machine) logNote(level logLevel, format string, args []any) {
	m.note(note{kind: noteLog, level: level, format: format, args: args})
}

// output is the machine's answer to one step.
type output struct {
	do    action
	wake  time.Time // step again with inTick then, if nothing happens before
	done  bool      // the machine has finished: the driver ends
	notes []note
}

func newMachine(cfg machineConfig, tm timings) *machine {
	if cfg.random == nil {
		cfg.random = rand.Int64N
	}
	m := &machine{cfg: cfg, tm: tm}
	m.log = noteLogger{m}
	return m
}

// jittered returns d less up to a quarter of it, at random.
func (m *machine) jittered(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d - time.Duration(m.cfg.random(int64(d)/4+1))
}

// standbyWait is how long a standby waits before safety-net campaign n; a
// backoff.Policy's jitter is drawn from cfg.random, so a seed replays.
func (m *machine) standbyWait(n int) time.Duration {
	if p, ok := m.tm.standby.(backoff.Policy); ok {
		const scale = 1 << 53
		return p.DurationAt(n, float64(m.cfg.random(scale))/scale)
	}
	return m.tm.standby.Duration(n)
}

// step takes in what happened (and the stop taken with it), and returns
// what to do.
func (m *machine) step(in input) output {
	var out output
	m.out = &out
	m.learn(in)
	if in.stop != nil {
		stop := *in.stop
		stop.now = in.now
		m.learn(stop)
	}
	out.do, out.wake = m.plan(in.now)
	switch a := &out.do; {
	case a.kind == doWrite && a.renewal:
		m.held().renewalNames = a.term.token != 0
	case a.kind == doWrite:
		a.write = uint64(m.cfg.random(math.MaxInt64)) + 1
	}
	m.out = nil
	if m.cfg.writes {
		return out
	}
	v := m.view // an observer reports the view as the step left it
	for i := range out.notes {
		if out.notes[i].kind == noteViewChanged {
			out.notes[i].view = &v
		}
	}
	return out
}

// learn takes what in tells, before the machine plans what is due.
func (m *machine) learn(in input) {
	if in.err != nil && in.out == outDone {
		m.log.Errorf("election %s: bug: an input with an error came unclassified (%v); please report this", m.cfg.key, in.err)
		in.out = outUnknown
	}
	now := in.now
	switch in.kind {
	case inStart:
		m.epoch, m.unhealthy = in.born, in.unhealthy
		if m.cfg.writes {
			m.nextCampaign = now // read the key at once, whether or not a watch comes up
		}
		m.scheduleTTLCheck(now)
	case inStop:
		m.enter(stopping)
		ho := in.handOver
		if ho.namesAnother(m.cfg.identity) && m.cfg.offers && m.cfg.releaseOnStop && m.handOver == nil {
			m.handOver = &handOver{to: ho.to, instance: ho.instance, within: m.handOverWindow(), orNext: true}
		}
	case inRead:
		m.onRead(in)
	case inWrite:
		if m.phase.holds() {
			m.onRenewal(in)
		} else {
			m.onCampaign(in)
		}
	case inRelease:
		m.onRelease(in)
	case inTTL:
		m.onTTL(in)
	case inWatchMade:
		m.onWatchMade(in)
	case inWatchEntry:
		m.onWatchEntry(in)
	case inWatchInitialDone:
		m.onWatchInitialDone(in)
	case inWatchEnded:
		m.onWatchEnded(in)
	case inAskTTL: // a read sent now serves, or one sent at in.sent if set
		m.askTTL(now, later(cmp.Or(in.sent, now), m.ttlReadAt.Add(time.Nanosecond)))
	case inHandOver:
		m.askHandOver(in.now, in.handOver)
	case inOffer:
		m.onOffer(in)
	case inOffered:
		m.askTakeOver(in)
	case inHealth:
		recovered := m.unhealthy != nil && in.unhealthy == nil
		m.unhealthy = in.unhealthy
		if recovered && !m.phase.holds() {
			m.nextCampaign = earliest(m.nextCampaign, now)
		}
	case inTermLapsed:
		if m.termRuns() {
			m.endTermKeepKey(CauseDeadline)
		}
	}
}

// plan is the one place that says what is due and when: it performs the
// moves due, then returns the action due now, or none and when the next
// thing falls due. Every move undoes its own cause, so they are finite; an
// action is due again only once its outcome was stepped in.
func (m *machine) plan(now time.Time) (action, time.Time) {
	for {
		at, act, move := m.due(now)
		if move != nil && !at.After(now) {
			move(now)
			continue
		}
		if act.kind != doNothing && !at.After(now) {
			if act.timeout == 0 {
				act.timeout = m.requestTimeout(now)
			}
			return act, time.Time{}
		}
		if m.mode == stopping && act.kind == doNothing && move == nil {
			m.enter(finished)
		}
		m.out.done = m.mode == finished
		return action{}, at
	}
}

// due returns the first thing due at now, by priority, or else the
// earliest that will be: an action for the driver, or a move of its own.
func (m *machine) due(now time.Time) (time.Time, action, func(time.Time)) {
	switch m.mode {
	case stopping, finished:
		return m.dueStopping(now)
	case givingUp:
		return now, m.release(now), nil
	case handingOver:
		return m.dueHandingOver(now)
	case taking:
		return m.dueTaking(now)
	}
	d := dueList{now: now, wake: now.Add(time.Hour)}
	if m.phase.holds() {
		m.dueHolder(&d)
	} else {
		m.dueCandidate(&d)
	}
	return d.wake, d.act, d.move
}

// dueList gathers what is due: the first thing considered that is due at
// now wins; else the earliest.
type dueList struct {
	now   time.Time
	wake  time.Time
	act   action
	move  func(time.Time)
	found bool
}

func (d *dueList) consider(at time.Time, act action, move func(time.Time)) {
	switch {
	case d.found:
	case !at.After(d.now):
		d.wake, d.act, d.move, d.found = at, act, move, true
	case at.Before(d.wake):
		d.wake, d.act, d.move = at, act, move
	}
}

// dueStopping: end a take-over and the term, offer the key to the standby
// named on stop or release it (a write in doubt is looked for first; one
// found so is released only marked), then stop watching.
func (m *machine) dueStopping(now time.Time) (time.Time, action, func(time.Time)) {
	if m.taking.rev != 0 {
		return now, action{}, func(time.Time) { m.endTakeOver(errors.New("the candidate is stopping")) }
	}
	if move := m.dueWindDown(now, m.stopCause()); move != nil {
		return now, action{}, move
	}
	keeps := m.phase.holds() && m.phase != doomed && m.fatal == nil
	switch {
	case keeps && m.cfg.releaseOnStop && m.stopReadsSettings():
		return now, action{kind: doReadTTL, since: m.hold.ttlSince}, nil
	case keeps && m.handOver != nil && m.handOver.orNext && m.handOver.declined == nil && m.releaseMarked(now):
		return now, m.offer(now), nil // only when a release could be marked (rule 1)
	case keeps && m.cfg.releaseOnStop && (!m.hold.foundOnStop || m.releaseMarked(now)):
		return now, m.release(now), nil
	case m.doubt != nil && !m.phase.holds() && m.cfg.releaseOnStop && m.fatal == nil:
		return now, action{kind: doRead}, nil // our write in doubt may be in the key: look once
	case m.watch.mode != watchDown:
		return now, action{}, func(time.Time) {
			if keeps && m.cfg.releaseOnStop { // found on stop, its release unmarkable
				m.log.Infof("election %s: leaving %s's write at revision %d to expire: its release could not be marked, and standbys would wait longer after an unmarked one", m.cfg.key, m.cfg.identity, m.hold.rev)
			}
			m.watch.stop()
			m.note(note{kind: noteStopWatch})
		}
	}
	return now, action{}, nil
}

// stopReadsSettings reports whether a holder stopping before it read the
// settings since it took the key reads them first, so that the offer or
// release may carry the mark: once, and only where the mark could then be
// made at once.
func (m *machine) stopReadsSettings() bool {
	h := m.hold
	return !h.ttlRead && h.ttlRetryAt.Equal(h.wonAt) && m.ttlUnusable == nil &&
		(h.from == KeyReleased || h.from != KeyRemoved && m.cfg.grace == 0)
}

// dueWindDown is what comes before a hold is offered or released: the term
// ends, for cause; after a lapsed lease the settings are read again
// (lapseLease). nil: neither.
func (m *machine) dueWindDown(now time.Time, cause Cause) func(time.Time) {
	switch {
	case m.termRuns():
		return func(time.Time) { m.endTerm(cause) }
	case m.leaseLapsedUnread(now):
		return m.lapseLease
	}
	return nil
}

// dueHandingOver: end the term, then offer the key to the candidate named,
// or release it naming the candidate, once rule 1 holds.
func (m *machine) dueHandingOver(now time.Time) (time.Time, action, func(time.Time)) {
	if m.handOver == nil {
		m.log.Errorf("election %s: bug: handing over to no one; please report this", m.cfg.key)
		return now, action{}, func(time.Time) { m.enter(running) }
	}
	if move := m.dueWindDown(now, CauseHandedOver); move != nil {
		return now, action{}, move
	}
	keeps := m.phase.holds() && m.phase != doomed
	switch {
	case keeps && m.releaseMarked(now) && m.cfg.offers && m.handOver.declined == nil:
		return now, m.offer(now), nil
	case keeps && m.releaseMarked(now):
		return now, m.release(now), nil
	case keeps:
		// The release may not name a successor yet (a change since
		// askHandOver): give the hand-over up, and lead again from the
		// next renewal rather than keep the key with nobody leading.
		return now, action{}, func(now time.Time) {
			m.endHandOver(m.handOverTooSoon(now))
			if m.phase == leading {
				m.move(winning)
			}
		}
	}
	return now, action{}, func(time.Time) { m.endHandOver(errors.New("the key was lost before the release")) }
}

// dueTaking: write over the revision offered, unless a write of ours
// holds the key already (a guard: onCampaign ends the take-over).
func (m *machine) dueTaking(now time.Time) (time.Time, action, func(time.Time)) {
	if m.phase.holds() {
		return now, action{}, func(time.Time) { m.endTakeOver(errors.New("a write of ours holds the key already")) }
	}
	return now, action{kind: doWrite, expect: m.taking.rev, urgent: true, term: m.takeMark(m.taking.rev)}, nil
}

// dueHolder: while our write holds the key.
func (m *machine) dueHolder(d *dueList) {
	h := m.held()
	if m.termRuns() { // first: a term ends at its deadline whatever else is due
		d.consider(h.lease, action{}, func(now time.Time) {
			m.log.Warnf("election %s: %s reached its deadline without renewing: standing down", m.cfg.key, m.cfg.identity)
			m.endTermKeepKey(CauseDeadline)
		})
	}
	if m.phase != doomed && h.ttlRead && !h.lease.Equal(h.lapsed) {
		d.consider(h.lease, action{}, m.lapseLease)
	}
	m.dueWatch(d)
	if m.phase == doomed {
		d.consider(h.lease, action{}, func(now time.Time) { m.dropHold(now, false) })
		return
	}
	d.consider(h.nextRenew, action{kind: doWrite, expect: h.rev, renewal: true, term: m.renewalMark()}, nil)
	if !h.ttlRead {
		d.consider(h.ttlRetryAt, action{kind: doReadTTL, since: h.ttlSince}, nil)
		return
	}
	if at, ok := m.termBegins(d.now); ok {
		d.consider(at, action{}, func(time.Time) { m.beginTerm() })
	}
	d.consider(m.nextTTLCheck, action{kind: doReadTTL, since: m.ttlSince}, nil)
}

// dueWatch: a watch silent too long once made is dropped; one down is made again.
func (m *machine) dueWatch(d *dueList) {
	w := &m.watch
	switch w.mode {
	case watchStarting:
		d.consider(w.lastEvent.Add(initTimeout(m.tm)), action{}, func(now time.Time) {
			m.watchFailed(input{now: now, out: outTimeout, err: fmt.Errorf("watch delivered nothing within %v of being made", initTimeout(m.tm))})
		})
	case watchDown:
		d.consider(w.retryAt, action{kind: doWatch}, nil)
	}
}

// dueCandidate: read the key when the view is not fresh, else write to take
// it when it is free; an observer reads where a candidate would campaign.
func (m *machine) dueCandidate(d *dueList) {
	now := d.now
	m.dueWatch(d)
	d.consider(m.nextTTLCheck, action{kind: doReadTTL, since: m.ttlSince}, nil)
	if !m.confirmDue.IsZero() {
		d.consider(now, action{kind: doRead}, nil)
	}
	if at, expect, ok := m.mayTake(now); ok {
		switch {
		case !m.viewFresh(now) && !m.view.known && m.watch.mode == watchStarting:
			// Starting: read only if the watch's initial values are late.
			d.consider(later(at, m.watch.lastEvent.Add(initialWait(m.tm))), action{kind: doRead}, nil)
		case !m.viewFresh(now):
			d.consider(at, action{kind: doRead}, nil)
		case m.takeoverNeedsTTL(now):
			// Read the TTL first, to take the lapsed lease over its revision
			// (lapseAt); once per revision: after a failed read, the broker's
			// expiry frees the key.
			d.consider(at, action{}, func(now time.Time) {
				m.ttlAskedRev = m.view.Revision
				m.askTTL(now, m.view.seenAt.Add(time.Nanosecond))
			})
		default:
			d.consider(at, action{kind: doWrite, expect: expect, term: m.takeMark(expect)}, nil)
		}
	} else if !m.cfg.writes {
		next := m.nextCampaign
		if m.watch.mode == watchDown { // without a watch, an observer also reads every half TTL
			next = earliest(next, m.view.readAt.Add(m.tm.ttl/2))
		}
		if !next.IsZero() {
			d.consider(next, action{kind: doRead}, nil)
		}
	}
}

// takeMark is what a write taking the key over expect says of its term:
// that it begins as the write lands, where rule 1 lets it begin at once
// (released or offered to us; with Grace 0, absent with nothing to judge
// after the write, or a lapsed lease written over), or that it waits.
// Observers report a term only once it has begun, by these marks.
func (m *machine) takeMark(expect uint64) termMark {
	v := m.view
	switch {
	case m.taking.rev != 0 && expect == m.taking.rev, v.State == KeyReleased,
		m.cfg.grace == 0 && v.State == KeyAbsent && m.gone == nil,
		m.cfg.grace == 0 && v.State == KeyHeld && expect != 0 && expect == v.Revision:
		return termMark{begins: true}
	}
	return termMark{waits: true}
}

// renewalMark is what a renewal says: the running term's token, or that
// the term waits.
func (m *machine) renewalMark() termMark {
	if m.termRuns() {
		return termMark{token: m.term}
	}
	return termMark{waits: true}
}

// earliest is the earlier of two instants, a zero one counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (m *machine) stopCause() Cause {
	switch {
	case m.fatalOut == outDenied:
		return CauseDenied
	case m.fatal != nil:
		return CauseClosed
	}
	return CauseReleased
}

func (m *machine) note(n note) { m.out.notes = append(m.out.notes, n) }

// enter changes the mode; a change modeMoves does not allow is a bug.
func (m *machine) enter(next mode) {
	if m.mode == next {
		return
	}
	if !m.mode.canEnter(next) {
		m.log.Errorf("election %s: bug: a campaign cannot go from %s to %s; please report this", m.cfg.key, m.mode, next)
	}
	m.mode = next
}

func (m *machine) stopping() bool { return m.mode >= stopping }

// move changes the phase; a move that phaseMoves does not allow is a bug.
func (m *machine) move(next phase) {
	if !m.phase.canMove(next) {
		m.log.Errorf("election %s: bug: a campaign cannot move from %s to %s; please report this", m.cfg.key, m.phase, next)
	}
	m.phase = next
	if !next.holds() {
		m.hold = nil // the hold lives while the phase holds the key
	}
}

// failed notes an outcome that ends the campaign (outcome.fatal). Once
// Stop was called (the stop taken with in counts) it ends the stop but is
// no failure for Start to return: Stop, then closing the connection, is a
// common shutdown.
func (m *machine) failed(in input) bool {
	if !in.out.fatal() {
		return false
	}
	switch {
	case m.fatal == nil && (m.stopping() || in.stop != nil):
		m.log.Warnf("election %s: stopping: %v: making no further request (a key left in our name expires)", m.cfg.key, in.err)
		m.fatal, m.fatalOut = in.err, in.out
	case m.fatal == nil:
		ending := "ending the campaign"
		if !m.cfg.writes {
			ending = "no longer observing it"
		}
		if in.out == outDenied {
			m.log.Errorf("election %s: %s: %v", m.cfg.key, ending, in.err)
		} else {
			m.log.Errorf("election %s: the connection to the broker was closed: %s", m.cfg.key, ending)
		}
		m.fatal, m.fatalOut = in.err, in.out
		m.note(note{kind: noteFailed, err: in.err})
	}
	m.enter(stopping)
	return true
}

// requestTimeout bounds a request by the request timeout and the lease.
func (m *machine) requestTimeout(now time.Time) time.Duration {
	timeout := m.tm.request
	if m.phase.holds() && m.held().lease.After(now) {
		timeout = min(timeout, m.held().lease.Sub(now))
	}
	return timeout
}

// viewFresh reports whether a campaign may trust the view: kept current by
// a working watch, or read just now.
func (m *machine) viewFresh(now time.Time) bool {
	v := m.view
	return v.known && (m.watch.working() && v.confirmed || now.Sub(v.readAt) < m.tm.retry)
}

// takeoverNeedsTTL reports whether a held key's lease lapsed by the TTL we
// know, which was not read since we learned of the revision.
func (m *machine) takeoverNeedsTTL(now time.Time) bool {
	v := m.view
	return v.State == KeyHeld && v.Revision != 0 && v.Revision != m.ttlAskedRev && v.ttl > 0 &&
		!m.ttlReadAt.After(v.seenAt) && !now.Before(v.seenAt.Add(v.ttl))
}

// ttlEvery is how long to wait between reads of the bucket's TTL: half a
// TTL for a holder or while it is unusable (so a holder's TTL is at most
// 3/4 of a TTL old; see scheduleTTLCheck); rarely for a standby, whose TTL
// only steers safety-net campaigns; a few TTLs for an observer.
func (m *machine) ttlEvery() time.Duration {
	switch {
	case m.phase.holds() || m.ttlUnusable != nil:
		return m.tm.ttl / 2
	case !m.cfg.writes:
		return min(max(3*m.tm.ttl, 3*time.Second), 3*time.Minute)
	}
	return max(ttlChecksEvery*m.tm.ttl, standbyTTLCheck)
}

// A standby reads the TTL every ttlChecksEvery TTLs, at least
// standbyTTLCheck apart: a stream info request costs about a synced write.
const (
	ttlChecksEvery  = 4
	standbyTTLCheck = time.Minute
)

// staleAfter is how long past its predicted expiry a held key may survive
// before a standby suspects its watch: well beyond the broker's lateness.
const staleAfter = time.Second

func (m *machine) onRead(in input) {
	done := in.now
	m.confirmDue = time.Time{}
	if m.stopping() {
		defer func() { m.doubt = nil }() // a stopping candidate looks once
	}
	v := keyView{known: true, Entry: Entry{Key: m.cfg.key}, seenAt: done, readAt: done} // no message
	if in.err != nil {
		if m.failed(in) {
			return
		}
		if in.out.bucketGone(m.cfg.writes) {
			m.observe(done, v) // no bucket, no holder: the key is gone, as by a removal
		}
		m.tries++
		m.nextCampaign = done.Add(m.standbyWait(m.tries))
		m.log.Debugf("election %s: cannot read the key (try %d): %v", m.cfg.key, m.tries, in.err)
		return
	}
	if in.entry != nil {
		v = viewOf(*in.entry, done, m.tm.ttl, false) // read at done too
	}
	m.log.Debugf("election %s: read the key: %s", m.cfg.key, v.describe())
	before := m.view
	fresh := m.observe(done, v)
	m.confirmFrom = time.Time{}
	if !fresh {
		// A stale replica's answer, or a bucket made again: read again
		// after a retry interval (not the growing backoff, which would
		// delay a takeover), and the bucket's creation time, which tells
		// them apart, at most once per TTL.
		m.nextCampaign = later(m.nextCampaign, done.Add(m.jittered(m.tm.retry)))
		if done.Sub(m.ttlReadAt) >= m.tm.ttl && done.Before(m.nextTTLCheck) {
			m.askTTL(done, done)
		}
		return
	}
	switch {
	case m.cfg.writes:
	case m.view.State == KeyHeld && before.known && before.Revision == m.view.Revision:
		// Past its predicted expiry: the broker is late, or the TTL rose.
		m.overdue(done)
	case before.known && before.State == m.view.State && before.Revision == m.view.Revision:
		m.schedule(done) // nothing new
	}
}

// overdue spaces out an observer's checks of a write that outlived its
// predicted expiry, and reads the TTL, which may have been raised.
func (m *machine) overdue(now time.Time) {
	m.tries++
	m.nextCampaign = later(now.Add(max(m.standbyWait(m.tries-1), minCheckInterval)), m.checkAt(now))
	if m.tries == 1 {
		m.askTTL(now, now)
	}
}

// checkAt is when an observer reads the held key to see whether it
// expired: a little after its predicted expiry by the TTL now (the broker
// applies a new TTL to stored messages, and expires late), and no sooner
// than minCheckInterval from now.
func (m *machine) checkAt(now time.Time) time.Time {
	v := m.view
	return later(v.expiresBy.Add(m.tm.ttl-v.ttl+expiryCheckDelay), now.Add(minCheckInterval))
}

func (m *machine) onCampaign(in input) {
	sent, done, err := in.sent, in.now, in.err
	if m.taking.rev != 0 {
		defer m.endTakeOver(err) // after won, which tells the write taken up
	}
	switch {
	case err == nil:
		m.won(sent, done, in.rev, in.expect)
		return
	case m.failed(in):
		return
	}
	m.tries++
	m.nextCampaign = done.Add(m.standbyWait(m.tries))
	switch {
	case in.out == outMismatch:
		m.lost(done, in.conflict, err)
	case in.out == outNotSent: // the process's requests are backed up: routine
		m.log.Debugf("election %s: campaign failed: %v", m.cfg.key, err)
	case !in.out.mayHaveApplied():
		m.log.Warnf("election %s: campaign failed: %v", m.cfg.key, err)
	case in.write == 0: // a write that says nothing of itself
		m.log.Warnf("election %s: campaign failed with an unknown outcome (%v): if it was stored, the key holds %s's name and is left to expire", m.cfg.key, err, m.cfg.identity)
	default:
		m.doubt = &doubtfulWrite{write: in.write, sent: sent, expect: in.expect, view: m.view, gone: m.gone,
			epoch: m.epoch, remade: m.remadeSeen}
		m.log.Warnf("election %s: campaign failed with an unknown outcome (%v): if it was stored, %s takes the key up as it sees the write in it", m.cfg.key, err, m.cfg.identity)
	}
}

// lost takes in a campaign write that found another revision: conflict,
// if the broker named it.
func (m *machine) lost(done time.Time, conflict uint64, err error) {
	m.notPastLapse(done)
	if conflict > m.seenRev {
		// A message we never saw, written at most now: its writer may count
		// on it for a TTL from now; should the key vanish, that is a removal.
		m.seenRev, m.seenWritten = conflict, time.Time{}
		m.displaced = kept(m.view)
		m.view = keyView{known: true, Entry: Entry{Key: m.cfg.key, State: KeyHeld, Revision: conflict},
			seenAt: done, expiresBy: done.Add(m.tm.ttl), ttl: m.tm.ttl}
		m.note(note{kind: noteViewChanged, at: done})
	}
	// Read the key before the next try, watch or not: a view that missed a
	// renewal predicts the expiry early, and a backoff would overshoot it.
	m.view.readAt, m.view.confirmed = time.Time{}, false
	m.log.Debugf("election %s: campaign lost: %v", m.cfg.key, err)
	if m.view.State == KeyHeld && m.tries == 1 {
		m.askTTL(done, done) // the leader outlived our prediction: perhaps the TTL was raised
	}
	if m.watch.working() && m.viewLooksStale(done) {
		m.log.Debugf("election %s: view of the key looks stale, restarting the watch", m.cfg.key)
		m.restartWatch(done)
	}
}

// notPastLapse brings the next campaign forward to lapseAt if a backoff
// would overshoot it.
func (m *machine) notPastLapse(now time.Time) {
	if at, ok := m.lapseAt(); ok && !m.nextCampaign.IsZero() && at.After(now) && at.Before(m.nextCampaign) {
		m.nextCampaign = at
	}
}

// viewLooksStale reports whether failed campaigns suggest the watch missed
// something: taking a free key failed three times, or a held one outlived
// its predicted expiry by staleAfter.
func (m *machine) viewLooksStale(now time.Time) bool {
	if m.view.State == KeyHeld {
		return now.Sub(m.view.expiresBy) >= staleAfter
	}
	return m.tries >= 3
}

// observe adopts a newer view of the key, reacts if it undoes our hold, and
// schedules the next campaign. It returns false when it dropped v as old.
func (m *machine) observe(now time.Time, v keyView) bool {
	known := position{epoch: m.epoch, revision: m.seenRev, written: m.seenWritten}
	if m.view.Revision == m.seenRev {
		known.written = later(known.written, m.view.Written)
	}
	if v.Revision != 0 && v.Revision < m.seenRev {
		if !isNews(known, position{epoch: m.epoch, revision: v.Revision, written: v.Written}) {
			return false // such as a stale replica's answer
		}
		m.log.Warnf("election %s: the key's revision went back from %d to %d with a later write: the bucket was recreated; following its new revisions", m.cfg.key, m.seenRev, v.Revision)
		m.seenRev, m.seenWritten = 0, time.Time{}
		m.remadeSeen = now
		m.askTTL(now, now) // learn the new bucket's creation time (see noteBucketBorn)
	}
	stillGone := m.view.State == KeyRemoved && m.view.Revision == 0 && v.State == KeyAbsent // an inferred removal stands until the key is taken
	if m.view.known && (stillGone || v.State == m.view.State && v.Revision == m.view.Revision && sameMessage(m.view.Entry, v.Entry)) {
		// Nothing new: keep what we learned first, and that it is current.
		m.view.readAt = later(m.view.readAt, v.readAt)
		m.view.confirmed = m.view.confirmed || v.confirmed
		return true
	}
	switch {
	case v.Revision > m.seenRev && v.Written.IsZero():
		m.seenRev, m.seenWritten = v.Revision, time.Time{}
	case v.Revision > m.seenRev:
		m.seenRev, m.seenWritten = v.Revision, later(m.seenWritten, v.Written)
	case v.Revision == m.seenRev:
		m.seenWritten = later(m.seenWritten, v.Written)
	}
	// A read confirming what the watch began with is judged from then.
	if !m.phase.holds() && m.vanishedUnderLease(earliest(now, m.confirmFrom), v) {
		m.log.Warnf("election %s: the key %s held vanished without a marker %v before it could expire (the bucket deleted and made again, or purged): taking it as a forced removal, so a term begun on it waits a TTL, until %s has surely stood down", m.cfg.key, m.view.Leader, m.view.expiresBy.Sub(now).Round(time.Millisecond), m.view.Leader)
		v.State, v.Operation = KeyRemoved, opPurge // gone without a marker, as by a purge
	}
	prev, named := m.view, m.view
	if m.displaced != nil && (prev.State == KeyHeld && prev.Leader == "" && prev.Revision == v.Revision ||
		prev.State == KeyRemoved && prev.Revision == 0) {
		// The view was a bare revision a failed campaign ran into, and v is
		// that message, or only told that the bucket was made again: a
		// removal removed what we knew before (perhaps our write).
		named = *m.displaced
	}
	m.displaced = nil
	m.view = v
	switch {
	case prev.State == KeyHeld && v.State == KeyAbsent:
		m.gone = kept(prev) // judged expired; a TTL read later may say otherwise (vanishedByRaisedTTL)
	case v.State != KeyAbsent:
		m.gone = nil
	}
	m.note(note{kind: noteViewChanged, at: now})
	if m.phase.holds() {
		switch {
		case v.State == KeyAbsent, v.Revision <= m.held().rev:
			return true // ours, or a restarted watch finding it gone: the next renewal decides
		case m.held().inDoubt && v.State == KeyHeld && m.namesUs(v.Entry):
			return true // perhaps our own write landing late
		}
		m.log.Warnf("election %s: key changed under %s (revision %d, %s): standing down", m.cfg.key, m.cfg.identity, v.Revision, v.describe())
		m.dropHold(now, true)
		return true
	}
	if m.adoptDoubt(now, v) {
		return true
	}
	if v.State == KeyRemoved && named.State == KeyHeld && m.namesUs(named.Entry) && m.cfg.writes {
		// A removal of a write in our name we did not hold: meant for us too.
		m.sitOut = sitOut{until: now.Add(m.tm.ttl), rev: v.Revision}
	}
	m.schedule(now)
	return true
}

// namesUs reports whether e was written in our name: our identity, and our
// instance where both say one (a copy of our identity is another candidate).
func (m *machine) namesUs(e Entry) bool {
	return e.Leader == m.cfg.identity && (e.Instance == "" || m.cfg.instance == "" || e.Instance == m.cfg.instance)
}

// adoptDoubt reports whether it took the key up, v (the key's latest
// message) being our write in doubt, known by the number only it carries:
// as if the answer came now, the lease counted from when it was sent. A
// later message, the end of its lease, or a change of the bucket or the
// TTL ends the doubt.
func (m *machine) adoptDoubt(now time.Time, v keyView) bool {
	d := m.doubt
	switch {
	case d == nil:
		return false
	case !now.Before(leaseEnd(d.sent, m.tm)) || !m.epoch.Equal(d.epoch) || !m.remadeSeen.Equal(d.remade):
		m.doubt = nil
		return false
	case v.State != KeyHeld || v.write != d.write || v.Leader != m.cfg.identity:
		if v.Revision > d.expect {
			m.doubt = nil
		}
		return false
	case m.phase.holds() || m.taking.rev != 0 || (m.mode != running && m.mode != stopping):
		return false
	}
	m.doubt = nil
	m.view, m.gone = d.view, d.gone // what won judges the write by
	m.won(d.sent, now, v.Revision, d.expect)
	m.hold.foundOnStop = m.stopping()
	m.log.Infof("election %s: %s's campaign write of unknown outcome is in the key at revision %d: taking the key up", m.cfg.key, m.cfg.identity, v.Revision)
	return true
}

// vanishedUnderLease reports whether v, the key absent, cannot be an
// expiry: the view holds a leader, gone before the broker could expire it
// (expiredFrom). A removal without a marker, under a live lease.
func (m *machine) vanishedUnderLease(now time.Time, v keyView) bool {
	old := m.view
	return v.State == KeyAbsent && old.known && old.State == KeyHeld &&
		now.Before(m.expiredFrom(old, m.tm.ttl))
}

// expiresAt is the earliest the broker may expire the held key v shows
// when the bucket's TTL is ttl: by the higher of ttl and v.ttl (a raised
// TTL applies to stored messages), but no later than the message's own
// TTL, which its writer counted by (rounded up to whole seconds).
func expiresAt(v keyView, ttl time.Duration) time.Time {
	if ownTTLFirst(v, ttl) {
		return v.expiresBy.Add(v.TTL - v.ttl)
	}
	return v.expiresBy.Add(max(0, ttl-v.ttl))
}

// ownTTLFirst reports whether v's message expires by its own TTL before
// the bucket's (the higher of ttl and v.ttl).
func ownTTLFirst(v keyView, ttl time.Duration) bool {
	return v.TTL > 0 && v.TTL < max(ttl, v.ttl)
}

// expiredFrom is the earliest the held key v shows, found gone, counts as
// expired rather than removed: expiresAt, less the margin that keeps an
// expiry seen a little early from counting (scaled down by the message's
// own TTL, as its writer's margin was). A message read, not delivered
// live, has its expiry estimated by our clock (viewOf), early by as much as
// it runs ahead: that error takes the margin, lest a purge pass for an
// expiry while its holder still leads.
func (m *machine) expiredFrom(v keyView, ttl time.Duration) time.Time {
	if !v.live {
		return expiresAt(v, ttl)
	}
	margin := m.tm.margin
	if ownTTLFirst(v, ttl) && m.tm.ttl > 0 {
		margin = min(margin, time.Duration(float64(margin)*float64(v.TTL)/float64(m.tm.ttl)))
	}
	return expiresAt(v, ttl).Add(-margin)
}

// vanishedByRaisedTTL reports whether the held key we took as expired
// could not have expired by the higher TTL read since, which its holder
// may have used: it vanished under a live lease.
func (m *machine) vanishedByRaisedTTL(ttl time.Duration) bool {
	h := m.held()
	if h.from != KeyAbsent || h.held == nil || ttl <= max(h.held.ttl, h.fromTTL) {
		return false
	}
	return h.goneAt.Before(m.expiredFrom(*h.held, ttl))
}

// sameMessage reports whether two entries of one revision are the same
// message: after a bucket is made again, one revision can name two.
func sameMessage(a, b Entry) bool {
	return a.Leader == b.Leader && (a.Written.IsZero() || b.Written.IsZero() || a.Written.Equal(b.Written))
}

// noteBucketBorn takes in when the bucket's stream was created (zero:
// unknown). Another time means the bucket was made again: the key is taken
// as removed now, as an old leader may count on its lease for up to a TTL.
func (m *machine) noteBucketBorn(now, born time.Time) {
	if born.IsZero() {
		return
	}
	known := m.epoch
	m.epoch = born
	if known.IsZero() || born.Equal(known) {
		return
	}
	followsNew := !m.remadeSeen.IsZero()
	m.remadeSeen = time.Time{}
	if !m.cfg.writes { // an observer reads the new bucket afresh, unless it follows it
		if !followsNew {
			m.log.Infof("election %s: the bucket was deleted and made again: reading it afresh", m.cfg.key)
			m.seenRev, m.seenWritten = 0, time.Time{}
			m.view.known, m.nextCampaign = false, now
			m.restartWatch(now)
		}
		return
	}
	m.log.Warnf("election %s: the bucket was deleted and made again (created %s, before %s): following its new revisions; a leader in the new bucket is awaited or the key is taken as removed", m.cfg.key, born.Format(time.RFC3339Nano), known.Format(time.RFC3339Nano))
	m.seenRev, m.seenWritten = 0, time.Time{}
	// The view's revision is the old bucket's, which in the new one may be
	// another's live write. Ours is kept aside (displaced): it may be there.
	ours := m.view
	m.view = keyView{known: true, Entry: Entry{Key: m.cfg.key, State: KeyRemoved, Operation: opPurge}, seenAt: now, ttl: m.tm.ttl}
	m.displaced = nil
	if m.phase.holds() {
		// No term may rest on our write, in either bucket (a renewal in the
		// new one may land on another's revision): give the hold up. The
		// sit-out covers our renewal in doubt the old view may show.
		m.log.Warnf("election %s: %s gives up its hold of revision %d: the bucket it was written to is gone", m.cfg.key, m.cfg.identity, m.held().rev)
		rev := m.held().rev
		if ours.State == KeyHeld && m.namesUs(ours.Entry) {
			rev = max(rev, ours.Revision)
		}
		m.dropHold(now, true)
		m.sitOut.rev = max(m.sitOut.rev, rev)
		m.sitOut.past = true
		m.displaced = kept(ours)
	}
	m.note(note{kind: noteViewChanged, at: now})
	m.schedule(now)
	m.restartWatch(now)
}

// schedule sets the next campaign from the view: at once when the key is
// free, at the predicted expiry while held (for an observer, checkAt).
func (m *machine) schedule(now time.Time) {
	m.tries = 0
	switch {
	case !m.view.known:
		m.nextCampaign = now // read it
	case m.view.State == KeyHeld:
		if m.view.Revision > m.sitOut.rev {
			m.sitOut = sitOut{} // a new leader: nothing left to sit out
		}
		m.nextCampaign = expiresAt(m.view, m.view.ttl)
		if !m.cfg.writes {
			m.nextCampaign = m.checkAt(now)
		}
	case !m.cfg.writes:
		m.nextCampaign = time.Time{} // nobody leads: nothing to check
	default:
		m.nextCampaign = now
		m.sitOutHandOver()
	}
}

// won records a successful campaign write; the term begins by rule 3.
func (m *machine) won(sent, done time.Time, rev, expect uint64) {
	from, fromSeenAt := m.view.State, m.view.seenAt
	saidWaits := m.takeMark(expect).waits
	if m.taking.rev != 0 && expect == m.taking.rev {
		from, fromSeenAt = KeyReleased, done // offered only when a release could be marked
	} else if from == KeyHeld {
		// A lapsed lease, or a key found gone: expired, unless gone too soon.
		from = KeyAbsent
		if expect == 0 && sent.Before(m.expiredFrom(m.view, m.tm.ttl)) {
			// From done: our write may have waited at the transport's gate.
			m.log.Warnf("election %s: the key %s held was gone before it could expire: taking it as a forced removal", m.cfg.key, m.view.Leader)
			from, fromSeenAt = KeyRemoved, done
		}
	}
	m.move(winning)
	h := &hold{
		rev: rev, token: rev, sent: sent, wonAt: done, ttlRetryAt: done, ttlSince: done,
		lease: leaseEnd(sent, m.tm), from: from, fromSeenAt: fromSeenAt, fromTTL: m.tm.ttl,
		nextRenew: sent.Add(m.tm.renew), saidWaits: saidWaits,
	}
	switch {
	case m.view.State == KeyHeld && expect == 0:
		h.held, h.goneAt = kept(m.view), sent
	case m.view.State == KeyAbsent && m.gone != nil:
		// Found gone before we took it: judged too by the TTL read next.
		h.held, h.goneAt = m.gone, m.view.seenAt
	}
	m.hold = h
	m.tries, m.nextCampaign, m.sitOut, m.doubt = 0, time.Time{}, sitOut{}, nil
	m.seenRev = max(m.seenRev, rev)
	m.seenWritten = time.Time{} // our write's broker time is unknown
	m.view = keyView{known: true, Entry: Entry{Key: m.cfg.key, State: KeyHeld, Leader: m.cfg.identity, Revision: rev},
		seenAt: done, readAt: done, expiresBy: sent.Add(m.tm.ttl), confirmed: true, ttl: m.tm.ttl}
	m.note(note{kind: noteRenewed, at: done, latency: -1})
	m.log.Debugf("election %s: %s took the key at revision %d (it was %s)", m.cfg.key, m.cfg.identity, rev, from)
}

// onRenewal takes in the outcome of a renewal over the hold's revision.
func (m *machine) onRenewal(in input) {
	now, done, err := in.sent, in.now, in.err
	h := m.held()
	switch {
	case err == nil:
		h.rev, h.inDoubt, h.tries = in.rev, false, 0
		h.namesTerm = h.renewalNames
		h.sent = now
		oldLease := h.lease
		h.lease = leaseEnd(now, m.tm)
		h.nextRenew = now.Add(m.tm.renew)
		h.saidWaits = h.saidWaits || !m.termRuns()

		m.seenRev = max(m.seenRev, in.rev)
		m.seenWritten = time.Time{}
		m.note(note{kind: noteRenewed, at: done, latency: done.Sub(now)})
		m.view = keyView{known: true, Entry: Entry{Key: m.cfg.key, State: KeyHeld, Leader: m.cfg.identity, Revision: in.rev},
			seenAt: done, readAt: done, expiresBy: now.Add(m.tm.ttl), confirmed: true, ttl: m.tm.ttl}
		if m.termRuns() {
			if !done.Before(oldLease) {
				// The deadline passed in flight; the key is still ours.
				m.endTerm(CauseDeadline)
				m.move(winning)
			} else {
				m.note(note{kind: noteExtended, until: h.lease})
			}
		}
	case in.out == outMismatch && h.inDoubt:
		// Our earlier renewal in doubt, or a copy of our identity after a
		// removal: neither takes over before our lease ends. Lead until then.
		m.move(doomed)
		m.log.Warnf("election %s: renewal of revision %d refused after an earlier renewal's outcome was unknown; leading until the deadline in %v, then standing down", m.cfg.key, h.rev, h.lease.Sub(done).Round(time.Millisecond))
	case in.out == outMismatch:
		deposed := done.Before(h.lease)
		cause := CauseExpired
		if deposed {
			cause = CauseDeposed
		}
		m.log.Warnf("election %s: renewal of revision %d refused (%s): standing down", m.cfg.key, h.rev, cause)
		m.dropHold(done, deposed)
	case m.failed(in):
	default:
		h.inDoubt = h.inDoubt || in.out.mayHaveApplied()
		h.tries++
		delay := m.tm.retry
		if !done.Before(h.lease) {
			delay = min(m.tm.retry<<min(h.tries, 6), m.tm.ttl/2)
			// The lease lapsed: read the settings again (see lapseLease).
			h.ttlRead, h.ttlRetryAt, h.ttlSince = false, done, done
		}
		h.nextRenew = done.Add(m.jittered(delay))
		m.log.Warnf("election %s: renewal failed (try %d, deadline in %v): %v", m.cfg.key, h.tries, h.lease.Sub(done).Round(time.Millisecond), err)
	}
}

// dropHold ends the term, if any, and becomes a candidate; a deposed one
// sits out the next takeover.
func (m *machine) dropHold(now time.Time, deposed bool) {
	cause := CauseDeadline
	if deposed {
		cause = CauseDeposed
	}
	m.endTerm(cause)
	rev := m.held().rev
	m.move(candidate)
	if deposed {
		m.sitOut = sitOut{until: now.Add(m.tm.ttl), rev: rev}
	}
	m.view.readAt = time.Time{} // read again before campaigning without a watch
	m.schedule(now)
}

func (m *machine) beginTerm() {
	m.move(leading)
	h := m.held()
	token := h.token
	if token == 0 {
		token = h.rev // a later term of this hold
	}
	h.token = 0
	m.term = token
	if h.saidWaits {
		h.nextRenew, h.saidWaits = h.wonAt, false // due at once: observers learn the term began
	}
	m.log.Infof("election %s: %s became leader, token %d", m.cfg.key, m.cfg.identity, token)
	m.note(note{kind: noteBegan, token: token, until: h.lease, from: h.from})
}

func (m *machine) endTerm(cause Cause) {
	if !m.termRuns() {
		return
	}
	m.note(note{kind: noteEnded, cause: cause, token: m.term})
	m.term = 0
}

// endTermKeepKey ends the term; the key may still be ours, and a renewal
// can begin a new term.
func (m *machine) endTermKeepKey(cause Cause) {
	m.endTerm(cause)
	if m.phase == leading {
		m.move(winning)
	}
}

func (m *machine) termRuns() bool { return m.term != 0 }

// leaseLapsedUnread reports whether the hold's lease has lapsed by now and
// the settings were not read since (lapseLease).
func (m *machine) leaseLapsedUnread(now time.Time) bool {
	h := m.held()
	return m.phase.holds() && m.phase != doomed && h.ttlRead && !now.Before(h.lease) && !h.lease.Equal(h.lapsed)
}

// lapseLease takes in that the hold's lease lapsed: the settings are read
// again before a term, offer or marked release rests on the hold, as the
// bucket may have been made again meanwhile (noteBucketBorn).
func (m *machine) lapseLease(now time.Time) {
	h := m.held()
	h.ttlRead, h.ttlRetryAt, h.ttlSince, h.lapsed = false, now, now, h.lease
}

// releaseMarked reports whether our release may carry the mark, which lets
// the next candidate lead at once: only once rule 1 holds.
func (m *machine) releaseMarked(now time.Time) bool {
	at, ok := m.earlierHoldersGone()
	return ok && !now.Before(at)
}

// release is the release of our hold: marked when rule 1 allows, and then
// naming the candidate of a hand-over under way (not a stop's offer).
func (m *machine) release(now time.Time) action {
	a := action{kind: doRelease, expect: m.held().rev, marked: m.releaseMarked(now)}
	if ho := m.handOver; ho != nil && !ho.orNext && a.marked {
		a.handOver = ho.releaseNames()
	}
	return a
}

// onRelease takes in our release's outcome: released or not, the hold is
// given up. After a hand-over's we sit its window out, and read the key: a
// release of unknown outcome may not have been stored.
func (m *machine) onRelease(in input) {
	done, rev, ho := in.now, m.held().rev, m.handOver
	named := ho != nil && !ho.orNext // a hand-over's, not a stop's
	switch {
	case named:
		m.move(candidate)
		if ho.releaseNames().to != "" {
			m.sitOut = sitOut{until: done.Add(ho.within), rev: rev}
		}
		m.view.readAt, m.view.confirmed = time.Time{}, false
		m.nextCampaign = done
	case m.stopping():
		m.move(candidate)
	case m.mode == givingUp:
		m.enter(running)
		m.move(candidate)
		m.nextCampaign = time.Time{}
	}
	var err error // why the hand-over failed
	// moved: the key moved on after an offer was not taken up, most likely
	// by the candidate's write.
	switch moved := in.err != nil && ho != nil && ho.declined != nil && in.out == outMismatch; {
	case moved && ho.declinedOut.unanswered():
		m.log.Infof("election %s: revision %d moved on before the release: %s may have taken up the offer", m.cfg.key, rev, ho.who())
		err = fmt.Errorf("%s did not answer the offer of the key (%v), and the key moved on before the release (it may have taken the key; see who leads): %w", ho.to, ho.declined, in.err)
	case moved && named:
		m.log.Warnf("election %s: %s refused the offer of revision %d (%v), and the key moved on before the release: %v", m.cfg.key, ho.who(), rev, ho.declined, in.err)
		err = fmt.Errorf("%s refused the offer of the key (%v), and the key moved on before the release: %w", ho.to, ho.declined, in.err)
	case in.err != nil && named:
		m.log.Warnf("election %s: could not release revision %d to hand over to %s: %v", m.cfg.key, rev, ho.who(), in.err)
		err = fmt.Errorf("releasing the key: %w", in.err)
	case in.err != nil:
		m.log.Warnf("election %s: could not release revision %d, the key expires within %v: %v", m.cfg.key, rev, m.tm.ttl, in.err)
	case named:
		m.log.Infof("election %s: released revision %d, handed over to %s", m.cfg.key, rev, ho.who())
	case in.marked:
		m.log.Debugf("election %s: released revision %d", m.cfg.key, rev)
	default:
		m.log.Debugf("election %s: removed revision %d without a release mark", m.cfg.key, rev)
	}
	if named {
		m.endHandOver(err)
	}
}

// askHandOver takes in a request to hand the election over: only a leader
// whose term runs may (see dueHandingOver).
func (m *machine) askHandOver(now time.Time, ho handOver) {
	switch {
	case !m.cfg.writes || m.stopping() || !m.termRuns() || m.phase != leading:
		m.note(note{kind: noteHandOver, err: ErrNotLeader})
	case m.handOver != nil:
		m.note(note{kind: noteHandOver, err: fmt.Errorf("%w: a hand-over to %s is under way", ErrNotLeader, m.handOver.to)})
	case !m.releaseMarked(now):
		m.note(note{kind: noteHandOver, err: m.handOverTooSoon(now)})
	default:
		if ho.within <= 0 {
			ho.within = m.handOverWindow()
		}
		m.handOver = &ho
		m.enter(handingOver)
		m.log.Infof("election %s: %s handing over to %s", m.cfg.key, m.self(), ho.who())
	}
}

// releaseNames is whom a hand-over's release names: the candidate, unless
// it refused the offer, when naming it would leave the election without a
// leader for its window.
func (ho handOver) releaseNames() handOver {
	if ho.declined != nil && !ho.declinedOut.unanswered() {
		return handOver{}
	}
	return ho
}

// handOverWindow is how long the others leave the key to the candidate a
// hand-over names, by default.
func (m *machine) handOverWindow() time.Duration {
	return clamp(m.tm.ttl/4, 500*time.Millisecond, 5*time.Second)
}

// handOverTooSoon refuses a hand-over while our release may not be marked.
func (m *machine) handOverTooSoon(now time.Time) error {
	if at, ok := m.earlierHoldersGone(); ok {
		return fmt.Errorf("%w: a leader deposed before this term may count on the key for %v more; ask again then", ErrHandOverTooSoon, at.Sub(now).Round(time.Millisecond))
	}
	return fmt.Errorf("%w: the bucket's TTL is being read again; ask again in a moment", ErrHandOverTooSoon)
}

func (m *machine) endHandOver(err error) {
	m.handOver = nil
	if m.mode == handingOver {
		m.enter(running)
	}
	m.note(note{kind: noteHandOver, err: err})
}

// offer is a holder's offer of the key to the candidate m.handOver names,
// to take up within the request's timeout, its window and maxOfferTimeout
// (the release that may follow is waited for).
func (m *machine) offer(now time.Time) action {
	ho := *m.handOver
	timeout := max(min(ho.within, maxOfferTimeout, m.requestTimeout(now)), time.Millisecond)
	return action{kind: doOffer, expect: m.held().rev, handOver: ho, epoch: m.epoch, timeout: timeout}
}

// maxOfferTimeout bounds the wait for an offer of the key to be taken up,
// well inside RequestHandOver's default deadline and the CLI's --timeout.
const maxOfferTimeout = time.Second

// onOffer takes in the answer to our offer of the key. Taken up, the key
// is the candidate's; a hand-over sits its window out. Otherwise the key
// is released, which fails if an answer was lost after the write landed.
func (m *machine) onOffer(in input) {
	done := in.now
	ho, rev := m.handOver, m.held().rev
	if ho == nil {
		return
	}
	if ho.orNext && in.handOver.to != "" {
		ho.to, ho.instance = in.handOver.to, in.handOver.instance
	}
	if in.err != nil {
		m.log.Infof("election %s: %s did not take up the offer of revision %d (%v): releasing the key", m.cfg.key, ho.who(), rev, in.err)
		ho.declined, ho.declinedOut = in.err, in.out
		return
	}
	m.move(candidate)
	if ho.orNext {
		m.log.Infof("election %s: %s took the key over revision %d: handed over on stop", m.cfg.key, ho.who(), rev)
		return
	}
	m.sitOut = sitOut{until: done.Add(ho.within), rev: rev}
	m.view.readAt, m.view.confirmed = time.Time{}, false
	m.nextCampaign = done
	m.log.Infof("election %s: %s took the key over revision %d: handed over", m.cfg.key, ho.who(), rev)
	m.endHandOver(nil)
}

// askTakeOver takes in a leader's offer of the key over its revision,
// made after its term ended: taken up unless we cannot campaign or the
// view shows it stale; the compare-and-swap settles the rest. A failing
// health check does not refuse it: an unhealthy leader beats none.
func (m *machine) askTakeOver(in input) {
	from, rev, v := in.from, in.expect, m.view
	var err error
	switch {
	case !m.cfg.writes:
		err = errors.New("an observer does not campaign")
	case m.stopping():
		err = errors.New("the candidate is stopping")
	case m.ttlUnusable != nil:
		err = m.ttlUnusable
	case m.phase.holds() || m.taking.rev != 0:
		err = errors.New("the candidate already holds or is taking the key")
	case rev == 0:
		err = errors.New("the offer names no revision")
	case !in.born.IsZero() && !m.epoch.IsZero() && !in.born.Equal(m.epoch):
		err = errors.New("the offer is of a bucket made again since")
	case v.known && v.Revision > rev:
		err = fmt.Errorf("the key moved on to revision %d since", v.Revision)
	case v.known && v.Revision == rev && (v.State != KeyHeld || v.Leader != from):
		err = fmt.Errorf("revision %d is not %s's", rev, from)
	}
	if err != nil {
		m.note(note{kind: noteTakeOver, err: err})
		return
	}
	m.taking = takeOver{from: from, rev: rev}
	m.enter(taking)
	m.log.Infof("election %s: %s takes the key over from %s at revision %d", m.cfg.key, m.self(), from, rev)
}

// endTakeOver answers the offer taken up: err is why it was not taken.
func (m *machine) endTakeOver(err error) {
	if err != nil {
		m.log.Infof("election %s: could not take the key over from %s: %v", m.cfg.key, m.taking.from, err)
	}
	m.taking = takeOver{}
	if m.mode == taking {
		m.enter(running)
	}
	m.note(note{kind: noteTakeOver, err: err})
}

// sitOutHandOver keeps us out of the takeover for the window of a release
// that hands the election to another, and ends any sit-out when it hands
// it to us (our identity, and our instance where it names one): its holder
// took the key after what we sat out.
func (m *machine) sitOutHandOver() {
	v := m.view
	if !m.cfg.writes || v.State != KeyReleased || v.HandOverTo == "" {
		return
	}
	if v.HandOverTo == m.cfg.identity && (v.HandOverInstance == "" || v.HandOverInstance == m.cfg.instance) {
		// A sit-out's revision of a bucket deleted since tells nothing of
		// this one; the releaser led only once earlier holders were gone.
		if v.Revision > m.sitOut.rev || m.sitOut.past {
			m.sitOut = sitOut{}
		}
		return
	}
	m.sitOut = sitOut{until: later(m.sitOut.until, v.seenAt.Add(v.HandOverWithin)), rev: max(m.sitOut.rev, v.Revision),
		past: m.sitOut.past && m.sitOut.rev >= v.Revision}
}

func (m *machine) onTTL(in input) {
	now, done := in.sent, in.now
	defer m.note(note{kind: noteTTLRead, at: done})
	h := m.held()
	holdWaits := m.phase.holds() && !h.ttlRead
	if in.err != nil {
		m.failed(in)
		m.log.Debugf("election %s: cannot read the bucket's TTL: %v", m.cfg.key, in.err)
		if holdWaits {
			h.ttlRetryAt = done.Add(m.jittered(m.tm.retry))
		} else {
			m.scheduleTTLCheck(done)
		}
		return
	}
	if now.Before(m.ttlReadAt) || holdWaits && now.Before(h.ttlSince) { // older than we know, or need
		if holdWaits {
			h.ttlRetryAt = done.Add(m.jittered(m.tm.retry))
		}
		m.scheduleTTLCheck(done)
		return
	}
	m.ttlReadAt = now
	m.noteBucketBorn(done, in.born)
	wasUnusable := m.ttlUnusable != nil
	known := m.tm.ttl
	usable := m.adoptTTL(in.ttl)
	h = m.held() // noteBucketBorn may have given the hold up
	if m.phase.holds() && !h.ttlRead && usable {
		h.ttlRead = true
		if m.vanishedByRaisedTTL(in.ttl) {
			m.log.Warnf("election %s: the key %s took was gone before it could expire by the raised TTL %v: taking it as a forced removal", m.cfg.key, m.cfg.identity, in.ttl)
			h.from, h.fromSeenAt = KeyRemoved, later(h.sent, h.wonAt) // gone before our write landed
		}
		if h.from == KeyRemoved {
			h.fromTTL = max(h.fromTTL, known)
			if at, ok := m.earlierHoldersGone(); ok {
				m.log.Infof("election %s: %s took the key at revision %d after it was removed; leading in %v, when a leader that was deposed has surely stood down", m.cfg.key, m.cfg.identity, h.rev, max(at.Sub(done), 0).Round(time.Millisecond))
			}
		}
	}
	if usable && wasUnusable {
		m.log.Infof("election %s: bucket TTL is %v again, which can hold elections: campaigning", m.cfg.key, in.ttl)
		m.ttlUnusable = nil
		m.view.readAt = time.Time{}
		m.schedule(done)
	}
	if !m.phase.holds() {
		m.notPastLapse(done)
	}
	if !m.cfg.writes && m.view.State == KeyHeld && !m.nextCampaign.IsZero() {
		m.nextCampaign = later(m.nextCampaign, m.checkAt(done)) // a raised TTL moves it later
	}
	m.scheduleTTLCheck(done)
}

// askTTL makes a read of the settings due at at, served by any read sent
// at or after since.
func (m *machine) askTTL(at, since time.Time) {
	m.nextTTLCheck, m.ttlSince = at, since
}

// scheduleTTLCheck makes the next routine read of the settings due a
// jittered ttlEvery from now, served by a read sent in the last half of
// that interval (elections share reads): what we know is never older than
// one and a half intervals.
func (m *machine) scheduleTTLCheck(now time.Time) {
	every := m.ttlEvery()
	at := now.Add(m.jittered(every))
	m.askTTL(at, later(at.Add(-every/2), m.ttlReadAt.Add(time.Nanosecond)))
}

// adoptTTL takes in the TTL just read. A lower TTL shortens the lease at
// once (the broker applies it to stored values); a higher one applies from
// the next write. One that cannot hold elections gives the key up and
// stops campaigns until it changes: it returns false then.
func (m *machine) adoptTTL(ttl time.Duration) bool {
	tm, err := m.cfg.timings(ttl)
	if err == nil && ttl > 0 && ttl < bucket.MinTTL {
		err = ErrTTLTooSmall
	}
	if ttl == 0 {
		err = ErrInvalidBucket
	}
	if err != nil {
		if m.ttlUnusable == nil {
			m.log.Errorf("election %s: bucket TTL changed from %v to %v, which cannot hold elections (%v): not leading or campaigning until it changes", m.cfg.key, m.tm.ttl, ttl, err)
		}
		m.ttlUnusable = err
		if m.phase.holds() {
			m.giveUp()
		}
		return false
	}
	if ttl == m.tm.ttl {
		return true
	}
	m.log.Warnf("election %s: bucket TTL changed from %v to %v", m.cfg.key, m.tm.ttl, ttl)
	m.doubt = nil // a write in doubt carries the TTL it was sent with
	if h := m.held(); ttl < m.tm.ttl && m.phase.holds() {
		if until := leaseEnd(h.sent, tm); until.Before(h.lease) {
			h.lease = until
			if m.termRuns() {
				m.note(note{kind: noteLimited, until: until})
			}
		}
		if next := h.sent.Add(tm.renew); next.Before(h.nextRenew) {
			h.nextRenew = next
		}
	}
	m.tm = tm
	m.note(note{kind: noteTimings, timings: &tm})
	return true
}

// giveUp ends the term as the bucket cannot hold elections and, unless
// doomed, releases the key to nobody: a hand-over or an offer taken up
// fails first.
func (m *machine) giveUp() {
	m.endTerm(CauseDeadline)
	if !m.stopping() {
		err := fmt.Errorf("the bucket's TTL cannot hold elections: %w", m.ttlUnusable)
		if m.handOver != nil {
			m.endHandOver(err)
		}
		if m.mode == taking {
			m.endTakeOver(err)
		}
	}
	switch {
	case m.phase == doomed:
		m.move(candidate)
		m.nextCampaign = time.Time{}
	case !m.stopping():
		m.enter(givingUp) // the release's answer makes us a candidate
	}
}

// initTimeout bounds a new watch's initial phase: one silent until then is made again.
func initTimeout(tm timings) time.Duration { return max(2*tm.request, time.Second) }

// initialWait is how long a campaign starting waits for its watch's initial values.
func initialWait(tm timings) time.Duration { return clamp(tm.ttl/20, 50*time.Millisecond, time.Second) }

// watchRetry is how long to wait before try n+1 at making a watch: a
// broker that refuses consumers is refusing them to a fleet.
func (m *machine) watchRetry(tries int) time.Duration {
	limit := clamp(m.tm.ttl, 2*time.Second, 30*time.Second)
	return m.jittered(min(100*time.Millisecond<<min(tries, 10), limit))
}

func (m *machine) onWatchMade(in input) {
	w := &m.watch
	if in.err != nil {
		if !m.failed(in) {
			m.watchFailed(in)
		}
		return
	}
	if w.logged != "" {
		m.log.Infof("election %s: watching the key again after %d failed tries", m.cfg.key, w.tries)
	}
	*w = watchState{mode: watchStarting, restartable: in.restartable, lastEvent: in.now}
}

// watchFailed drops the watch and schedules another try.
func (m *machine) watchFailed(in input) {
	now, err := in.now, in.err
	w := &m.watch
	if w.stop() {
		m.note(note{kind: noteStopWatch})
	}
	w.tries++
	w.retryAt = now.Add(m.watchRetry(w.tries))
	if m.stopping() {
		return
	}
	if msg := err.Error(); msg != w.logged && !in.logged {
		w.logged = msg
		meanwhile := "campaigning on timers"
		if !m.cfg.writes {
			meanwhile = "reading the key on timers"
		}
		m.log.Warnf("election %s: cannot watch the key, %s and retrying the watch with backoff: %v", m.cfg.key, meanwhile, err)
	} else {
		m.log.Debugf("election %s: cannot watch the key (try %d): %v", m.cfg.key, w.tries, err)
	}
}

// restartWatch replaces a watch, if any, that seems to have missed
// changes: in place if it is shared, else stopped and made again at once.
func (m *machine) restartWatch(now time.Time) {
	switch {
	case m.watch.mode == watchDown:
	case m.watch.restartable:
		m.note(note{kind: noteRestartWatch})
	default:
		m.watch.stop()
		m.watch.retryAt = now
		m.note(note{kind: noteStopWatch})
	}
}

func (m *machine) onWatchEnded(in input) {
	if in.err == nil {
		in.err, in.out = errors.New("the watch ended"), outUnknown
	}
	if m.failed(in) {
		m.watch.stop()
		return
	}
	m.watchFailed(in)
}

func (m *machine) onWatchEntry(in input) {
	m.confirmFrom = time.Time{}
	w := &m.watch
	w.lastEvent = in.now
	initial := w.mode == watchStarting
	w.sawInitial = w.sawInitial || initial
	v := viewOf(*in.entry, in.now, m.tm.ttl, !initial)
	v.confirmed = true
	m.observe(in.now, v)
}

func (m *machine) onWatchInitialDone(in input) {
	w := &m.watch
	w.lastEvent = in.now
	switch {
	case w.mode != watchStarting || w.sawInitial:
	case m.view.known && m.view.State == KeyHeld && !m.phase.holds():
		// The watch may predate the write we know of (such as one a lost
		// campaign named): read the key; if gone, it vanished.
		m.view.readAt, m.view.confirmed = time.Time{}, false
		m.confirmDue, m.confirmFrom = in.now, in.now
		m.log.Debugf("election %s: the watch began with the key absent, but it was held at revision %d: reading it", m.cfg.key, m.view.Revision)
	default:
		m.observe(in.now, keyView{known: true, Entry: Entry{Key: m.cfg.key}, seenAt: in.now, readAt: in.now, confirmed: true})
	}
	if w.mode == watchStarting {
		w.mode = watchWorking
	}
}
