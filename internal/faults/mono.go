package faults

import (
	"time"

	"golang.org/x/sys/unix"
)

// Mono returns the system-wide CLOCK_MONOTONIC reading in nanoseconds. Every
// record of a run is stamped with it: unlike the monotonic reading inside a
// time.Time, which Go counts from the start of its own process, it compares
// across processes.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC cannot fail on Linux; a failure means the
		// harness runs somewhere it cannot measure anything.
		panic("faults: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// Calibration converts a time.Time of this process to CLOCK_MONOTONIC. Go's
// monotonic clock is CLOCK_MONOTONIC less a per-process offset, so one pair of
// readings taken together converts every later time exactly.
type Calibration struct {
	wall time.Time // with its monotonic reading
	mono int64
	err  int64 // half the width of the bracket the pair was read in
}

// Calibrate reads both clocks at once: Mono, time.Now, Mono again, keeping the
// tightest of a few tries, and taking the midpoint.
func Calibrate() Calibration {
	best := Calibration{err: 1 << 62}
	for range 16 {
		before := Mono()
		now := time.Now()
		after := Mono()
		if half := (after - before) / 2; half < best.err {
			best = Calibration{wall: now, mono: before + half, err: half}
		}
	}
	return best
}

// Mono returns t, which must carry a monotonic reading (as time.Now's values
// and their Add results do), as a CLOCK_MONOTONIC reading.
func (c Calibration) Mono(t time.Time) int64 {
	return c.mono + int64(t.Sub(c.wall))
}

// Uncertainty returns how far a converted reading may be off.
func (c Calibration) Uncertainty() time.Duration { return time.Duration(c.err) }
