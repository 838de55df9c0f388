// Package backoff provides jittered retry policies with presets, a
// context-aware sleep and a retry loop.
//
// A Policy is a list of steps; try n waits roughly Steps[n] (the last step
// repeats forever) minus a random share of it, so that many processes retrying
// at once spread out instead of arriving together.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrInvalidPolicy is returned when a policy cannot be built from its inputs.
var ErrInvalidPolicy = errors.New("backoff: invalid policy")

// DefaultJitter is the share of each step that may be removed at random when
// a Policy does not set Jitter.
const DefaultJitter = 0.5

// Policy is a jittered list of delays. The zero Policy never waits.
type Policy struct {
	// Steps are the delays for try 0, 1, 2, …; tries past the end use the last.
	Steps []time.Duration
	// Jitter is the share (0 to 1) of a step that is removed at random: a step
	// of 10s with Jitter 0.5 waits between 5s and 10s. 0 means DefaultJitter;
	// use NoJitter for exact steps.
	Jitter float64
}

// NoJitter as a Policy's Jitter makes every delay exactly its step.
const NoJitter = -1

var (
	// FiveSec grows from 500ms to 5s over ten steps.
	FiveSec = Linear(500*time.Millisecond, 5*time.Second, 10)
	// TenSec grows from 500ms to 10s over twenty steps.
	TenSec = Linear(500*time.Millisecond, 10*time.Second, 20)
	// TwentySec grows from 500ms to 20s over twenty steps.
	TwentySec = Linear(500*time.Millisecond, 20*time.Second, 20)
	// Minute grows from 1s to one minute over twenty steps.
	Minute = Linear(time.Second, time.Minute, 20)
)

// Linear returns a policy of n steps growing evenly from first to last. It
// panics on bad input, which only a programming error produces; use New for
// values that come from users.
func Linear(first, last time.Duration, n int) Policy {
	p, err := NewLinear(first, last, n)
	if err != nil {
		panic(err)
	}
	return p
}

// NewLinear is Linear returning an error wrapping ErrInvalidPolicy instead of
// panicking.
func NewLinear(first, last time.Duration, n int) (Policy, error) {
	switch {
	case n < 1:
		return Policy{}, fmt.Errorf("%w: %d steps, need at least 1", ErrInvalidPolicy, n)
	case first <= 0 || last <= 0:
		return Policy{}, fmt.Errorf("%w: steps must be positive, got first %v and last %v", ErrInvalidPolicy, first, last)
	case last < first:
		return Policy{}, fmt.Errorf("%w: last step %v is shorter than first step %v", ErrInvalidPolicy, last, first)
	}
	steps := make([]time.Duration, n)
	for i := range steps {
		if n == 1 {
			steps[i] = last
			continue
		}
		steps[i] = first + (last-first)*time.Duration(i)/time.Duration(n-1)
	}
	return Policy{Steps: steps}, nil
}

// New returns a policy with the given steps, checking that each is positive
// and the jitter is between 0 and 1 (or NoJitter).
func New(jitter float64, steps ...time.Duration) (Policy, error) {
	if len(steps) == 0 {
		return Policy{}, fmt.Errorf("%w: no steps given", ErrInvalidPolicy)
	}
	for i, s := range steps {
		if s <= 0 {
			return Policy{}, fmt.Errorf("%w: step %d is %v, steps must be positive", ErrInvalidPolicy, i, s)
		}
	}
	if jitter != NoJitter && (jitter < 0 || jitter > 1) {
		return Policy{}, fmt.Errorf("%w: jitter %v is outside 0 to 1", ErrInvalidPolicy, jitter)
	}
	return Policy{Steps: append([]time.Duration(nil), steps...), Jitter: jitter}, nil
}

// Duration returns how long try n (counting from 0) should wait: the n-th step,
// or the last one past the end, less a random share of at most Jitter of it.
// Negative n counts as 0.
func (p Policy) Duration(n int) time.Duration {
	return p.DurationAt(n, rand.Float64())
}

// DurationAt is Duration with the random share given: share, from 0 to 1,
// of the step's jitter is removed. Callers that must repeat a run exactly
// (a simulator replaying a seed) draw share from their own source.
func (p Policy) DurationAt(n int, share float64) time.Duration {
	if len(p.Steps) == 0 {
		return 0
	}
	step := p.Steps[min(max(n, 0), len(p.Steps)-1)]
	jitter := p.Jitter
	switch {
	case jitter == NoJitter:
		return step
	case jitter == 0:
		jitter = DefaultJitter
	}
	share = min(max(share, 0), 1)
	cut := time.Duration(float64(step) * jitter * share)
	return step - cut
}

// For calls fn with try = 0, 1, 2, … until it returns nil, waiting
// p.Duration(try) between calls. It returns nil once fn succeeds, or ctx's
// error joined with fn's last error when ctx ends first.
func (p Policy) For(ctx context.Context, fn func(try int) error) error {
	for try := 0; ; try++ {
		err := fn(try)
		if err == nil {
			return nil
		}
		if serr := Sleep(ctx, p.Duration(try)); serr != nil {
			return errors.Join(serr, err)
		}
	}
}

// Sleep waits for d or until ctx ends, whichever is first, and returns ctx's
// error if ctx ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
