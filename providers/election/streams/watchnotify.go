package streams

import (
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// watchNotifier is a KeyWatcher that calls a function, without blocking,
// each time it delivers an entry or ends (transport's hubWatch.Notify).
type watchNotifier interface {
	Notify(func())
}

// notifying returns w, made to call notify each time it delivers an entry
// or ends. A watcher that cannot is forwarded by a goroutine of its own,
// counted by wg, while it runs.
func notifying(w jetstream.KeyWatcher, wg *sync.WaitGroup, notify func()) jetstream.KeyWatcher {
	if n, ok := w.(watchNotifier); ok {
		n.Notify(notify)
		return w
	}
	f := &forwarded{KeyWatcher: w, c: make(chan jetstream.KeyValueEntry, 64)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(f.c)
		for ent := range w.Updates() {
			f.c <- ent
			notify()
		}
		notify()
	}()
	return f
}

// forwarded is a watcher whose deliveries notifying's goroutine forwards.
type forwarded struct {
	jetstream.KeyWatcher
	c chan jetstream.KeyValueEntry
}

// Updates returns the forwarded deliveries.
func (f *forwarded) Updates() <-chan jetstream.KeyValueEntry { return f.c }

// Err returns why the wrapped watch ended, if it tells.
func (f *forwarded) Err() error {
	if e, ok := f.KeyWatcher.(interface{ Err() error }); ok {
		return e.Err()
	}
	return nil
}

// poller is a watcher that hands its deliveries over without a channel of
// its own (transport's hubWatch.Poll).
type poller interface {
	Poll() (ent jetstream.KeyValueEntry, open, got bool)
}

// poll takes w's next delivery without waiting: got is false when it has
// none yet, and open false once it ended.
func poll(w jetstream.KeyWatcher) (ent jetstream.KeyValueEntry, open, got bool) {
	if p, ok := w.(poller); ok {
		return p.Poll()
	}
	select {
	case ent, open = <-w.Updates():
		return ent, open, true
	default:
		return nil, false, false
	}
}

// restartable reports whether w can be made again while it stays
// subscribed (a shared watch can), looking through forwarding.
func restartable(w jetstream.KeyWatcher) (interface{ Restart() }, bool) {
	if f, ok := w.(*forwarded); ok {
		w = f.KeyWatcher
	}
	r, ok := w.(interface{ Restart() })
	return r, ok
}
