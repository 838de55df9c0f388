// Package clock is the time source seam: code that reasons about deadlines
// takes a Clock so tests can step time instead of sleeping.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time. Real clocks include a monotonic reading,
	// so differences between two Now values are immune to wall-clock steps.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, like time.Timer.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset makes the timer fire after d; it reports whether it was active.
	Reset(d time.Duration) bool
}

// System is the real clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
