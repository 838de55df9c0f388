package streams

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/jsapi"
)

// maxBeginsInFlight bounds the elections of one connection and bucket
// that begin (open the bucket, read its settings) at once (see turns).
// Queues are per connection and bucket because their elections share their
// fate while they wait (the broker unreachable, the bucket not made yet).
const maxBeginsInFlight = 64

// beginKey is the connection, JetStream API prefix and bucket elections
// begin on.
type beginKey struct {
	nc          *nats.Conn
	api, bucket string
}

// queuedBegin is an election to begin.
type queuedBegin struct {
	e           *Election
	caller, ctx context.Context
	finish      func(error)
	// stopWaiting ends the wait on caller's end; nil for one that began
	// without waiting. Set under begins.mu.
	stopWaiting func() bool
	// taken: begun, or left the queue; under begins.mu. One that left
	// stays in the queue until its turn comes, and is passed over then.
	taken bool
}

// begins holds the turns of each beginKey while its elections begin or
// wait to; forgetBegins deletes them once none does.
var begins = struct {
	mu sync.Mutex
	m  map[beginKey]*turns
}{m: map[beginKey]*turns{}}

// enqueueBegin begins e in its turn. ctx is caller's child, which Stop
// ends: when either ends first, e leaves the queue and finish is called
// with nil, as begin does then. The wait is on caller (see
// campaigner.launch); Stop calls leave itself.
func (e *Election) enqueueBegin(caller, ctx context.Context, finish func(error)) {
	k := beginKey{nc: connOf(e.js), bucket: e.opts.bucket}
	if e.js != nil {
		k.api = jsapi.Prefix(e.js)
	}
	qb := &queuedBegin{e: e, caller: caller, ctx: ctx, finish: finish}
	begins.mu.Lock()
	t := begins.m[k]
	if t == nil {
		t = &turns{max: maxBeginsInFlight}
		t.onIdle = func() { forgetBegins(k, t) }
		begins.m[k] = t
	}
	if !t.run(qb.begin) {
		begins.mu.Unlock()
		return
	}
	// qb.begin takes begins.mu first: it sees stopWaiting.
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

// forgetBegins deletes t, k's turns, once none of k's elections begins or
// waits to. Elections run on k's turns only under begins.mu while t is
// k's: none runs on t once it is deleted.
func forgetBegins(k beginKey, t *turns) {
	begins.mu.Lock()
	defer begins.mu.Unlock()
	if begins.m[k] == t && t.idle() {
		delete(begins.m, k)
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

// begin begins qb's election in its turn, unless it left the queue.
func (qb *queuedBegin) begin() {
	begins.mu.Lock()
	left := qb.taken
	qb.taken = true // under the lock: leave finds it taken
	stopWaiting := qb.stopWaiting
	begins.mu.Unlock()
	if left {
		return
	}
	if stopWaiting != nil {
		stopWaiting()
	}
	qb.e.mu.Lock()
	qb.e.waiting = nil
	qb.e.mu.Unlock()
	qb.e.begin(qb.caller, qb.ctx, qb.finish)
}
