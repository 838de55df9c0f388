package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/kvwatch"
)

// keyWatch is a campaign's watch of its key. The watch is an accelerator,
// never a gate: while there is none, or while a new one has not delivered
// the key's state, the campaign reads the key on its timers instead.
type keyWatch struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	// initial is true until the watch has delivered the key's current
	// state (the nil entry that ends its initial values).
	initial bool
	// sawInitial is true once an initial value arrived.
	sawInitial bool
	// lastEvent is when the watch last delivered anything, or was made.
	lastEvent time.Time

	retryAt time.Time // when to try again while there is no watch
	tries   int       // consecutive failures to make one
	// logged is the last failure logged at warning level: the same cause
	// is logged once, not once per try.
	logged string
	drains sync.WaitGroup
}

// working reports whether the watch is up and has delivered the key's state.
func (kw *keyWatch) working() bool { return kw.w != nil && !kw.initial }

// updates is the watch's channel, or nil (never ready) without a watch.
func (kw *keyWatch) updates() <-chan jetstream.KeyValueEntry {
	if kw.w == nil {
		return nil
	}
	return kw.w.Updates()
}

// initTimeout bounds a new watch's initial phase: one that has delivered
// nothing by then is stuck and is made again.
func initTimeout(tm timings) time.Duration { return max(2*tm.request, time.Second) }

// watchRetry is how long to wait before try n+1 at making a watch: doubling
// from 100ms to the TTL (at least 2s, at most 30s), with jitter. A broker
// that refuses consumers is refusing them to a fleet.
func watchRetry(tm timings, tries int) time.Duration {
	limit := clamp(tm.ttl, 2*time.Second, 30*time.Second)
	return jittered(min(100*time.Millisecond<<min(tries, 10), limit))
}

// ensureWatch makes a watch when there is none and one is due, and remakes a
// watch stuck in its initial phase.
func (c *campaigner) ensureWatch(now time.Time) {
	kw := &c.watch
	if kw.w != nil && kw.initial && now.Sub(kw.lastEvent) >= initTimeout(c.tm) {
		c.watchFailed(now, fmt.Errorf("watch delivered nothing within %v of being made", initTimeout(c.tm)))
		return
	}
	if kw.w != nil || now.Before(kw.retryAt) {
		return
	}
	timeout := c.requestTimeout(now)
	// The watch lives as long as its context, so it cannot carry a timeout:
	// cancel it instead if setting up takes too long.
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(timeout, cancel) // network time, not the election's clock
	w, err := c.store.Watch(ctx, c.e.key)
	if !timer.Stop() {
		if err == nil {
			kvwatch.StopInBackground(w, &c.watch.drains)
		}
		err = fmt.Errorf("watch not set up within %v: %w", timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		if !c.failed(err) {
			c.watchFailed(c.clock.Now(), err)
		}
		return
	}
	if kw.logged != "" {
		c.log.Infof("election %s: watching the key again after %d failed tries", c.e.key, kw.tries)
	}
	kw.w, kw.cancel, kw.initial, kw.sawInitial = w, cancel, true, false
	kw.lastEvent, kw.tries, kw.logged = c.clock.Now(), 0, ""
}

// watchFailed drops the watch, if any, and schedules another try with
// backoff, logging the cause once.
func (c *campaigner) watchFailed(now time.Time, err error) {
	kw := &c.watch
	c.stopWatch()
	kw.tries++
	kw.retryAt = now.Add(watchRetry(c.tm, kw.tries))
	if c.ctx.Err() != nil {
		return
	}
	var logged errLogged
	if msg := err.Error(); msg != kw.logged && !errors.As(err, &logged) {
		kw.logged = msg
		c.log.Warnf("election %s: cannot watch the key, campaigning on timers and retrying the watch with backoff: %v", c.e.key, err)
	} else {
		c.log.Debugf("election %s: cannot watch the key (try %d): %v", c.e.key, kw.tries, err)
	}
}

// watchEnded handles the watch ending on its own, as when the connection
// closes.
func (c *campaigner) watchEnded(now time.Time) {
	err := errors.New("the watch ended")
	if w, ok := c.watch.w.(interface{ Err() error }); ok {
		err = w.Err()
	}
	if c.failed(err) {
		c.stopWatch()
		return
	}
	c.watchFailed(now, err)
}

// restartWatch replaces a watch that seems to have missed changes. A
// shared watch is made again for all its subscribers, at most once per
// heartbeat, and stays subscribed.
func (c *campaigner) restartWatch(now time.Time) {
	if r, ok := c.watch.w.(interface{ restart() }); ok {
		r.restart()
		return
	}
	c.stopWatch()
	c.watch.retryAt = now
}

// stopWatch stops the watch and drains it in the background: the watcher
// blocks delivering into a full channel, and closes it only once stopped.
func (c *campaigner) stopWatch() {
	kw := &c.watch
	if kw.w == nil {
		return
	}
	w := kw.w
	kw.w = nil
	kvwatch.StopInBackground(w, &c.watch.drains)
	kw.cancel()
}

// onWatch takes in what the watch delivered. A nil entry marks the end of
// the initial values.
func (c *campaigner) onWatch(now time.Time, ent jetstream.KeyValueEntry) {
	kw := &c.watch
	kw.lastEvent = now
	if ent == nil {
		if kw.initial && !kw.sawInitial {
			c.observe(now, keyView{known: true, Entry: Entry{Key: c.e.key}, seenAt: now, readAt: now, confirmed: true})
		}
		kw.initial = false
		return
	}
	initial := kw.initial
	kw.sawInitial = kw.sawInitial || initial
	v := viewOf(ent, now, c.tm.ttl, !initial)
	v.confirmed = true
	c.observe(now, v)
}
