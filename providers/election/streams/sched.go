package streams

import (
	"container/heap"
	"reflect"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/conclave-io/conclave/clock"
)

// A scheduler steps the machines of a process's candidates and observers
// on one clock, on one goroutine (the loop) that runs while it has drivers
// or wake-ups set: the drivers' and stewards' wake-ups wait in one heap
// under one timer, watches and callers hand inputs in, and each turn steps
// one machine until it asks for nothing or for an action. Actions run off
// the loop, each on a goroutine while in flight, their outcome the
// driver's next input: a driver at rest costs a place in the heap. A driver
// takes one input at a time, in order, none while its action is in flight.
// The loop calls no user code: callbacks go through notifiers.
type scheduler struct {
	clock clock.Clock
	kick  chan struct{} // wakes the loop: a driver became ready

	mu      sync.Mutex
	wakeups wakeupHeap      // drivers' and stewards' wake-ups set, soonest first
	ready   []*driver       // drivers with an input to take
	members int             // drivers not finished
	running bool            // the loop's goroutine runs
	routine int             // routine actions in flight (see start)
	pending []pendingAction // routine actions waiting for one to end, in order
}

// pendingAction is a routine action waiting for its turn, since queued.
type pendingAction struct {
	d      *driver
	act    action
	queued time.Time
}

// maxRoutineInFlight bounds a scheduler's routine actions in flight: a
// fleet's start would otherwise hold a goroutine per candidate at the
// transport's gate (the runtime keeps every goroutine descriptor it made).
// Urgent actions (renewals, releases, offers) and every action of a holder
// of the key never wait: a waiting driver takes no input, not even its
// term's deadline.
const maxRoutineInFlight = 256

// schedulers holds the scheduler of each clock in use, weakly: one is
// shared for as long as an election, observer or running loop holds it,
// however often its loop ends idle and starts again, and its entry goes
// once it is collected.
var schedulers = struct {
	mu sync.Mutex
	m  map[clock.Clock]weak.Pointer[scheduler]
}{m: map[clock.Clock]weak.Pointer[scheduler]{}}

// schedulerFor returns the scheduler of c, shared by the process's drivers
// on that clock (a clock that cannot be a map key gets one of its own).
func schedulerFor(c clock.Clock) *scheduler {
	if !reflect.ValueOf(c).Comparable() { // not the type: an interface field may hold a slice
		return &scheduler{clock: c, kick: make(chan struct{}, 1)}
	}
	schedulers.mu.Lock()
	defer schedulers.mu.Unlock()
	if s := schedulers.m[c].Value(); s != nil {
		return s
	}
	s := &scheduler{clock: c, kick: make(chan struct{}, 1)}
	entry := weak.Make(s)
	schedulers.m[c] = entry
	runtime.AddCleanup(s, func(c clock.Clock) {
		schedulers.mu.Lock()
		defer schedulers.mu.Unlock()
		if schedulers.m[c] == entry { // not a scheduler made for c since
			delete(schedulers.m, c)
		}
	}, c)
	return s
}

// add runs d on s from first; done is called off the loop once d has
// finished and has no action in flight.
func (s *scheduler) add(d *driver, first input, done func()) {
	s.mu.Lock()
	d.finished, d.added = done, true
	d.wake = wakeup{s: s, d: d, slot: -1}
	d.inbox = append([]ask{{in: first}}, d.inbox...) // asks posted before it wait for the start
	s.members++
	s.readyLocked(d)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.loop()
	}
	s.wake()
}

// post hands a an input for d, taken in order after those posted before.
func (s *scheduler) post(d *driver, a ask) {
	s.mu.Lock()
	if d.ended {
		s.mu.Unlock()
		if a.done != nil {
			a.done <- ErrNotLeader
		}
		return
	}
	d.inbox = append(d.inbox, a)
	s.readyLocked(d)
	s.mu.Unlock()
	s.wake()
}

// notify tells the loop that d's watch has delivered something.
func (s *scheduler) notify(d *driver) { s.readied(d, func() { d.watchReady = true }) }

// settingsChanged hands d the latest change of the bucket's settings,
// replacing one not taken yet.
func (s *scheduler) settingsChanged(d *driver, sent time.Time) {
	s.readied(d, func() { d.settingsSent = sent })
}

// outcome hands d the outcome of its action: its next input.
func (s *scheduler) outcome(d *driver, in input) {
	s.readied(d, func() { d.result, d.inFlight = &in, false })
}

// readied makes change to d under s.mu and queues d for a turn.
func (s *scheduler) readied(d *driver, change func()) {
	s.mu.Lock()
	change()
	s.readyLocked(d)
	s.mu.Unlock()
	s.wake()
}

func (s *scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// readyLocked queues d for a turn unless it is queued or busy.
func (s *scheduler) readyLocked(d *driver) {
	if !d.added || d.queued || d.inFlight || d.ended {
		return
	}
	d.queued = true
	s.ready = append(s.ready, d)
}

// loop takes turns while the scheduler has drivers or wake-ups set.
func (s *scheduler) loop() {
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, fires, next, ok := s.collect()
		if !ok {
			return
		}
		for _, fire := range fires {
			fire()
		}
		for _, d := range batch {
			s.turn(d)
		}
		if len(batch) > 0 || len(fires) > 0 {
			continue
		}
		timer.Stop()
		select {
		case <-timer.C():
		default:
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(s.clock.Now()), 0)
		}
		timer.Reset(wait)
		if !next.IsZero() && !s.clock.Now().Before(next) {
			// A (test's) clock stepped past next since the read may
			// have set the timer past it too.
			continue
		}
		select {
		case <-timer.C():
		case <-s.kick:
		}
	}
}

// collect readies the drivers whose wake-up is due, and returns those
// ready, the other wake-ups due (off the heap) and the next instant due; ok
// is false once nothing is left to serve, and the loop must end.
func (s *scheduler) collect() (batch []*driver, fires []func(), next time.Time, ok bool) {
	s.mu.Lock()
	if s.idleLocked() {
		s.running = false // add and wakeup.set start the loop again
		s.mu.Unlock()
		return nil, nil, time.Time{}, false
	}
	now := s.clock.Now()
	for len(s.wakeups) > 0 && !s.wakeups[0].at.After(now) {
		w := heap.Pop(&s.wakeups).(*wakeup)
		if d := w.d; d != nil {
			d.tickDue = true
			s.readyLocked(d)
		} else {
			fires = append(fires, w.fire)
		}
	}
	batch, s.ready = s.ready, nil
	if len(s.wakeups) > 0 {
		next = s.wakeups[0].at
	}
	s.mu.Unlock()
	return batch, fires, next, true
}

// idleLocked reports whether the loop has no driver and no wake-up set.
func (s *scheduler) idleLocked() bool { return s.members == 0 && len(s.wakeups) == 0 }

// turn steps d with the inputs it has, one at a time, until it has none,
// starts an action, or finishes.
func (s *scheduler) turn(d *driver) {
	s.mu.Lock()
	d.queued = false
	if d.inFlight || d.ended {
		s.mu.Unlock()
		return
	}
	if d.wake.slot >= 0 {
		heap.Remove(&s.wakeups, d.wake.slot)
	}
	s.mu.Unlock()
	for {
		in, ok := d.take(s)
		if !ok {
			break
		}
		wake, act := d.handle(in)
		if act.kind != doNothing {
			s.start(d, act)
			return
		}
		d.wake.at = wake
		if d.done {
			s.finish(d)
			return
		}
	}
	s.mu.Lock()
	heap.Push(&s.wakeups, &d.wake)
	s.mu.Unlock()
}

// start performs d's act off the loop, on a goroutine while in flight, so
// that no renewal waits on other candidates' requests (the transport
// orders them per connection) and a term's deadline caps its request from
// when the machine decided it; its outcome is d's next input. Routine
// actions beyond maxRoutineInFlight wait here in order, without a
// goroutine, their timeout counting the wait: one whose time ran out is
// performed with none left, and the transport sends nothing for it.
func (s *scheduler) start(d *driver, act action) {
	routine := routineAction(d.m, act)
	s.mu.Lock()
	d.inFlight = true
	if routine && s.routine >= maxRoutineInFlight {
		s.pending = append(s.pending, pendingAction{d: d, act: act, queued: time.Now()})
		s.mu.Unlock()
		return
	}
	if routine {
		s.routine++
	}
	s.mu.Unlock()
	go s.perform(d, act, routine)
}

// routineAction reports whether act, m's action, may wait among the
// routine actions (see maxRoutineInFlight).
func routineAction(m *machine, act action) bool {
	return !act.urgentAction() && !m.phase.holds()
}

// perform performs d's act and passes its outcome on; a routine action's
// goroutine then performs the pending ones until none waits.
func (s *scheduler) perform(d *driver, act action, routine bool) {
	for {
		s.outcome(d, d.perform(act))
		if !routine {
			return
		}
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.routine--
			s.pending = nil // the array goes with the last one
			s.mu.Unlock()
			return
		}
		next := s.pending[0]
		s.pending[0] = pendingAction{}
		s.pending = s.pending[1:]
		s.mu.Unlock()
		d, act = next.d, next.act
		act.timeout = max(act.timeout-time.Since(next.queued), time.Nanosecond)
	}
}

// finish takes d off the scheduler: asks still waiting get ErrNotLeader,
// and d's done runs on a goroutine of its own.
func (s *scheduler) finish(d *driver) {
	s.mu.Lock()
	d.ended = true
	s.members--
	late := d.inbox
	d.inbox = nil
	s.mu.Unlock()
	for _, a := range append(d.waiting, late...) {
		if a.done != nil {
			a.done <- ErrNotLeader
		}
	}
	d.waiting = nil
	d.stopWatch()
	if d.stopChanges != nil {
		d.stopChanges()
	}
	d.stopOnDone() // set, as finished is, by launch and add
	go d.finished()
	s.wake() // the loop ends with the last driver
}

// take returns d's next input: the outcome of its action, then what was
// posted, a change of the bucket's settings, what the watch delivered, the
// wake-up once due. A stop goes first of what was posted, and comes with an
// outcome: a term not begun when Stop is called does not begin.
func (d *driver) take(s *scheduler) (input, bool) {
	s.mu.Lock()
	now := s.clock.Now()
	switch {
	case d.result != nil:
		in := *d.result
		d.result = nil
		in.stop = d.takeStop()
		s.mu.Unlock()
		return in, true
	case len(d.inbox) > 0:
		if stop := d.takeStop(); stop != nil {
			s.mu.Unlock()
			stop.now = now
			return *stop, true
		}
		a := d.inbox[0]
		d.inbox[0] = ask{}
		d.inbox = d.inbox[1:]
		if len(d.inbox) == 0 {
			d.inbox = nil // the array goes with the last one
		}
		s.mu.Unlock()
		if a.done != nil {
			d.waiting = append(d.waiting, a)
		}
		a.in.now = now
		return a.in, true
	case !d.settingsSent.IsZero():
		// Read the settings, served by the read the process made since.
		sent := d.settingsSent
		d.settingsSent = time.Time{}
		s.mu.Unlock()
		return input{kind: inAskTTL, now: now, sent: now.Add(-time.Since(sent))}, true
	}
	watch := d.watchReady
	d.watchReady = false
	tick := d.tickDue && !d.wake.at.After(now)
	d.tickDue = false
	s.mu.Unlock()
	if watch && d.w != nil {
		if ent, ok, got := poll(d.w); got {
			s.mu.Lock()
			d.watchReady = true // there may be more
			if tick {
				d.tickDue = true
			}
			s.mu.Unlock()
			return d.watchInput(ent, ok), true
		}
	}
	if tick {
		return input{kind: inTick, now: now}, true
	}
	return input{}, false
}

// takeStop takes the stop posted, if any, out of d's inbox (see
// stopFirst). Under s.mu.
func (d *driver) takeStop() *input {
	a, rest := stopFirst(d.inbox, func(a ask) inputKind { return a.in.kind })
	d.inbox = rest
	if a == nil {
		return nil
	}
	return &a.in
}

// stopFirst takes the stop, if any, out of inbox ahead of what was posted
// before it but the start (a stopping candidate's asks are refused all the
// same), and returns it and the rest (nil when empty). The scheduler and
// the simulator order a driver's inputs by it.
func stopFirst[T any](inbox []T, kind func(T) inputKind) (*T, []T) {
	for i, a := range inbox {
		switch kind(a) {
		case inStart:
			return nil, inbox
		case inStop:
			rest := append(inbox[:i:i], inbox[i+1:]...)
			if len(rest) == 0 {
				rest = nil
			}
			return &a, rest
		}
	}
	return nil, inbox
}

// A wakeup is an instant in the loop's heap, on its scheduler's clock. A
// driver's (d) readies it for a turn, and the loop sets it after each
// turn. Any other calls fire on the loop, which must be quick, take no
// lock the loop's callers hold, and call no user code; it is set and
// stopped from any goroutine, and fires at most once per set.
type wakeup struct {
	s    *scheduler
	d    *driver
	fire func()
	at   time.Time // when it fires; under s.mu while set
	slot int       // index in s.wakeups, -1 while not set; under s.mu
}

// newWakeup returns a wake-up of s, not set, that calls fire.
func (s *scheduler) newWakeup(fire func()) *wakeup {
	return &wakeup{s: s, fire: fire, slot: -1}
}

// set has w fire after d (at once if d is not positive) instead, and starts
// the loop if it is not running.
func (w *wakeup) set(d time.Duration) {
	s := w.s
	s.mu.Lock()
	w.at = s.clock.Now().Add(max(d, 0))
	if w.slot >= 0 {
		heap.Fix(&s.wakeups, w.slot)
	} else {
		heap.Push(&s.wakeups, w)
	}
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.loop()
	}
	s.wake()
}

// stop has w not fire until set again; the loop hears of it, to end once
// it has nothing left to serve.
func (w *wakeup) stop() {
	s := w.s
	s.mu.Lock()
	set := w.slot >= 0
	if set {
		heap.Remove(&s.wakeups, w.slot)
	}
	s.mu.Unlock()
	if set {
		s.wake()
	}
}

// wakeupHeap orders the wake-ups set by when they fire.
type wakeupHeap []*wakeup

func (h wakeupHeap) Len() int           { return len(h) }
func (h wakeupHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeupHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}

func (h *wakeupHeap) Push(x any) {
	w := x.(*wakeup)
	w.slot = len(*h)
	*h = append(*h, w)
}

func (h *wakeupHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.slot = -1
	return w
}
