package streams

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/jsapi"
)

// A process's elections begin (open their bucket and read its settings,
// then join the scheduler) a bounded number at a time per connection and
// bucket, each of the few goroutines beginning one election after another:
// a fleet's start launches tens of thousands at once, and the runtime keeps
// the descriptor of every goroutine it ever made. Elections of one bucket
// over one connection share their fate while they wait (the broker is
// unreachable, the bucket not made yet), so none waits behind another
// bucket's or connection's; one whose context ends while it waits ends at
// once.

// maxBeginsInFlight bounds the elections of one connection and bucket
// that begin at once.
const maxBeginsInFlight = 64

// beginKey is the connection, JetStream API (a domain or prefix) and
// bucket elections begin on.
type beginKey struct {
	nc          *nats.Conn
	api, bucket string
}

// beginQueue is the elections of one beginKey beginning, and waiting to.
type beginQueue struct {
	inFlight int
	waiting  []*queuedBegin
}

// queuedBegin is an election waiting to begin, as begin takes it.
type queuedBegin struct {
	e           *Election
	caller, ctx context.Context
	finish      func(error)
	stopWaiting func() bool // ends the wait on caller's end
	// taken: begun, or left the queue; under begins.mu. One that left
	// stays in the queue until its turn comes, and is passed over then.
	taken bool
}

var begins = struct {
	mu sync.Mutex
	m  map[beginKey]*beginQueue
}{m: map[beginKey]*beginQueue{}}

// enqueueBegin begins e now, on a goroutine, or once one of its
// connection and bucket's elections beginning now has begun. ctx is
// caller's child, which Stop ends: when either ends first, e leaves the
// queue (leave) and finish is called with nil, as begin does then. The
// wait is on caller, whose one map of children the process's elections
// share; Stop calls leave itself.
func (e *Election) enqueueBegin(caller, ctx context.Context, finish func(error)) {
	k := beginKey{nc: connOf(e.js), bucket: e.opts.bucket}
	if e.js != nil {
		k.api = jsapi.Prefix(e.js)
	}
	qb := &queuedBegin{e: e, caller: caller, ctx: ctx, finish: finish}
	begins.mu.Lock()
	q := begins.m[k]
	if q == nil {
		q = &beginQueue{}
		begins.m[k] = q
	}
	if q.inFlight < maxBeginsInFlight {
		q.inFlight++
		begins.mu.Unlock()
		go beginInTurn(k, qb)
		return
	}
	q.waiting = append(q.waiting, qb)
	qb.stopWaiting = context.AfterFunc(caller, qb.leave)
	begins.mu.Unlock()
	e.mu.Lock()
	e.waiting = qb
	stopped := e.stopped
	e.mu.Unlock()
	if stopped {
		qb.leave()
	}
}

// leave takes qb out of its queue, if it still waits there, and ends its
// election, whose finish runs on a goroutine of its own (ended may block;
// Stop returns at once).
func (qb *queuedBegin) leave() {
	begins.mu.Lock()
	left := !qb.taken
	qb.taken = true
	begins.mu.Unlock()
	if left {
		qb.stopWaiting()
		go qb.finish(nil)
	}
}

// beginInTurn begins qb, then the elections of k that wait, in order,
// until none does.
func beginInTurn(k beginKey, qb *queuedBegin) {
	for qb != nil {
		qb.e.mu.Lock()
		qb.e.waiting = nil
		qb.e.mu.Unlock()
		qb.e.begin(qb.caller, qb.ctx, qb.finish)
		qb = nextBegin(k)
	}
}

// nextBegin takes the next election of k waiting to begin, or, when none
// waits, gives up k's place in flight.
func nextBegin(k beginKey) *queuedBegin {
	begins.mu.Lock()
	defer begins.mu.Unlock()
	q := begins.m[k]
	for len(q.waiting) > 0 {
		qb := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		if len(q.waiting) == 0 {
			q.waiting = nil // the array goes with the last one
		}
		if qb.taken {
			continue // it left
		}
		qb.taken = true // under the lock: leave finds it taken
		qb.stopWaiting()
		return qb
	}
	q.inFlight--
	if q.inFlight == 0 {
		delete(begins.m, k)
	}
	return nil
}
