package streams

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/jsapi"
)

// maxBeginsInFlight bounds the elections that begin (open the bucket, read
// its settings) at once per beginKey: the elections of one connection, API
// prefix and bucket share their fate while they wait (the broker
// unreachable, the bucket not made yet).
const maxBeginsInFlight = 64

type beginKey struct {
	nc          *nats.Conn
	api, bucket string
}

// queuedBegin is an election to begin.
type queuedBegin struct {
	e           *Election
	caller, ctx context.Context
	finish      func(error)
	// Set under begins.mu. stopWaiting ends the wait on caller's end; nil for
	// one that began without waiting. taken: begun, or left the queue (one
	// that left is passed over when its turn comes).
	stopWaiting func() bool
	taken       bool
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
// waits to. Elections are given to t only under begins.mu while t is k's.
func forgetBegins(k beginKey, t *turns) {
	begins.mu.Lock()
	defer begins.mu.Unlock()
	if begins.m[k] == t && t.idle() {
		delete(begins.m, k)
	}
}

// take marks qb taken, and reports whether it was not yet: begun or left.
func (qb *queuedBegin) take() bool {
	begins.mu.Lock()
	defer begins.mu.Unlock()
	first := !qb.taken
	qb.taken = true
	return first
}

// leave takes qb out of its queue, if it still waits there, and ends its
// election, finishing on a goroutine of its own: Stop returns at once.
func (qb *queuedBegin) leave() {
	if qb.take() {
		qb.stopWaiting()
		go qb.finish(nil)
	}
}

// begin begins qb's election in its turn, unless it left the queue. It
// reads stopWaiting after take, which orders it after enqueueBegin's write.
func (qb *queuedBegin) begin() {
	if !qb.take() {
		return
	}
	if qb.stopWaiting != nil {
		qb.stopWaiting()
	}
	qb.e.mu.Lock()
	qb.e.waiting = nil
	qb.e.mu.Unlock()
	qb.e.begin(qb.caller, qb.ctx, qb.finish)
}
