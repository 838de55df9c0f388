package streams

import "sync"

// notifier runs user callbacks one at a time, in the order they were posted,
// on its own goroutine, so that the election never calls user code while
// holding a lock and never stalls its renewals behind a slow callback.
type notifier struct {
	mu      sync.Mutex
	queue   []notice
	closed  bool
	wake    chan struct{}
	stopped chan struct{}
}

type notice struct {
	fn   func()
	done chan struct{}
}

func newNotifier() *notifier {
	n := &notifier{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go n.run()
	return n
}

// post queues fn and returns a channel closed once fn has returned.
func (n *notifier) post(fn func()) <-chan struct{} {
	done := make(chan struct{})
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		close(done)
		return done
	}
	n.queue = append(n.queue, notice{fn: fn, done: done})
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	return done
}

// close runs what is queued, then stops; it returns once the goroutine has
// exited. It must not be called from a callback.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	<-n.stopped
}

func (n *notifier) run() {
	defer close(n.stopped)
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return
			}
			<-n.wake
			continue
		}
		next := n.queue[0]
		n.queue[0] = notice{}
		n.queue = n.queue[1:]
		n.mu.Unlock()
		if next.fn != nil {
			next.fn()
		}
		close(next.done)
	}
}
