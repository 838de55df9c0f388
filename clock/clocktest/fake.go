// Package clocktest provides a manually stepped clock for tests.
package clocktest

import (
	"sync"
	"time"

	"github.com/conclave-io/conclave/clock"
)

// Fake is a clock that only moves when told to. Its timers fire during
// Advance or Set, in deadline order. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

var _ clock.Clock = (*Fake)(nil)

// New returns a fake clock reading start.
func New(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d and fires the timers that became due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(now) {
			due = append(due, t)
			continue
		}
		kept = append(kept, t)
	}
	f.timers = kept
	f.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default:
		}
	}
}

// Waiters returns how many timers are armed, so tests can wait until the
// code under test has gone to sleep before advancing.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NewTimer returns a timer that fires when the clock reaches now+d.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	f  *Fake
	c  chan time.Time
	at time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.remove()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	active := t.remove()
	t.at = t.f.now.Add(d)
	if d <= 0 {
		now := t.f.now
		t.f.mu.Unlock()
		select {
		case t.c <- now:
		default:
		}
		return active
	}
	t.f.timers = append(t.f.timers, t)
	t.f.mu.Unlock()
	return active
}

// remove unarms t; the caller holds f.mu.
func (t *fakeTimer) remove() bool {
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
