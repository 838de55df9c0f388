package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotSent is what a request gets that waited its whole time for a turn
// at the broker and was never sent: its outcome is known (nothing was
// written), unlike a request that timed out on the wire.
var ErrNotSent = errors.New("not sent: the process's requests to the broker were at their limit until the request's time ran out")

// Priority orders a process's requests waiting for a turn at the broker.
type Priority int

const (
	// Routine requests are reads of keys.
	Routine Priority = iota
	// Writes are campaigns: they go before reads, so that an election
	// that read its key campaigns before the next ones read theirs.
	Writes
	// Urgent requests keep or hand on a held lease (renewals, releases).
	Urgent
)

// priorities are the classes of requests in the order they are served.
var priorities = [...]Priority{Urgent, Writes, Routine}

type priorityKey struct{}

// WithPriority returns ctx marking the requests made with it as p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// maxInFlight is how many requests (writes, deletes and key reads) one
// process sends a bucket over one connection at once. The broker stores
// writes one at a time, each synced to disk: more in flight only queue
// there until they time out, with an unknown outcome (a renewal that timed
// out ends its term). Waiting in the process keeps each request's time at
// the broker short, fails cleanly (ErrNotSent) when its time runs out
// before its turn, and lets renewals go first.
const maxInFlight = 64

// gate admits a process's requests to the broker, at most limit at a time,
// urgent ones first, each class in the order it came. A request whose turn
// comes with too little time left (turn.leastLeft) is not sent
// (ErrNotSent): it could time out there with its outcome unknown.
type gate struct {
	limit int

	mu       sync.Mutex
	inFlight int
	waiting  [len(priorities)][]*turn // by priority
	took     time.Duration            // a moving average of how long requests took at the broker
}

// turn is one request waiting at the gate.
type turn struct {
	deadline time.Time     // when its time runs out (zero: never)
	budget   time.Duration // its time left when it began to wait
	granted  chan struct{}
	done     bool // granted, refused or given up (under gate.mu)
	refused  bool // its turn came too late to be sent
}

// enter waits for a turn of ctx's priority (byDefault if it marks none)
// and returns the function that ends it; it fails with ErrNotSent (and
// ctx's error) when ctx ends first.
func (g *gate) enter(ctx context.Context, byDefault Priority) (func(), error) {
	p, ok := ctx.Value(priorityKey{}).(Priority)
	if !ok {
		p = byDefault
	}
	g.mu.Lock()
	ahead := 0
	for q := p; q < Priority(len(priorities)); q++ {
		ahead += len(g.waiting[q])
	}
	if g.inFlight < g.limit && ahead == 0 {
		g.inFlight++
		g.mu.Unlock()
		return g.leaveFunc(), nil
	}
	t := &turn{granted: make(chan struct{})}
	t.deadline, _ = ctx.Deadline()
	t.budget = time.Until(t.deadline)
	g.waiting[p] = append(g.waiting[p], t)
	g.mu.Unlock()
	select {
	case <-t.granted:
		if t.refused {
			return nil, fmt.Errorf("%w: %w", ErrNotSent, context.DeadlineExceeded)
		}
		return g.leaveFunc(), nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if t.done && !t.refused { // granted meanwhile: hand the turn on
			g.inFlight--
			g.grantLocked()
		} else {
			t.done = true
		}
		return nil, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	}
}

// leastLeft is the least time left a turn is sent with: a quarter of its
// budget, or twice what requests took lately but at most half its budget,
// so that a slow broker does not make the gate refuse every request that
// had to wait, renewals included.
func (t *turn) leastLeft(took time.Duration) time.Duration {
	return max(t.budget/4, min(2*took, t.budget/2))
}

// leaveFunc returns the function that ends a turn granted now: it notes
// how long the request took, and grants the next turn waiting.
func (g *gate) leaveFunc() func() {
	began := time.Now()
	return func() {
		took := time.Since(began)
		g.mu.Lock()
		defer g.mu.Unlock()
		g.took += (took - g.took) / 8
		g.inFlight--
		g.grantLocked()
	}
}

func (g *gate) grantLocked() {
	for g.inFlight < g.limit {
		var t *turn
		for _, p := range priorities {
			for t == nil && len(g.waiting[p]) > 0 {
				t = g.waiting[p][0]
				g.waiting[p][0] = nil
				g.waiting[p] = g.waiting[p][1:]
				if t.done { // given up
					t = nil
				}
			}
		}
		if t == nil {
			return
		}
		t.done = true
		if !t.deadline.IsZero() && time.Until(t.deadline) < t.leastLeft(g.took) {
			t.refused = true
			close(t.granted)
			continue
		}
		g.inFlight++
		close(t.granted)
	}
}
