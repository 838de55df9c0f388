package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/keymsg"
)

// A feed is one consumer on the bucket's stream (filtered on a key, a
// prefix, a set of keys, or nothing) that a hub shares among its
// subscriptions. It keeps the latest message of each key that may still
// hold one, so that a subscription joining a running feed gets the key's
// state at once. Of a key nobody follows it forgets a delete or purge (the
// key is then absent) and a value older than the bucket's TTL lets it live.
//
// A feed outlives its consumer: one lost is made again from each key's last
// message (see lost), and while the bucket's stream is missing the feed
// waits for it with its subscribers attached (see remake). A bucket made
// again shows as a message found news at or below the revisions seen; the
// feed then follows the new bucket's revisions (see recreatedLocked).
type feed struct {
	hub    *watchHub
	filter string // the key, or "prefix.>", or for a set feed a description
	prefix string // set for a prefix's shared feed
	key    string // set for one key's feed
	set    bool   // a set feed: one consumer with a filter for each of its keys
	all    bool   // the feed of the whole bucket

	// under hub.mu
	subs     map[string]map[*hubWatch]struct{}
	last     map[string]lastMsg
	sweepAt  time.Time     // when to next forget the expired values of keys nobody follows
	keepFor  time.Duration // how long a value nobody follows is kept without a change (see start)
	seen     uint64        // the highest revision delivered
	newest   time.Time     // the latest write time (by the broker's clock) delivered
	starting bool          // a subscriber has begun making the consumer
	ready    bool          // the consumer has delivered the keys' current state
	ended    bool
	restarts time.Time       // when the feed was last made again
	gen      uint64          // counts the consumers made: errors of an older one are ignored
	remaking bool            // the consumer is being made again (restart or remake)
	tries    int             // consecutive tries to make a lost consumer again on a missing stream
	caught   uint64          // the latest generation that has delivered its keys' state
	retry    *time.Timer     // the next try to make the consumer on a missing stream
	keys     map[string]bool // a set feed's keys: true once a consumer made with one delivered its state
	genKeys  map[string]bool // the keys the current consumer was made with
	dirty    bool            // make the consumer again once the one being made is up

	srcMu    sync.Mutex
	src      *consumerSource
	ttl      time.Duration
	unadvise func() // stops the hub's advisories for this feed (see watchHub.followAdvisories)
}

// lastMsg is the latest message of a key, and when the feed got it.
type lastMsg struct {
	ent jetstream.KeyValueEntry
	at  time.Time
	// old marks a message of a bucket since made again: still the key's
	// state (the key's absence from the new bucket does not end its
	// leader's lease) until a message of the key in the new bucket replaces
	// it, whatever its revision.
	old bool
}

func (f *feed) add(s *hubWatch) {
	subs := f.subs[s.key]
	if subs == nil {
		subs = map[*hubWatch]struct{}{}
		f.subs[s.key] = subs
	}
	subs[s] = struct{}{}
	if f.coversLocked(s.key) {
		f.sendStateLocked(s)
	}
}

// sendStateLocked hands s its key's state: the latest message, if any,
// then nil.
func (f *feed) sendStateLocked(s *hubWatch) {
	if last, ok := f.last[s.key]; ok {
		s.sendLocked(last.ent)
	}
	s.sendLocked(nil)
}

// coversLocked reports whether the feed has delivered key's state, so that
// its subscribers get the key's changes.
func (f *feed) coversLocked(key string) bool {
	return f.ready && (!f.set || f.keys[key])
}

// filtersLocked returns the subjects the feed's consumer filters on and,
// for a set feed, the keys they cover.
func (f *feed) filtersLocked() ([]string, map[string]bool) {
	if !f.set {
		return []string{f.hub.subject(f.filter)}, nil
	}
	keys := make(map[string]bool, len(f.keys))
	subjects := make([]string, 0, len(f.keys))
	for key := range f.keys {
		keys[key] = true
		subjects = append(subjects, f.hub.subject(key))
	}
	slices.Sort(subjects)
	return subjects, keys
}

// joinLocked adds key to a set feed: a running consumer is made again with
// it, and the key's subscribers get its state once that one delivered it.
func (f *feed) joinLocked(key string) {
	if _, ok := f.keys[key]; ok {
		return
	}
	f.keys[key] = false
	if f.starting {
		f.remakeLocked()
	}
}

// leaveLocked drops key, which nobody follows any more, from a set feed.
// The consumer keeps its filter until keys join, or until it filters on
// more than twice the keys followed.
func (f *feed) leaveLocked(key string) {
	delete(f.keys, key)
	delete(f.last, key)
	if f.overFilteredLocked() && f.ready {
		f.remakeLocked()
	}
}

// overFilteredLocked reports whether the set feed's consumer filters on
// more than twice the keys it still has (and it has some).
func (f *feed) overFilteredLocked() bool {
	return len(f.keys) > 0 && len(f.genKeys) > 2*len(f.keys)
}

// remakeLocked makes the set feed's consumer again with its keys, once the
// one being made is up, so that keys joining and leaving on a slow broker
// cost one consumer a second, not one each.
func (f *feed) remakeLocked() {
	switch {
	case f.ended:
	case f.remaking:
		f.dirty = true
	default:
		f.remakeSoonLocked()
	}
}

// remakeSoonLocked makes the consumer again a second after it was last
// made, or at once.
func (f *feed) remakeSoonLocked() {
	f.remaking = true
	time.AfterFunc(max(time.Second-time.Since(f.restarts), 0), f.remake)
}

// forgetLocked drops the latest message of a key nobody follows when it is
// a delete or purge (the key is absent), or a value older than it can live.
func (f *feed) forgetLocked(key string, now time.Time) {
	last, ok := f.last[key]
	if !ok || len(f.subs[key]) > 0 {
		return
	}
	if last.ent.Operation() != jetstream.KeyValuePut || (f.keepFor > 0 && now.Sub(last.at) > f.keepFor) {
		delete(f.last, key)
	}
}

// sweepLocked forgets, at most once per keepFor, the keys nobody follows
// whose value has expired by now.
func (f *feed) sweepLocked(now time.Time) {
	if f.keepFor <= 0 || now.Before(f.sweepAt) {
		return
	}
	f.sweepAt = now.Add(f.keepFor)
	for key := range f.last {
		f.forgetLocked(key, now)
	}
}

// detachLocked unregisters f from its hub once it has no subscriber, and
// reports whether it did.
func (f *feed) detachLocked() bool {
	if f.ended || len(f.subs) > 0 {
		return false
	}
	f.ended = true
	h := f.hub
	switch {
	case f.set:
		h.setFeeds = slices.DeleteFunc(h.setFeeds, func(g *feed) bool { return g == f })
		for key := range f.keys {
			if h.setOf[key] == f {
				delete(h.setOf, key)
			}
		}
	case f.all:
		if h.allFeed == f {
			h.allFeed = nil
		}
	case f.prefix != "":
		if h.groupFeeds[f.prefix] == f {
			delete(h.groupFeeds, f.prefix)
		}
	case h.keyFeeds[f.key] == f:
		delete(h.keyFeeds, f.key)
	}
	return true
}

// start makes the feed's consumer. ctx bounds making it, not its life.
func (f *feed) start(ctx context.Context, ttl time.Duration) error {
	f.srcMu.Lock()
	defer f.srcMu.Unlock()
	if old := f.src; old != nil {
		f.src = nil
		old.stop()
	}
	f.ttl = ttl
	// The broker removes a value at most its TTL (and some lateness) after
	// it was written; twice leaves room for a TTL raised meanwhile. With no
	// TTL known, values are kept until they change. A subscriber told
	// wrongly that a key is free fails its write on the revision check.
	if ttl > 0 {
		f.hub.mu.Lock()
		f.keepFor = max(f.keepFor, 2*ttl+time.Second)
		f.hub.mu.Unlock()
	}
	src, err := f.startConsumer(ctx)
	if err != nil {
		return f.hub.noteLimit(err)
	}
	f.hub.mu.Lock()
	ended := f.ended
	f.hub.mu.Unlock()
	if ended {
		src.stop()
		return nil
	}
	f.src = src
	if f.unadvise == nil {
		f.unadvise = f.hub.followAdvisories()
	}
	return nil
}

// stopSource stops the feed's consumer for good, once the feed has ended.
func (f *feed) stopSource() {
	f.srcMu.Lock()
	src, unadvise := f.src, f.unadvise
	f.src, f.unadvise = nil, nil
	f.srcMu.Unlock()
	if unadvise != nil {
		unadvise()
	}
	if src != nil {
		src.stop()
	}
}

// streamReplaced makes the consumer again after the bucket's stream was
// deleted or made again (event): at once when it waits for a missing
// stream, after the one being made when one is, else as a lost one.
func (f *feed) streamReplaced(event string) {
	h := f.hub
	h.mu.Lock()
	switch {
	case f.ended:
	case f.retry != nil:
		if f.retry.Stop() {
			f.retry = nil
			go f.remake()
		}
	case f.remaking:
		f.dirty = true // the consumer being made may be on the stream just deleted
	default:
		gen := f.gen
		h.mu.Unlock()
		f.lost(gen, fmt.Errorf("the bucket's stream was %s", strings.ToLower(event)))
		return
	}
	h.mu.Unlock()
}

// restart makes the consumer again, at most once a second, for a
// subscriber that suspects it missed changes. Subscribers stay attached and
// get what the new consumer shows newer than what they had as a change.
func (f *feed) restart() {
	f.hub.mu.Lock()
	defer f.hub.mu.Unlock()
	if !f.ended && f.ready && !f.remaking && time.Since(f.restarts) >= time.Second {
		f.remakeSoonLocked()
	}
}

// lost makes again, at most once a second, the consumer of generation gen
// that the broker deleted or stopped answering for, from each key's last
// message: nats.go's ordered consumer would resume after the last sequence,
// which in a bucket made again skips the new messages until they pass the
// old revisions, and fails for good while the stream is missing.
func (f *feed) lost(gen uint64, err error) {
	h := f.hub
	h.mu.Lock()
	if f.ended || f.remaking || gen != f.gen {
		h.mu.Unlock()
		return
	}
	f.remakeSoonLocked()
	h.mu.Unlock()
	h.log.Debugf("election bucket %s: watch of %s lost its consumer (%v): making a new one", h.kv.Bucket(), f.filter, err)
}

// remake replaces the feed's consumer with one that starts from each
// key's last message; subscribers stay attached. While the bucket's stream
// is missing it tries again with backoff, so that subscribers keep what
// they know of their keys (see lastMsg.old). Any other failure ends the feed.
func (f *feed) remake() {
	h := f.hub
	h.mu.Lock()
	if f.ended {
		f.remaking = false
		h.mu.Unlock()
		return
	}
	f.restarts, f.retry = time.Now(), nil
	h.mu.Unlock()
	f.srcMu.Lock()
	ttl := f.ttl
	f.srcMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := f.start(ctx, ttl)
	cancel()
	h.mu.Lock()
	if errors.Is(err, jetstream.ErrStreamNotFound) && !f.ended {
		f.tries++
		wait := remakeRetry(ttl, f.tries)
		f.retry = time.AfterFunc(wait, f.remake)
		h.mu.Unlock()
		h.log.Debugf("election bucket %s: watch of %s: the bucket's stream is missing, trying again in %v", h.kv.Bucket(), f.filter, wait)
		return
	}
	f.remaking, f.tries = false, 0
	// Keys may have left while it was made (see foldWaitingLocked).
	if err == nil && (f.dirty || f.set && f.overFilteredLocked()) && !f.ended {
		f.dirty, f.remaking = false, true
		go f.remake()
	}
	h.mu.Unlock()
	if err != nil {
		h.end(f, fmt.Errorf("the watch's consumer could not be made again: %w", err))
	}
}

// remakeRetry is how long a feed whose bucket's stream is missing waits
// before try n+1 at making its consumer: doubling from 100ms to the TTL
// (at least 2s, at most 30s), less up to a quarter at random, as a campaign
// retries a watch.
func remakeRetry(ttl time.Duration, tries int) time.Duration {
	d := min(100*time.Millisecond<<min(tries, 10), clamp(ttl, 2*time.Second, 30*time.Second))
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// deliver takes in one message of the feed (or none); caughtUp says the
// consumer has now delivered its keys' current state.
func (f *feed) deliver(gen uint64, ent jetstream.KeyValueEntry, caughtUp bool) {
	h := f.hub
	h.mu.Lock()
	if f.ended {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	recreated, oldSeen := false, f.seen
	if ent != nil {
		h.delivered.Add(1)
		if f.recreatedLocked(ent) { // follow the new bucket's revisions
			recreated = true
			for key, last := range f.last {
				last.old = true
				f.last[key] = last
			}
			f.seen, f.newest = 0, time.Time{}
		}
		key := ent.Key()
		prev, ok := f.last[key]
		// A delete or purge of a key the feed holds nothing of, no newer
		// than it delivered, is a forgotten one replayed by a remade consumer.
		replay := !ok && ent.Operation() != jetstream.KeyValuePut && ent.Revision() <= f.seen && (!f.set || f.keys[key])
		f.seen = max(f.seen, ent.Revision())
		if at := ent.Created(); at.After(f.newest) {
			f.newest = at
		}
		if !replay && (!ok || prev.old || ent.Revision() > prev.ent.Revision()) {
			f.last[key] = lastMsg{ent: ent, at: now}
			if f.coversLocked(key) {
				for s := range f.subs[key] {
					s.sendLocked(ent)
				}
			}
			f.forgetLocked(key, now)
		}
	}
	f.sweepLocked(now)
	if caughtUp && gen == f.gen {
		f.markReadyLocked()
	}
	idle := f.detachLocked()
	h.mu.Unlock()
	if recreated {
		h.log.Warnf("election bucket %s: watch of %s: %s is at revision %d, written after every message seen up to revision %d: the bucket was made again; following its new revisions", h.kv.Bucket(), f.filter, ent.Key(), ent.Revision(), oldSeen)
	}
	if idle {
		go f.stopSource() // not here: deliver runs on the source's own goroutines
	}
}

// recreatedLocked reports whether ent belongs to a bucket made again (its
// revisions start again at 1) since the messages the feed remembers: it is
// another message (operation, value or write time) at the revision of the
// key's last one, or at or below the highest revision seen and news to the
// hub's comparator. Neither happens within one stream, whose consumers
// deliver each key's messages in order; an older message replayed by a
// remade consumer is neither, and is dropped.
func (f *feed) recreatedLocked(ent jetstream.KeyValueEntry) bool {
	if prev, ok := f.last[ent.Key()]; ok && !prev.old && prev.ent.Revision() == ent.Revision() {
		p := prev.ent
		return p.Operation() != ent.Operation() || !bytes.Equal(p.Value(), ent.Value()) || !p.Created().Equal(ent.Created())
	}
	seen := Position{Revision: f.seen, Written: f.newest}
	return ent.Revision() <= f.seen && f.hub.isNews(seen, Position{Revision: ent.Revision(), Written: ent.Created()})
}

// markReadyLocked notes that the current consumer has delivered its keys'
// state, and hands it to each subscriber waiting for it.
func (f *feed) markReadyLocked() {
	if f.caught == f.gen && f.ready {
		return
	}
	f.caught = f.gen
	wasReady := f.ready
	f.ready = true
	send := func(key string) {
		for s := range f.subs[key] {
			f.sendStateLocked(s)
		}
	}
	switch {
	case f.set:
		for key := range f.genKeys {
			if covered, ok := f.keys[key]; ok && !covered {
				f.keys[key] = true
				send(key)
			}
		}
	case !wasReady:
		for key := range f.subs {
			send(key)
		}
	}
}

// caughtUp reports whether the consumer of generation gen has delivered
// its keys' state, or no longer matters.
func (f *feed) caughtUp(gen uint64) bool {
	f.hub.mu.Lock()
	defer f.hub.mu.Unlock()
	return f.caught >= gen || f.gen != gen || f.ended
}

// consumerSource is a feed's ordered consumer.
type consumerSource struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the consumer and deletes it from the broker, as a KV watch
// does: many campaigns started and stopped must not pile up consumers.
func (c *consumerSource) stop() {
	c.cancel()
	c.cc.Stop()
	<-c.done
	deleteConsumer(c.js, c.stream, c.cons)
}

// deleteConsumer deletes cons from the broker, when the connection is up
// to ask, waiting a second at most.
func deleteConsumer(js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	if info := cons.CachedInfo(); info != nil && js.Conn().IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = js.DeleteConsumer(ctx, stream, info.Name)
	}
}

// startConsumer makes an ordered consumer on the feed's filter that starts
// with the last message of each key.
func (f *feed) startConsumer(ctx context.Context) (*consumerSource, error) {
	h := f.hub
	stream := "KV_" + h.kv.Bucket()
	h.mu.Lock()
	filters, keys := f.filtersLocked()
	h.mu.Unlock()
	// How often an idle feed hears from the broker: a lost consumer is made
	// again within about a TTL, and idle feeds cost little.
	hb := clamp(f.ttl/2, time.Second, 30*time.Second)
	cons, err := h.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    filters,
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: max(4*hb, time.Minute),
		// One try, not nats.go's default of retrying forever: its retries
		// hold a lock that stopping the consumer waits for (a feed stopped
		// meanwhile would hang and leak goroutines), and keep the feed
		// looking ready with no consumer. A failed try is handled by
		// consumeError; subscribers' campaigns watch again with backoff.
		MaxResetAttempts: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("making a consumer on %s: %w", f.describe(), err)
	}
	h.mu.Lock()
	f.gen++
	gen := f.gen
	f.genKeys = keys
	h.mu.Unlock()
	prefix := h.subject("")
	// taken is the consumer sequence of the latest message taken in (the
	// broker counts one delivered once sent, maybe long before).
	var taken atomic.Uint64
	cc, err := h.consume(cons, func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		key := strings.TrimPrefix(m.Subject(), prefix)
		ent := keymsg.EntryOf(h.kv.Bucket(), key, m.Data(), m.Headers(), md.Sequence.Stream, md.Timestamp)
		f.deliver(gen, ent, md.NumPending == 0)
		taken.Store(md.Sequence.Consumer) // delivered in order
	},
		// Two heartbeats per pull request, as nats.go requires, and at least 30s.
		jetstream.PullHeartbeat(hb), jetstream.PullExpiry(max(2*hb, 30*time.Second)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { f.consumeError(gen, err) }),
	)
	if err != nil {
		deleteConsumer(h.js, stream, cons)
		return nil, fmt.Errorf("consuming %s: %w", f.describe(), err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	src := &consumerSource{js: h.js, stream: stream, cons: cons, cc: cc, cancel: cancel,
		done: make(chan struct{})}
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		f.deliver(gen, nil, true)
	}
	// The initial state's last message may expire before it is delivered:
	// then the consumer's info says the state is complete, once the feed
	// has taken in every message the broker sent (some may still wait in
	// the connection's buffers, and without them a subscriber would take
	// its held key as gone). It is asked every second, then less often, so
	// that a fleet of feeds on a slow broker adds few requests.
	go func() {
		defer close(src.done)
		wait := time.Second
		t := time.NewTimer(wait)
		defer t.Stop()
		for !f.caughtUp(gen) {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			wait = min(2*wait, 10*time.Second)
			t.Reset(wait)
			ictx, cancel := context.WithTimeout(cctx, time.Second)
			info, err := cons.Info(ictx)
			cancel()
			if err == nil && info.NumPending == 0 && info.Delivered.Consumer <= taken.Load() {
				f.deliver(gen, nil, true)
			}
		}
	}()
	return src, nil
}

// consumeError handles an error of the ordered consumer of generation gen.
// A consumer deleted (alone or with its stream), silent, or that nats.go
// failed to make again is made again (see lost); a closed connection, or a
// consumer limit, ends the feed. Errors of a consumer replaced, or being
// replaced, change nothing.
func (f *feed) consumeError(gen uint64, err error) {
	h := f.hub
	h.mu.Lock()
	stale := gen != f.gen || f.remaking
	h.mu.Unlock()
	switch {
	case errors.Is(err, jetstream.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionClosed):
		go h.end(f, nats.ErrConnectionClosed)
	case stale:
		h.log.Debugf("election bucket %s: watch of %s: a replaced consumer: %v", h.kv.Bucket(), f.filter, err)
	case errors.Is(err, jetstream.ErrMaximumConsumersLimit):
		go h.end(f, h.noteLimit(err))
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		f.lost(gen, err)
	default:
		h.log.Debugf("election bucket %s: watch of %s: %v", h.kv.Bucket(), f.filter, err)
	}
}

// describe names what the feed follows, for logs and errors.
func (f *feed) describe() string {
	if f.set {
		return "a set of keys in " + f.hub.subject(">")
	}
	return f.hub.subject(f.filter)
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }
