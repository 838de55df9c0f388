package streams

import "sync"

// turns runs functions on at most max goroutines, in the order given, each
// goroutine running one function after another: a burst of thousands holds
// max goroutines, as the runtime keeps the descriptor of every goroutine it
// ever made. What it runs should not wait long.
type turns struct {
	max int
	// onIdle, if set, is called, without the lock, each time the last
	// function running returns with none waiting.
	onIdle   func()
	mu       sync.Mutex
	inFlight int
	waiting  []func()
	served   uint64 // functions given to run so far
}

// run runs f now, on a goroutine, or after those waiting before it, and
// returns whether f waits.
func (t *turns) run(f func()) (waits bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.served++
	if t.inFlight < t.max {
		t.inFlight++
		go t.serve(f)
		return false
	}
	t.waiting = append(t.waiting, f)
	return true
}

// serve runs f, then those waiting, until none waits.
func (t *turns) serve(f func()) {
	for f != nil {
		f()
		f = t.next()
	}
	if t.onIdle != nil && t.idle() {
		t.onIdle()
	}
}

// next takes the next function waiting, or, when none waits, gives up its
// caller's place in flight and returns nil.
func (t *turns) next() func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiting) == 0 {
		t.waiting = nil // the array goes with the last one
		t.inFlight--
		return nil
	}
	f := t.waiting[0]
	t.waiting[0] = nil
	t.waiting = t.waiting[1:]
	return f
}

// idle reports whether nothing runs or waits.
func (t *turns) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlight == 0 && len(t.waiting) == 0
}
