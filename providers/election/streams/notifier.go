package streams

import "sync"

// notifier runs user callbacks one at a time, in the order posted, on a
// goroutine of its own while it has any to run: the election never calls
// user code holding a lock, nor stalls its renewals behind a slow callback.
// An idle notifier has no goroutine (a process has one per candidate).
type notifier struct {
	mu      sync.Mutex
	queue   []notice
	running bool // a goroutine is running the queue
	closed  bool
	wg      sync.WaitGroup
}

type notice struct {
	fn   func()
	done chan struct{}
}

func newNotifier() *notifier { return &notifier{} }

// post queues fn and returns a channel closed once fn has returned.
func (n *notifier) post(fn func()) <-chan struct{} {
	done := make(chan struct{})
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		close(done)
		return done
	}
	n.queue = append(n.queue, notice{fn: fn, done: done})
	if !n.running {
		n.running = true
		n.wg.Add(1)
		go n.run()
	}
	return done
}

// close lets what is queued run, then returns once no goroutine of the
// notifier runs; later posts run nothing. Not to be called from a callback.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
}

// run runs the queue until it is empty.
func (n *notifier) run() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			n.queue, n.running = nil, false
			n.mu.Unlock()
			return
		}
		next := n.queue[0]
		n.queue[0] = notice{}
		n.queue = n.queue[1:]
		n.mu.Unlock()
		next.fn()
		close(next.done)
	}
}
