package streams

import (
	"errors"
	"testing"
	"time"
)

// TestRenewCadence: a leader renews every TTL/3 at short TTLs, as before;
// from a TTL of about 27 s it keeps a fixed retry room (outageRoom plus the
// request timeout and retry pause, 15.25 s) and renews less often; from
// about 34 s at the longest interval RenewInterval accepts, half the lease.
func TestRenewCadence(t *testing.T) {
	t.Parallel()
	const s = time.Second
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, c := range []struct {
		ttl, renew, room time.Duration
	}{
		{1 * s, s / 3, 900*time.Millisecond - s/3},
		{5 * s, 5 * s / 3, 4500*time.Millisecond - 5*s/3},
		{10 * s, 10 * s / 3, 9*s - 10*s/3},
		{20 * s, 20 * s / 3, 18*s - 20*s/3},
		{26 * s, 26 * s / 3, 23400*time.Millisecond - 26*s/3},
		{27 * s, ms(9050), ms(15250)},
		{30 * s, ms(11750), ms(15250)},
		{33 * s, ms(14450), ms(15250)},
		{34 * s, ms(15300), ms(15300)},
		{60 * s, 27 * s, 27 * s},
		{120 * s, 54 * s, 54 * s},
		{5 * time.Minute, 135 * s, 135 * s},
	} {
		t.Run(c.ttl.String(), func(t *testing.T) {
			e := &Election{opts: defaultOptions()}
			tm, err := e.timings(c.ttl)
			if err != nil {
				t.Fatal(err)
			}
			room := tm.ttl - tm.margin - tm.renew
			if tm.renew != c.renew || room != c.room {
				t.Fatalf("TTL %v: renew every %v leaving %v to retry; want %v leaving %v", c.ttl, tm.renew, room, c.renew, c.room)
			}
		})
	}
}

// TestRenewCadenceKeepsItsPromises, over TTLs from 1 s to an hour: the
// default timings validate; a leader never renews more often than every
// TTL/3 nor less often than RenewInterval allows (half the lease, so that a
// whole interval is left to retry in); and the retry room is never below
// the outage room plus a lost request and a retry pause, unless renewing
// every TTL/3 leaves less, in which case it renews every TTL/3 as before.
func TestRenewCadenceKeepsItsPromises(t *testing.T) {
	t.Parallel()
	for ttl := time.Second; ttl <= time.Hour; ttl += ttl/50 + 100*time.Millisecond {
		e := &Election{opts: defaultOptions()}
		tm, err := e.timings(ttl)
		if err != nil {
			t.Fatalf("TTL %v: %v", ttl, err)
		}
		lease := ttl - tm.margin
		room := lease - tm.renew
		want := outageRoom + tm.request + tm.retry
		switch {
		case tm.renew < ttl/3:
			t.Fatalf("TTL %v: renews every %v, more often than TTL/3", ttl, tm.renew)
		case tm.renew > lease/2:
			t.Fatalf("TTL %v: renews every %v, beyond half the lease %v", ttl, tm.renew, lease/2)
		case room < want && tm.renew != ttl/3:
			t.Fatalf("TTL %v: %v left to retry, under %v, while renewing every %v rather than TTL/3", ttl, room, want, tm.renew)
		}
	}
}

// TestRenewCadenceFollowsTheOptions: RenewInterval overrides the cadence,
// and a RequestTimeout or SafetyMargin moves it, keeping the room.
func TestRenewCadenceFollowsTheOptions(t *testing.T) {
	t.Parallel()
	const ttl = 60 * time.Second
	timingsWith := func(opts ...Option) timings {
		t.Helper()
		o := defaultOptions()
		for _, opt := range opts {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		e := &Election{opts: o}
		tm, err := e.timings(ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	if tm := timingsWith(WithRenewInterval(10 * time.Second)); tm.renew != 10*time.Second {
		t.Fatalf("WithRenewInterval(10s): renews every %v", tm.renew)
	}
	// A margin of 20 s leaves a lease of 40 s: 40 − 15.25 = 24.75 s,
	// above half the lease (20 s).
	if tm := timingsWith(WithSafetyMargin(20 * time.Second)); tm.renew != 20*time.Second {
		t.Fatalf("WithSafetyMargin(20s): renews every %v, want 20s (half the lease)", tm.renew)
	}
	// A margin of a third of the TTL or more, and no RenewInterval: the
	// leader renews every half lease, not every TTL/3, which would leave
	// less than an interval to retry in and fail with an error naming an
	// option the user never set.
	for _, c := range []struct{ ttl, margin, renew time.Duration }{
		{10 * time.Second, 4 * time.Second, 3 * time.Second},
		{9 * time.Second, 3 * time.Second, 3 * time.Second},
		{60 * time.Second, 29 * time.Second, 15500 * time.Millisecond},
	} {
		o := defaultOptions()
		if err := WithSafetyMargin(c.margin)(&o); err != nil {
			t.Fatal(err)
		}
		tm, err := (&Election{opts: o}).timings(c.ttl)
		if err != nil || tm.renew != c.renew {
			t.Fatalf("WithSafetyMargin(%v) at TTL %v: renews every %v (%v), want %v", c.margin, c.ttl, tm.renew, err, c.renew)
		}
	}
	// Every margin the option accepts, at TTLs short and long: the default
	// cadence validates and leaves at least half the lease to retry in.
	for ttl := time.Second; ttl <= 10*time.Minute; ttl *= 3 {
		for margin := ttl / 10; margin < ttl/2; margin += ttl / 50 {
			o := defaultOptions()
			o.margin = margin
			tm, err := (&Election{opts: o}).timings(ttl)
			if err != nil || tm.renew > (ttl-margin)/2 {
				t.Fatalf("margin %v at TTL %v: renews every %v (%v), want at most half the lease", margin, ttl, tm.renew, err)
			}
		}
	}
	// TTL 30 s with a 2 s request timeout: room 10 + 2 + 0.25 s, so
	// 27 − 12.25 = 14.75 s, above half the lease (13.5 s).
	o := defaultOptions()
	if err := WithRequestTimeout(2 * time.Second)(&o); err != nil {
		t.Fatal(err)
	}
	e := &Election{opts: o}
	tm, err := e.timings(30 * time.Second)
	if err != nil || tm.renew != 13500*time.Millisecond {
		t.Fatalf("WithRequestTimeout(2s) at TTL 30s: renews every %v (%v), want 13.5s", tm.renew, err)
	}
	// A RenewInterval beyond half the lease is refused, as before.
	e = &Election{opts: defaultOptions()}
	e.opts.renewInterval = 28 * time.Second
	if _, err := e.timings(ttl); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("WithRenewInterval(28s) at TTL 60s: %v, want ErrInvalidOption", err)
	}
}
