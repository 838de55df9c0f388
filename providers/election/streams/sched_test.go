package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestWakeupsFireOnTheSchedulersClock: wake-ups fire on the scheduler's
// loop in the order of their instants on its clock, as the clock reaches
// each; one stopped or set again does not fire at its old instant; and the
// loop ends once no wake-up is left set (goleak checks it).
func TestWakeupsFireOnTheSchedulersClock(t *testing.T) {
	fake := clocktest.New(time.Unix(1000, 0))
	s := schedulerFor(fake)
	fired := make(chan string, 8)
	wakeup := func(name string) *wakeup { return s.newWakeup(func() { fired <- name }) }
	a, b, c, stopped, moved := wakeup("a"), wakeup("b"), wakeup("c"), wakeup("stopped"), wakeup("moved")
	c.set(3 * time.Second)
	a.set(time.Second)
	b.set(2 * time.Second)
	stopped.set(1500 * time.Millisecond)
	moved.set(500 * time.Millisecond)
	stopped.stop()
	moved.set(4 * time.Second)
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-fired:
			if got != want {
				t.Fatalf("%s fired, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not fire", want)
		}
	}
	for _, want := range []string{"a", "b", "c", "moved"} {
		fake.Advance(time.Second)
		expect(want)
	}
	select {
	case got := <-fired:
		t.Fatalf("%s fired once every wake-up had", got)
	default:
	}
	s.mu.Lock()
	left := len(s.wakeups)
	s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d wake-ups left set", left)
	}
	a.set(time.Hour)
	a.stop() // the loop, started again, ends with it
}

// TestStewardRunsOnTheElectionsClock: a candidate's steward keeps its time
// on the election's clock: it announces itself again and runs its health
// check again once that clock reaches their instants, however little wall
// time passed.
func TestStewardRunsOnTheElectionsClock(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute // announcements every two minutes, of the election's clock
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	heard := make(chan struct{}, 16)
	sub, err := nc.Subscribe(standing.AnnounceSubject(bucketName, "clocked"), func(m *nats.Msg) {
		var c standing.Candidate
		if json.Unmarshal(m.Data, &c) == nil && c.Identity == "a" && !c.Leaving {
			heard <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var checks atomic.Int64
	const healthEvery = time.Hour
	fake := clocktest.New(time.Now())
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "clocked", kv, append(rec.options("a"), WithClock(fake),
		WithHealthCheck(func(context.Context) error { checks.Add(1); return nil }, healthEvery))...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	wait := func(what string) {
		t.Helper()
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s announcement of a", what)
		}
	}
	wait("first")
	next := nextAnnouncement(fake.Now(), standing.AnnouncementInterval(ttl), "a")
	fake.Advance(next.Sub(fake.Now()))
	wait("second (the election's clock reached its instant)")
	before := checks.Load()
	fake.Advance(healthEvery)
	eventually(t, 5*time.Second, "the health check to run once the election's clock passed its interval", func() bool {
		return checks.Load() > before
	})
}

// heldStore holds every watch of a key (a candidate's first action) until
// released, and counts those in flight at once.
type heldStore struct {
	store
	release       chan struct{}
	calls, inside atomic.Int64
	peak          atomic.Int64
}

func (h *heldStore) Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error) {
	h.calls.Add(1)
	n := h.inside.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	defer h.inside.Add(-1)
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.store.Watch(ctx, key)
}

// TestRoutineActionsWaitWithoutAGoroutine: a fleet's start of more
// candidates than maxRoutineInFlight has at most that many routine
// actions (here, reads of the key) in flight at once; the others wait in
// the scheduler, without a goroutine, and each is performed in turn. The
// actions are the candidates' first: making their watches.
func TestRoutineActionsWaitWithoutAGoroutine(t *testing.T) {
	const candidates = maxRoutineInFlight + 200
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	hs := &heldStore{store: newSimStore(clk, 30*time.Second), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, candidates)
	for i := range candidates {
		e, err := NewElection(fmt.Sprintf("c%d", i), "k", nil, withStore(hs), WithClock(clk), WithLogger(nopLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		e.Launch(ctx, func(err error) { ended <- err })
	}
	defer func() {
		cancel()
		for range candidates {
			if err := <-ended; err != nil {
				t.Errorf("a campaign ended with %v", err)
			}
		}
	}()
	s := schedulerFor(clock.Clock(clk))
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %d watches made, %d in flight, peak %d", what, hs.calls.Load(), hs.inside.Load(), hs.peak.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pending := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)
	}
	select {
	case err := <-ended:
		t.Fatalf("a campaign ended at once: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	waitFor("the watches to fill the routine actions in flight", func() bool { return hs.inside.Load() == maxRoutineInFlight })
	waitFor("the other candidates' watches to wait in the scheduler", func() bool { return pending() == candidates-maxRoutineInFlight })
	if got := hs.peak.Load(); got > maxRoutineInFlight {
		t.Fatalf("%d watches in flight at once, more than %d", got, maxRoutineInFlight)
	}
	close(hs.release)
	waitFor("every candidate's watch", func() bool { return hs.calls.Load() >= candidates })
	if got := hs.peak.Load(); got > maxRoutineInFlight {
		t.Fatalf("%d watches in flight at once, more than %d", got, maxRoutineInFlight)
	}
}

// TestHoldersAndUrgentActionsNeverWait: only a candidate that does not
// hold the key waits for a turn among the routine actions, and only with
// a routine action; renewals, urgent writes, releases and offers of the
// key, and every action of a holder, go at once.
func TestHoldersAndUrgentActionsNeverWait(t *testing.T) {
	t.Parallel()
	standby, holder := &machine{phase: candidate}, &machine{phase: winning}
	leader := &machine{phase: leading}
	for _, tc := range []struct {
		m    *machine
		act  action
		want bool
	}{
		{standby, action{kind: doRead}, true},
		{standby, action{kind: doWatch}, true},
		{standby, action{kind: doReadTTL}, true},
		{standby, action{kind: doWrite}, true},
		{standby, action{kind: doWrite, urgent: true}, false},
		{standby, action{kind: doRelease}, false},
		{standby, action{kind: doOffer}, false},
		{holder, action{kind: doReadTTL}, false},
		{holder, action{kind: doWatch}, false},
		{leader, action{kind: doReadTTL}, false},
		{leader, action{kind: doWrite, renewal: true}, false},
		{leader, action{kind: doRead}, false},
	} {
		if got := routineAction(tc.m, tc.act); got != tc.want {
			t.Errorf("phase %v, action %+v: waits %v, want %v", tc.m.phase, tc.act, got, tc.want)
		}
	}
}

// TestAStopIsTakenWithTheOutcomeAndBeforeOtherAsks: the driver's next
// input is an action's outcome with the stop posted meanwhile, and a stop
// goes before what else was posted, but never before the start.
func TestAStopIsTakenWithTheOutcomeAndBeforeOtherAsks(t *testing.T) {
	s := &scheduler{clock: clocktest.New(simStart), kick: make(chan struct{}, 1)}
	d := &driver{sched: s}
	d.inbox = []ask{{in: input{kind: inStart}}, {in: input{kind: inHandOver}}, {in: input{kind: inStop}}}
	var got []inputKind
	for {
		in, ok := d.take(s)
		if !ok {
			break
		}
		got = append(got, in.kind)
	}
	if want := []inputKind{inStart, inStop, inHandOver}; !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v: the start first, then the stop, then the rest", got, want)
	}

	d.inbox = []ask{{in: input{kind: inHealth}}, {in: input{kind: inStop}}}
	d.result = &input{kind: inWrite}
	in, _ := d.take(s)
	if in.kind != inWrite || in.stop == nil || in.stop.kind != inStop {
		t.Fatalf("took %v with stop %v, want the write's outcome with the stop", in.kind, in.stop)
	}
	if in, _ := d.take(s); in.kind != inHealth {
		t.Fatalf("then took %v, want the health input", in.kind)
	}
}

// TestAClocksSchedulerIsOneWhileHeld: a scheduler whose loop ended with
// nothing left to serve is still the one its clock's new elections share
// while an election made before holds it (their first start runs its loop
// again), rather than one of two loops and two timers on one clock; once
// nothing holds it, the clock's entry goes.
func TestAClocksSchedulerIsOneWhileHeld(t *testing.T) {
	fake := clocktest.New(time.Unix(1000, 0))
	s := schedulerFor(fake)
	fireUntilIdle(t, s, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.running
	})
	if got := schedulerFor(fake); got != s {
		t.Fatal("the clock's new elections got a second scheduler while the first, idle, is held")
	}
	w := s.newWakeup(func() {})
	w.set(time.Hour) // starts s's loop again
	if got := schedulerFor(fake); got != s {
		t.Fatal("the clock's new elections got a second scheduler while the first runs again")
	}
	w.stop()
	eventually(t, 5*time.Second, "the loop to end idle", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.running
	})
	s, w = nil, nil
	eventually(t, 5*time.Second, "the clock's entry to go once nothing holds its scheduler", func() bool {
		runtime.GC()
		schedulers.mu.Lock()
		defer schedulers.mu.Unlock()
		_, kept := schedulers.m[fake]
		return !kept
	})
}

// fireUntilIdle sets a wake-up of s to fire at once, waits for it to fire
// and then for idle to hold, and returns it.
func fireUntilIdle(t *testing.T, s *scheduler, idle func() bool) *wakeup {
	t.Helper()
	fired := make(chan struct{}, 1)
	w := s.newWakeup(func() { fired <- struct{}{} })
	w.set(0)
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the wake-up did not fire")
	}
	eventually(t, 5*time.Second, "the idle scheduler's loop to end", idle)
	return w
}

// uncomparableClock is a clock that cannot be a map key.
type uncomparableClock struct {
	clock.Clock
	_ []int
}

// wrappedClock is a clock of a comparable type whose value may still not
// be a map key: its field may hold an uncomparableClock.
type wrappedClock struct{ clock.Clock }

// TestAClockThatCannotBeAMapKeyGetsALoopOfItsOwn: a clock that cannot be a
// map key (a struct holding a slice, or one wrapping such a clock) gets a
// scheduler of its own, whose loop fires its wake-ups and ends once idle
// without touching the clocks' map.
func TestAClockThatCannotBeAMapKeyGetsALoopOfItsOwn(t *testing.T) {
	for _, c := range []clock.Clock{
		uncomparableClock{Clock: clocktest.New(time.Unix(1000, 0))},
		wrappedClock{uncomparableClock{Clock: clocktest.New(time.Unix(1000, 0))}},
	} {
		runsALoopOfItsOwn(t, c)
	}
}

func runsALoopOfItsOwn(t *testing.T, c clock.Clock) {
	t.Helper()
	s := schedulerFor(c)
	if s == schedulerFor(c) {
		t.Fatal("two schedulers of a clock that cannot be a map key are one")
	}
	fireUntilIdle(t, s, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.running
	})
}
