package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDurationStaysWithinJitterBounds(t *testing.T) {
	p := Policy{Steps: []time.Duration{100 * time.Millisecond, time.Second}, Jitter: 0.25}
	seen := map[time.Duration]bool{}
	for i := 0; i < 2000; i++ {
		for n, step := range map[int]time.Duration{-3: 100 * time.Millisecond, 0: 100 * time.Millisecond, 1: time.Second, 50: time.Second} {
			d := p.Duration(n)
			if lo := step * 3 / 4; d < lo || d > step {
				t.Fatalf("Duration(%d) = %v, want within [%v, %v]", n, d, lo, step)
			}
			seen[d] = true
		}
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays in 8000 draws: jitter is not random", len(seen))
	}
}

func TestDefaultJitterAndNoJitter(t *testing.T) {
	step := time.Second
	lowest := step
	for i := 0; i < 5000; i++ {
		lowest = min(lowest, Policy{Steps: []time.Duration{step}}.Duration(0))
	}
	if lowest < step/2 || lowest > step*6/10 {
		t.Fatalf("lowest of 5000 draws with default jitter = %v, want just above %v", lowest, step/2)
	}
	exact := Policy{Steps: []time.Duration{step}, Jitter: NoJitter}
	for i := 0; i < 100; i++ {
		if d := exact.Duration(i); d != step {
			t.Fatalf("NoJitter Duration(%d) = %v, want %v", i, d, step)
		}
	}
	if d := (Policy{}).Duration(3); d != 0 {
		t.Fatalf("zero policy waits %v, want 0", d)
	}
}

func TestPresetsGrowToTheirNames(t *testing.T) {
	for name, tc := range map[string]struct {
		p         Policy
		first, hi time.Duration
	}{
		"FiveSec":   {FiveSec, 500 * time.Millisecond, 5 * time.Second},
		"TenSec":    {TenSec, 500 * time.Millisecond, 10 * time.Second},
		"TwentySec": {TwentySec, 500 * time.Millisecond, 20 * time.Second},
		"Minute":    {Minute, time.Second, time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			s := tc.p.Steps
			if s[0] != tc.first || s[len(s)-1] != tc.hi {
				t.Fatalf("steps run %v to %v, want %v to %v", s[0], s[len(s)-1], tc.first, tc.hi)
			}
			for i := 1; i < len(s); i++ {
				if s[i] <= s[i-1] {
					t.Fatalf("step %d (%v) does not grow past step %d (%v)", i, s[i], i-1, s[i-1])
				}
			}
		})
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for name, fn := range map[string]func() error{
		"no steps":       func() error { _, err := New(0.5); return err },
		"zero step":      func() error { _, err := New(0.5, time.Second, 0); return err },
		"jitter above 1": func() error { _, err := New(1.5, time.Second); return err },
		"negative n":     func() error { _, err := NewLinear(time.Second, 2*time.Second, 0); return err },
		"shrinking":      func() error { _, err := NewLinear(2*time.Second, time.Second, 3); return err },
		"non-positive":   func() error { _, err := NewLinear(0, time.Second, 3); return err },
	} {
		t.Run(name, func(t *testing.T) {
			if err := fn(); !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("got %v, want ErrInvalidPolicy", err)
			}
		})
	}
	if _, err := New(NoJitter, time.Second); err != nil {
		t.Fatalf("NoJitter rejected: %v", err)
	}
	if p := Linear(time.Second, time.Second, 1); len(p.Steps) != 1 || p.Steps[0] != time.Second {
		t.Fatalf("one-step Linear = %v", p.Steps)
	}
}

func TestForRetriesUntilSuccess(t *testing.T) {
	p := Policy{Steps: []time.Duration{time.Millisecond}, Jitter: NoJitter}
	var tries []int
	err := p.For(context.Background(), func(try int) error {
		tries = append(tries, try)
		if try < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || len(tries) != 4 || tries[3] != 3 {
		t.Fatalf("For returned %v after tries %v, want nil after 0..3", err, tries)
	}
}

func TestForStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	failure := errors.New("broker down")
	p := Policy{Steps: []time.Duration{time.Hour}}
	err := p.For(ctx, func(try int) error {
		if try > 0 {
			t.Errorf("try %d ran after cancel", try)
		}
		cancel()
		return failure
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, failure) {
		t.Fatalf("For = %v, want context.Canceled joined with the last failure", err)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return after cancel")
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a done context = %v", err)
	}
}

// TestDurationAtRemovesTheGivenShareOfTheJitter: the share is the caller's
// random draw, so the same share always gives the same delay.
func TestDurationAtRemovesTheGivenShareOfTheJitter(t *testing.T) {
	p := Policy{Steps: []time.Duration{time.Second, 10 * time.Second}, Jitter: 0.5}
	for _, c := range []struct {
		n     int
		share float64
		want  time.Duration
	}{
		{0, 0, time.Second},
		{0, 1, 500 * time.Millisecond},
		{1, 0.5, 7500 * time.Millisecond},
		{5, 1, 5 * time.Second},   // past the end: the last step
		{1, 2, 5 * time.Second},   // a share above 1 counts as 1
		{1, -1, 10 * time.Second}, // below 0 as 0
	} {
		if got := p.DurationAt(c.n, c.share); got != c.want {
			t.Errorf("DurationAt(%d, %v) = %v, want %v", c.n, c.share, got, c.want)
		}
	}
	exact := Policy{Steps: []time.Duration{time.Second}, Jitter: NoJitter}
	if got := exact.DurationAt(0, 1); got != time.Second {
		t.Errorf("NoJitter DurationAt(0, 1) = %v, want 1s", got)
	}
}
