package streams

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"github.com/conclave-io/conclave/backoff"
)

// timings are the durations an election derives from the bucket's TTL and
// its options.
type timings struct {
	ttl     time.Duration // bucket TTL: the broker expires a key this long after its last write
	margin  time.Duration // a leader's deadline is its last write's send time + ttl - margin
	renew   time.Duration // a leader renews this long after its last successful write's send time
	retry   time.Duration // a leader retries a failed renewal after about this long
	request time.Duration // bound on each request
	standby Backoff       // spaces out a standby's safety-net campaigns
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// outageRoom is the time a leader keeps, between a renewal falling due and
// its deadline, for the broker to come back: a restart, or the election of
// a new leader for the stream (5.2–5.9 s on the benchmark cluster).
const outageRoom = 10 * time.Second

// renewCadence is the default renew interval for a TTL, given the margin,
// request timeout and retry pause. It leaves from a renewal falling due to
// the deadline at least outageRoom + request + retry, so that a renewal
// lost as the broker goes away is retried after the outage and still lands
// in time. Short TTLs renew every TTL/3, long ones down to once per half
// lease (the most RenewInterval accepts, and what a margin of TTL/3 or
// more gives).
func renewCadence(ttl, margin, request, retry time.Duration) time.Duration {
	lease := ttl - margin
	room := outageRoom + request + retry
	return clamp(lease-room, ttl/3, lease/2)
}

func (e *Election) timings(ttl time.Duration) (timings, error) {
	o := e.opts
	t := timings{
		ttl:     ttl,
		margin:  ttl / 10,
		retry:   clamp(ttl/20, 10*time.Millisecond, 250*time.Millisecond),
		request: clamp(ttl/5, 200*time.Millisecond, 5*time.Second),
		standby: o.backoff,
	}
	if o.margin > 0 {
		t.margin = o.margin
	}
	t.request = cmp.Or(o.requestTimeout, t.request) // the options are > 0 when given
	t.renew = cmp.Or(o.renewInterval, renewCadence(ttl, t.margin, t.request, t.retry))
	if t.standby == nil {
		t.standby = defaultStandbyBackoff(ttl)
	}
	lease := ttl - t.margin
	switch {
	case t.margin >= ttl/2:
		return t, fmt.Errorf("%w: SafetyMargin %v must be below half the bucket TTL %v", ErrInvalidOption, t.margin, ttl)
	case t.renew > lease/2:
		return t, fmt.Errorf("%w: RenewInterval %v leaves no room to retry before the deadline: with TTL %v and margin %v it must be at most %v", ErrInvalidOption, t.renew, ttl, t.margin, lease/2)
	case t.request >= lease:
		return t, fmt.Errorf("%w: RequestTimeout %v must be below the TTL %v less the margin %v", ErrInvalidOption, t.request, ttl, t.margin)
	}
	return t, nil
}

// defaultStandbyBackoff doubles from 20ms to a quarter of the TTL: quick
// enough to catch an expiry the broker runs a few hundred milliseconds late,
// sparse enough that a wrong prediction costs little.
func defaultStandbyBackoff(ttl time.Duration) Backoff {
	if b, ok := standbyBackoffs.Load(ttl); ok {
		return b.(Backoff)
	}
	limit := max(ttl/4, 20*time.Millisecond)
	var steps []time.Duration
	for d := 20 * time.Millisecond; d < limit; d *= 2 {
		steps = append(steps, d)
	}
	steps = append(steps, limit)
	b, _ := standbyBackoffs.LoadOrStore(ttl, Backoff(backoff.Policy{Steps: steps}))
	return b.(Backoff)
}

// standbyBackoffs holds the default standby backoff of each TTL in use,
// shared by the process's candidates: a Policy is never changed.
var standbyBackoffs sync.Map
