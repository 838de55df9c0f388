package streams

import "sync"

// turns runs functions at most max at a time, in the order given, each of
// its goroutines running one after another: a burst of thousands (a
// fleet's stewards opening as their keys are read) holds max goroutines,
// not one each, and the runtime keeps the descriptor of every goroutine it
// ever made. What it runs must not wait long: the others wait behind it.
type turns struct {
	max      int
	mu       sync.Mutex
	inFlight int
	waiting  []func()
}

// run runs f now, on a goroutine, or after those waiting before it.
func (t *turns) run(f func()) {
	t.mu.Lock()
	if t.inFlight < t.max {
		t.inFlight++
		t.mu.Unlock()
		go t.serve(f)
		return
	}
	t.waiting = append(t.waiting, f)
	t.mu.Unlock()
}

// serve runs f, then those waiting, until none waits.
func (t *turns) serve(f func()) {
	for f != nil {
		f()
		t.mu.Lock()
		f = nil
		if len(t.waiting) > 0 {
			f = t.waiting[0]
			t.waiting[0] = nil
			t.waiting = t.waiting[1:]
		} else {
			t.waiting = nil // the array goes with the last one
			t.inFlight--
		}
		t.mu.Unlock()
	}
}

// stewardOpens opens the process's stewards (subscriptions, the first
// announcement and pass), a few at a time.
var stewardOpens = &turns{max: 64}
