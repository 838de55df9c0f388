package streams

import (
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// notifying returns w, made to call notify, without blocking, each time it
// delivers an entry or ends. A watcher that cannot (as transport's
// hubWatch.Notify does) is forwarded by a goroutine counted by wg.
func notifying(w jetstream.KeyWatcher, wg *sync.WaitGroup, notify func()) jetstream.KeyWatcher {
	if n, ok := w.(interface{ Notify(func()) }); ok {
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

func (f *forwarded) Updates() <-chan jetstream.KeyValueEntry { return f.c }

// Err returns why the wrapped watch ended, if it tells.
func (f *forwarded) Err() error {
	if e, ok := f.KeyWatcher.(interface{ Err() error }); ok {
		return e.Err()
	}
	return nil
}

// poll takes w's next delivery without waiting (through transport's
// hubWatch.Poll if w has it): got is false when it has none yet, and open
// false once it ended.
func poll(w jetstream.KeyWatcher) (ent jetstream.KeyValueEntry, open, got bool) {
	if p, ok := w.(interface {
		Poll() (jetstream.KeyValueEntry, bool, bool)
	}); ok {
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
