package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// observer follows every election of the bucket through one watch on all
// its keys, as an operator's tool would, and keeps what the tables need.
// Times are the broker's timestamps of the messages (every process runs on
// this host, so they share its clock), which makes them independent of how
// late the watch delivers.
type observer struct {
	ttl   time.Duration
	names []string // the elections, in order

	mu      sync.Mutex
	keys    map[string]*keyState
	writes  map[string]int64 // messages per key, puts and deletes
	seen    int64            // messages delivered by the watch
	last    time.Time
	changes int      // a key written by a different leader than its previous writer
	overlap []string // takeovers that may have overlapped the previous leader
	fo      *failover
	werr    error // why the watch ended, if it did
}

// keyState is what the observer knows of one election.
type keyState struct {
	leader    string    // holder according to the latest message; "" after a release or removal
	lastPut   time.Time // broker time of the latest leader's write
	lastPutBy string    // who wrote it
	first     time.Time // broker time of the first leader's write
}

// failover tracks the elections that need a new write after a kill.
type failover struct {
	at      time.Time
	victim  string // identity whose elections need a new leader; "" = every election needs a new write
	pending map[string]bool
	took    map[string]time.Duration // kill → the resolving write
	late    []time.Duration          // the resolving write − (the previous write + TTL), with a victim
	changes int                      // leader changes at the start
}

// newObserver returns an observer for the elections names of a bucket
// with this TTL.
func newObserver(ttl time.Duration, names []string) *observer {
	return &observer{ttl: ttl, names: names, keys: map[string]*keyState{}, writes: map[string]int64{}}
}

// writeCounts returns how many messages the watch delivered per key so far.
func (o *observer) writeCounts() map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.writes)
}

// watch follows the bucket until ctx ends, with one watch on every key.
// It returns once the watch is established and its initial values are in.
func (o *observer) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching the election bucket: %w", err)
	}
	initial := make(chan struct{})
	go func() {
		defer w.Stop()
		var once sync.Once
		for ent := range w.Updates() {
			if ent == nil {
				once.Do(func() { close(initial) })
				continue
			}
			o.apply(ent)
		}
		o.mu.Lock()
		o.werr = fmt.Errorf("the watch ended: %w", context.Cause(ctx))
		o.mu.Unlock()
		once.Do(func() { close(initial) })
	}()
	select {
	case <-initial:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("watching the election bucket: no initial values within 30s")
	}
}

// apply records one message of the watch.
func (o *observer) apply(ent jetstream.KeyValueEntry) {
	e := streams.ReadEntry(ent)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen++
	o.writes[e.Key]++
	o.last = time.Now()
	ks := o.keys[e.Key]
	if ks == nil {
		ks = &keyState{}
		o.keys[e.Key] = ks
	}
	if e.State != streams.KeyHeld {
		ks.leader = "" // released or removed: no leader until the next write
		return
	}
	at := e.Written
	if ks.first.IsZero() {
		ks.first = at
	}
	if ks.lastPutBy != "" && e.Leader != ks.lastPutBy {
		o.changes++
		// The previous leader counts itself leader until at most its last
		// write + TTL − its safety margin (a tenth of the TTL). A new
		// leader's write before that, with no release between, means the
		// two may have overlapped (or the broker lost writes).
		if ks.leader != "" {
			if gap := at.Sub(ks.lastPut); gap < o.ttl-o.ttl/10 {
				o.overlap = append(o.overlap, fmt.Sprintf("%s: %s wrote %v after %s's last write, with no release between",
					e.Key, e.Leader, gap.Round(time.Millisecond), ks.lastPutBy))
			}
		}
	}
	if f := o.fo; f != nil && f.pending[e.Key] && at.After(f.at) && e.Leader != f.victim {
		delete(f.pending, e.Key)
		f.took[e.Key] = at.Sub(f.at)
		if f.victim != "" && ks.lastPutBy == f.victim {
			f.late = append(f.late, at.Sub(ks.lastPut.Add(o.ttl)))
		}
	}
	ks.leader, ks.lastPut, ks.lastPutBy = e.Leader, at, e.Leader
}

// firsts returns how many of the n elections have had a leader and the
// broker times of their first leaders' writes.
func (o *observer) firsts(n int) (int, []time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ts []time.Time
	for i := range n {
		if ks := o.keys[o.names[i]]; ks != nil && !ks.first.IsZero() {
			ts = append(ts, ks.first)
		}
	}
	return len(ts), ts
}

// leaders counts the elections each identity leads now, by the latest
// messages.
func (o *observer) leaders() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[string]int{}
	for _, ks := range o.keys {
		if ks.leader != "" {
			m[ks.leader]++
		}
	}
	return m
}

// counts returns the leader changes and possible overlaps so far.
func (o *observer) counts() (changes, overlaps int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes, len(o.overlap)
}

// overlaps returns the descriptions of possible overlaps, at most max.
func (o *observer) overlaps(max int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.overlap[:min(max, len(o.overlap))])
}

// startFailover begins tracking a kill at time at: with a victim, the
// elections it leads now, each until another identity writes it; without
// one, every election of the n, each until anyone writes it.
func (o *observer) startFailover(at time.Time, victim string, n int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := &failover{at: at, victim: victim, pending: map[string]bool{}, took: map[string]time.Duration{}, changes: o.changes}
	for i := range n {
		k := o.names[i]
		if ks := o.keys[k]; victim == "" || (ks != nil && ks.leader == victim) {
			f.pending[k] = true
		}
	}
	o.fo = f
	return len(f.pending)
}

// failoverState returns the failover's durations so far and how many
// elections still wait.
func (o *observer) failoverState() (took []time.Duration, pending int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fo == nil {
		return nil, 0
	}
	for _, d := range o.fo.took {
		took = append(took, d)
	}
	return took, len(o.fo.pending)
}

// failoverLateness returns, for each election taken over from the victim,
// how long after the earliest moment its key could expire (the victim's
// last write + TTL) the new leader wrote.
func (o *observer) failoverLateness() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fo == nil {
		return nil
	}
	return slices.Clone(o.fo.late)
}

// leaderless returns the elections among the n that have no live leader
// now: no message, a release or removal last, a leader not in live, or a
// leader whose last write is older than the TTL (the key has expired),
// judged at now.
func (o *observer) leaderless(n int, live map[string]bool, now time.Time) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for i := range n {
		k := o.names[i]
		ks := o.keys[k]
		switch {
		case ks == nil:
			out = append(out, k+" (never led)")
		case ks.leader == "":
			out = append(out, k+" (released or removed)")
		case !live[ks.leader]:
			out = append(out, fmt.Sprintf("%s (led by %s, not running)", k, ks.leader))
		case now.Sub(ks.lastPut) > o.ttl:
			out = append(out, fmt.Sprintf("%s (%s's last write %v ago: expired)", k, ks.leader, now.Sub(ks.lastPut).Round(time.Millisecond)))
		}
	}
	return out
}

// stats returns the messages the watch delivered and when it last did.
func (o *observer) stats() (int64, time.Time, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen, o.last, o.werr
}
