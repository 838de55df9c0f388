// Package kvwatch stops nats.go key-value watchers without leaking them.
//
// A jetstream.KeyWatcher delivers into a buffered channel from its
// subscription's goroutine and closes that channel only once it has
// stopped. A watcher that is stopped while nobody reads it can block for
// good on a full channel, holding its subscription goroutine and the
// watcher's lock, so every stop must be followed by a drain. The election,
// its observers, the shared feeds and the CLI all stop watchers here.
package kvwatch

import (
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Stop stops w and reads what it still delivers until it closes its
// channel. It returns once the watcher is done.
func Stop(w jetstream.KeyWatcher) {
	_ = w.Stop()
	for range w.Updates() {
	}
}

// StopInBackground stops w at once and drains it in a goroutine counted by
// wg, for callers that must not wait, such as an event loop that may be
// the watcher's only reader. Wait on wg to know every drain has ended.
func StopInBackground(w jetstream.KeyWatcher, wg *sync.WaitGroup) {
	_ = w.Stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range w.Updates() {
		}
	}()
}
