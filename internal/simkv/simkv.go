// Package simkv is a deterministic model of the election bucket
// (CHORIA_LEADER_ELECTION): a NATS JetStream key-value bucket with history 1,
// a TTL (the stream's MaxAge) and, optionally, per-message TTLs, written the
// way Conclave's election provider writes it (compare-and-swap publishes,
// release markers with a payload, direct reads of a key's latest message
// including markers) and followed by KV watches as nats.go delivers them.
//
// It serves simulators that run many election candidates in one goroutine
// on simulated time: it starts no goroutine, reads no clock and uses no
// global random source. Every method takes the simulated true time now and
// first applies everything due by then (expiries, and the arrivals and
// resets of watches when SetWatchLag or SetWatchReset is in use); now must
// not go backwards. What the simulator wants random (how late the broker's
// MaxAge expiry runs, how long a message takes to reach a watch, when a
// watch of a removed bucket recovers) it passes in as functions, which the
// bucket calls a fixed number of times in a fixed order. By default there
// is no lateness and no lag, and watches of a removed bucket end at once.
//
// conformance_test.go holds the model to a real nats-server (the one
// go.mod names, with nats.go's jetstream package as the client): it runs
// the same scripted operations against an in-process server and against a
// Bucket and compares what each returns. The comments below say where the
// real server behaves in a way one might not expect (skipped watch
// messages, watches of a removed bucket, the order of a write's checks,
// per-message TTLs in whole seconds and capped by MaxAge, a lowered TTL
// removing old messages at once); the model follows the server there.
package simkv

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Op is what a message of a key does, as its KV-Operation header says.
type Op int

const (
	// Put is a value.
	Put Op = iota
	// Delete is a delete marker (KV-Operation: DEL); the election writes
	// them with a payload to mark a release.
	Delete
	// Purge is a purge marker (KV-Operation: PURGE), as kv.Purge writes.
	Purge
)

// String returns the op as the KV-Operation header spells it ("PUT" for
// a value, which carries no header).
func (o Op) String() string {
	switch o {
	case Put:
		return "PUT"
	case Delete:
		return "DEL"
	case Purge:
		return "PURGE"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Msg is a key's message, as a KV watch or a direct get of the stream
// returns it. Its Value is shared with the bucket: do not modify it.
type Msg struct {
	Key      string
	Value    []byte
	Op       Op
	Revision uint64
	// Written is when the message was stored (the stream's timestamp).
	Written time.Time
	// TTL is the message's own TTL (its Nats-TTL header) in whole
	// seconds, 0 for none. A direct get shows it; a KV watch of nats.go
	// does not hand headers on.
	TTL time.Duration
}

var (
	// ErrWrongRevision is the failure of a compare-and-swap: the key's
	// latest message does not have the expected revision (the server's
	// "wrong last sequence", JetStream error 10071, or 10164 on replicated
	// streams). Errors wrap it with the key's actual latest revision.
	ErrWrongRevision = errors.New("simkv: wrong last sequence for the key")
	// ErrNoBucket is every operation's error between Remove and Recreate.
	// The server answers differently per call: a publish gets no response
	// from the stream (no responders), a direct get no responders, a stream
	// info "stream not found".
	ErrNoBucket = errors.New("simkv: the bucket does not exist")
	// ErrMsgTTLDisabled refuses a write with a per-message TTL to a bucket
	// that does not allow them (JetStream error 10166).
	ErrMsgTTLDisabled = errors.New("simkv: per-message TTL is disabled")
	// ErrInvalidMsgTTL refuses a per-message TTL under one second
	// (JetStream error 10165).
	ErrInvalidMsgTTL = errors.New("simkv: invalid per-message TTL")
)

// stored is a key's latest message with what decides when it expires.
type stored struct {
	msg Msg
	// late is how late MaxAge expiry of it runs, fixed when it was stored.
	late time.Duration
}

// Bucket is the simulated bucket. Its zero value is not usable; call New.
type Bucket struct {
	exists      bool
	ttl         time.Duration // MaxAge; 0: none
	allowMsgTTL bool
	created     time.Time
	lastRev     uint64 // the stream's last sequence
	keys        map[string]*stored

	watchers  []*Watcher // live watches, in the order they were made
	silent    []*Watcher // watches of a removed bucket waiting for their reset
	flights   flights    // messages on their way to watches
	flightSeq uint64
	nextWatch uint64

	lateness   func(rev uint64) time.Duration
	watchLag   func() time.Duration
	watchReset func() time.Duration
}

// New makes an empty bucket created at now, with MaxAge ttl (0: none);
// allowMsgTTL says whether writes may carry a per-message TTL (the
// stream's AllowMsgTTL). Its first revision is 1, as for a bucket made
// with the KV API.
func New(now time.Time, ttl time.Duration, allowMsgTTL bool) *Bucket {
	b := &Bucket{}
	b.create(now, ttl, allowMsgTTL)
	return b
}

func (b *Bucket) create(now time.Time, ttl time.Duration, allowMsgTTL bool) {
	b.exists, b.ttl, b.allowMsgTTL, b.created = true, ttl, allowMsgTTL, now
	b.lastRev = 0
	b.keys = map[string]*stored{}
}

// SetLateness sets how late MaxAge expiry of the message with revision rev
// runs. The real broker's MaxAge timer runs late: it is re-armed no sooner
// than 250 ms ahead and compares against a clock that ticks every 100 ms,
// so a message outlives its MaxAge by up to a few hundred milliseconds
// (allow about 1 s), where per-message TTL expiry is within a few
// milliseconds and is modelled as exact. The default is 0. f is called
// exactly once for each message stored after the call, when it is stored,
// so a seeded f gives the same expiries run after run; negative results
// count as 0.
func (b *Bucket) SetLateness(f func(rev uint64) time.Duration) { b.lateness = f }

// SetWatchLag sets how long after a message is stored a watch's consumer
// on the server gets to it (for the message a watch starts on, or resumes
// on after SetWatchReset, how long after the start). The default, nil f,
// is no lag: every message reaches every watch of its key.
//
// With a lag, a watch can miss messages, as real ones do. The server's
// consumer of a kv.Watch sends the key's messages asynchronously, and a
// message that is gone by the time it gets to it (replaced by the next
// write, since history 1 keeps one message per key, or purged, vanished
// or expired) is never sent: a release marker followed at once by a new
// write can reach a watch as the write alone. And since nats.go ends a
// watch's initial values after the first message it receives, a watch
// whose starting message is replaced before it is sent delivers the
// replacing message first, then the end-of-initial mark; if nothing
// replaced it, the mark waits for the key's next write.
//
// f is called once for each message and live watch of its key when the
// message is stored, in the order the watches were made; a watch delivers
// in revision order, so its delivery times never go back.
func (b *Bucket) SetWatchLag(f func() time.Duration) { b.watchLag = f }

// SetWatchReset makes watches of a removed bucket behave as nats.go's KV
// watches do instead of ending at once (the default, nil f).
//
// A real kv.Watch of a bucket that is deleted does not end: its ordered
// consumer is gone with the stream, so it delivers nothing, and its
// channel stays open until the client's activity check (every 10 s from
// the watch's start, looking for the server's heartbeats, sent every 5 s)
// finds a whole period without any: about 5 to 20 s after the removal. The
// client then makes a new consumer starting at the stream sequence after
// the last one the watch delivered. If the bucket is missing at that
// moment, the watch ends (its channel closes). If it was made again
// meanwhile, the watch carries on in the new bucket but delivers only
// messages whose revision is above the last one it delivered: first the
// key's latest message if its revision is that high, then each new one
// that is, and no second end-of-initial mark. Since a recreated bucket's
// revisions start again at 1, such a watch stays silent until the new
// bucket's revisions pass the old ones.
//
// With f set, Remove makes each live watch silent and calls f once per
// watch, in the order the watches were made, for how long after the
// removal it resets; the reset happens at the first call with now at or
// after that time (Advance makes it happen without an operation).
func (b *Bucket) SetWatchReset(f func() time.Duration) { b.watchReset = f }

// Advance applies everything due by now without doing anything else.
func (b *Bucket) Advance(now time.Time) { b.advance(now) }

// expiry returns when s is removed.
func (b *Bucket) expiry(s *stored) (time.Time, bool) {
	var at time.Time
	ok := false
	if b.ttl > 0 {
		at, ok = s.msg.Written.Add(b.ttl+s.late), true
	}
	// A per-message TTL longer than MaxAge does not keep a message: MaxAge
	// removes it (checked on the server: a 5 s TTL with a 2 s MaxAge is
	// gone after 2 s).
	if s.msg.TTL > 0 {
		if t := s.msg.Written.Add(s.msg.TTL); !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// advance applies, in time order, every delivery, expiry and watch reset
// due by now. At the same instant deliveries come first (in the order they
// were scheduled), then expiries (older revisions first), then resets (in
// the order the watches were made).
func (b *Bucket) advance(now time.Time) {
	for {
		var (
			at    time.Time
			found bool
			what  int // 1: delivery, 2: expiry, 3: reset
			key   string
			rev   uint64
			wi    int
		)
		for len(b.flights) > 0 && !b.flights[0].live() {
			heap.Pop(&b.flights)
		}
		if len(b.flights) > 0 && !b.flights[0].at.After(now) {
			at, found, what = b.flights[0].at, true, 1
		}
		for k, s := range b.keys {
			t, ok := b.expiry(s)
			if !ok || t.After(now) {
				continue
			}
			if !found || t.Before(at) || (what == 2 && t.Equal(at) && s.msg.Revision < rev) {
				at, found, what, key, rev = t, true, 2, k, s.msg.Revision
			}
		}
		for i, w := range b.silent {
			if !w.resetAt.After(now) && (!found || w.resetAt.Before(at)) {
				at, found, what, wi = w.resetAt, true, 3, i
			}
		}
		switch {
		case !found:
			return
		case what == 1:
			f := heap.Pop(&b.flights).(*flight)
			f.w.inflight--
			if s := b.keys[f.w.key]; s != nil && s.msg.Revision == f.rev {
				f.w.deliver(s.msg)
			}
		case what == 2:
			// Expiry is silent: no marker, nothing to watches.
			delete(b.keys, key)
		default:
			w := b.silent[wi]
			b.silent = slices.Delete(b.silent, wi, wi+1)
			b.reset(w, at)
		}
	}
}

// reset is the moment a silent watch makes its new consumer.
func (b *Bucket) reset(w *Watcher, at time.Time) {
	if !b.exists {
		w.ended = true
		return
	}
	w.minRev = w.last + 1
	// Keep the live watches in the order they were made.
	i := len(b.watchers)
	for i > 0 && b.watchers[i-1].id > w.id {
		i--
	}
	b.watchers = slices.Insert(b.watchers, i, w)
	if s := b.keys[w.key]; s != nil {
		b.send(w, s.msg, at)
	}
}

// send starts m, stored or current at now, on its way to w.
func (b *Bucket) send(w *Watcher, m Msg, now time.Time) {
	if m.Revision < w.minRev {
		return // the watch's consumer starts above it
	}
	var lag time.Duration
	if b.watchLag != nil {
		lag = max(b.watchLag(), 0)
	}
	at := now.Add(lag)
	if at.Before(w.lastAt) {
		at = w.lastAt
	}
	w.lastAt = at
	if w.inflight == 0 && !at.After(now) {
		w.deliver(m)
		return
	}
	w.inflight++
	b.flightSeq++
	heap.Push(&b.flights, &flight{at: at, seq: b.flightSeq, w: w, epoch: w.epoch, rev: m.Revision})
}

// Put stores value under key if the key's latest message (markers
// included) has revision expect (0: the key has no message at all), like a
// publish with Nats-Expected-Last-Subject-Sequence, and returns the new
// revision. msgTTL > 0 gives the message its own TTL (the Nats-TTL header);
// the server counts it in whole seconds, dropping the fraction (1.5 s
// expires after 1 s).
//
// The server checks in this order, and so does Put: a TTL of a second or
// more on a bucket that does not allow TTLs is refused with
// ErrMsgTTLDisabled before the revision is checked; then the revision;
// then a TTL under a second is refused with ErrInvalidMsgTTL (whether or
// not the bucket allows TTLs: the server reads it as no TTL until then).
func (b *Bucket) Put(now time.Time, key string, value []byte, expect uint64, msgTTL time.Duration) (uint64, error) {
	b.advance(now)
	if !b.exists {
		return 0, ErrNoBucket
	}
	if msgTTL >= time.Second && !b.allowMsgTTL {
		return 0, ErrMsgTTLDisabled
	}
	if err := b.check(key, expect); err != nil {
		return 0, err
	}
	if msgTTL > 0 && msgTTL < time.Second {
		return 0, ErrInvalidMsgTTL
	}
	if msgTTL < 0 {
		msgTTL = 0 // nats.go sends no TTL header
	}
	return b.store(now, key, clone(value), Put, msgTTL.Truncate(time.Second)), nil
}

// Delete writes a delete marker (KV-Operation: DEL) carrying payload, with
// the same revision check as Put, and returns its revision.
func (b *Bucket) Delete(now time.Time, key string, expect uint64, payload []byte) (uint64, error) {
	b.advance(now)
	if !b.exists {
		return 0, ErrNoBucket
	}
	if err := b.check(key, expect); err != nil {
		return 0, err
	}
	return b.store(now, key, clone(payload), Delete, 0), nil
}

// Purge writes a purge marker as kv.Purge does (KV-Operation: PURGE, with a
// rollup of the key that removes its earlier messages), without a revision
// check, and returns its revision; 0 when the bucket does not exist.
func (b *Bucket) Purge(now time.Time, key string) uint64 {
	b.advance(now)
	if !b.exists {
		return 0
	}
	return b.store(now, key, nil, Purge, 0)
}

// Vanish removes the key's messages without a marker, as `nats stream purge
// --subject` does. Revisions do not move (the stream keeps its last
// sequence) and watches see nothing.
func (b *Bucket) Vanish(now time.Time, key string) {
	b.advance(now)
	if b.exists {
		delete(b.keys, key)
	}
}

// Latest returns the key's latest message, markers included, or nil when it
// has none, as a direct get of the stream's last message for the key's
// subject does.
func (b *Bucket) Latest(now time.Time, key string) (*Msg, error) {
	b.advance(now)
	if !b.exists {
		return nil, ErrNoBucket
	}
	s := b.keys[key]
	if s == nil {
		return nil, nil
	}
	m := s.msg
	return &m, nil
}

// Status returns the bucket's TTL (MaxAge) and when its stream was created.
func (b *Bucket) Status(now time.Time) (ttl time.Duration, created time.Time, err error) {
	b.advance(now)
	if !b.exists {
		return 0, time.Time{}, ErrNoBucket
	}
	return b.ttl, b.created, nil
}

// AllowsMsgTTL reports whether writes may carry a per-message TTL; false
// when the bucket does not exist.
func (b *Bucket) AllowsMsgTTL(now time.Time) bool {
	b.advance(now)
	return b.exists && b.allowMsgTTL
}

// SetTTL changes MaxAge (0: none). As on the server, it applies to the
// messages already stored, from their Written time, in both directions: a
// raised TTL keeps a stored message longer. The server runs its expiry
// at the update, so a message already older than the new TTL is removed at
// once, without lateness. It does nothing when the bucket does not exist.
func (b *Bucket) SetTTL(now time.Time, ttl time.Duration) {
	b.advance(now)
	if !b.exists {
		return
	}
	b.ttl = ttl
	if ttl <= 0 {
		return
	}
	for k, s := range b.keys {
		if !s.msg.Written.Add(ttl).After(now) {
			delete(b.keys, k)
		}
	}
	b.advance(now)
}

// Remove deletes the bucket with everything in it. Its watches end (see
// SetWatchReset for what real ones do instead). It does nothing when the
// bucket does not exist.
func (b *Bucket) Remove(now time.Time) {
	b.advance(now)
	if !b.exists {
		return
	}
	b.exists = false
	b.keys = nil
	for _, w := range b.watchers {
		// The watch's consumer is gone, with what it had yet to send.
		w.epoch++
		w.inflight = 0
		if b.watchReset == nil {
			w.ended = true
			continue
		}
		w.resetAt = now.Add(max(b.watchReset(), 0))
		b.silent = append(b.silent, w)
	}
	b.watchers = nil
}

// Recreate makes the bucket again, empty, at now, as `nats kv add` after
// `nats kv rm` does: revisions start again at 1 and its creation time is
// now. (Conclave's broker makes the bucket with a first revision taken from
// the clock instead, so that its revisions pass any earlier bucket's; the
// model does not do that.) A bucket that still exists is removed first.
func (b *Bucket) Recreate(now time.Time, ttl time.Duration, allowMsgTTL bool) {
	b.advance(now)
	if b.exists {
		b.Remove(now)
	}
	b.create(now, ttl, allowMsgTTL)
}

// Watch follows key as a KV watcher of nats.go does (kv.Watch(ctx, key)):
// the key's latest message first if it has one (markers included), then an
// end-of-initial mark, then each new message of the key as it is stored
// (with SetWatchLag: as it reaches the watch, if it is still there).
// Expiries, Vanish and SetTTL deliver nothing. Deliveries queue in the
// Watcher without bound until the simulator takes them (a real watch
// buffers 256 entries and then holds up its subscription; the model does
// not).
func (b *Bucket) Watch(now time.Time, key string) (*Watcher, error) {
	b.advance(now)
	if !b.exists {
		return nil, ErrNoBucket
	}
	b.nextWatch++
	w := &Watcher{b: b, key: key, id: b.nextWatch}
	b.watchers = append(b.watchers, w)
	if s := b.keys[key]; s != nil {
		b.send(w, s.msg, now)
	} else {
		w.initDone = true
		w.queue = append(w.queue, Delivery{InitialDone: true})
	}
	return w, nil
}

// check is the compare-and-swap of a write.
func (b *Bucket) check(key string, expect uint64) error {
	var last uint64
	if s := b.keys[key]; s != nil {
		last = s.msg.Revision
	}
	if last != expect {
		return fmt.Errorf("%w: %q is at revision %d, not %d", ErrWrongRevision, key, last, expect)
	}
	return nil
}

// store writes a message of key, replacing the key's previous one (history
// 1), and hands it to the key's watches.
func (b *Bucket) store(now time.Time, key string, value []byte, op Op, msgTTL time.Duration) uint64 {
	b.lastRev++
	s := &stored{
		msg: Msg{Key: key, Value: value, Op: op, Revision: b.lastRev, Written: now, TTL: msgTTL},
	}
	if b.lateness != nil {
		s.late = max(b.lateness(b.lastRev), 0)
	}
	b.keys[key] = s
	for _, w := range b.watchers {
		if w.key == key {
			b.send(w, s.msg, now)
		}
	}
	return b.lastRev
}

func clone(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append([]byte{}, v...)
}

// Delivery is what a watch delivers: a message, or the nil entry that ends
// the initial values (InitialDone).
type Delivery struct {
	Msg         *Msg
	InitialDone bool
}

// Watcher is a watch of one key. Deliveries queue in it until taken with
// Next.
type Watcher struct {
	b     *Bucket
	key   string
	id    uint64
	queue []Delivery
	head  int
	// initDone is whether the end-of-initial mark is queued.
	initDone bool
	// last is the highest revision delivered: the stream sequence the
	// watch's consumer sent last. minRev is the lowest revision it sends,
	// set when it resets after a removal.
	last, minRev uint64
	// lastAt is when the last message sent to it arrives; inflight counts
	// the messages on their way, and epoch tells them from those of a
	// consumer that is gone.
	lastAt   time.Time
	inflight int
	epoch    uint64
	resetAt  time.Time
	ended    bool
	stopped  bool
}

// deliver queues m, and after the watch's first message the end of its
// initial values.
func (w *Watcher) deliver(m Msg) {
	w.queue = append(w.queue, Delivery{Msg: &m})
	w.last = max(w.last, m.Revision)
	if !w.initDone {
		w.initDone = true
		w.queue = append(w.queue, Delivery{InitialDone: true})
	}
}

// Key returns the key the watch follows.
func (w *Watcher) Key() string { return w.key }

// Pending returns how many deliveries are queued.
func (w *Watcher) Pending() int { return len(w.queue) - w.head }

// Next pops the oldest queued delivery; false when none is queued.
func (w *Watcher) Next() (Delivery, bool) {
	if w.head == len(w.queue) {
		return Delivery{}, false
	}
	d := w.queue[w.head]
	w.queue[w.head] = Delivery{}
	w.head++
	if w.head == len(w.queue) {
		w.queue, w.head = w.queue[:0], 0
	}
	return d, true
}

// Ended reports whether the watch ended because the bucket was removed
// (at once, or at its reset when SetWatchReset is in use and the bucket
// was missing then): nothing more is queued after what is queued already.
func (w *Watcher) Ended() bool { return w.ended }

// Stop ends the watch: nothing more is queued. What is queued stays
// readable, as entries buffered in a stopped nats.go watcher's channel do.
func (w *Watcher) Stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	w.b.watchers = without(w.b.watchers, w)
	w.b.silent = without(w.b.silent, w)
}

func without(ws []*Watcher, w *Watcher) []*Watcher {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

// flight is a message on its way to a watch.
type flight struct {
	at    time.Time
	seq   uint64
	w     *Watcher
	epoch uint64
	rev   uint64
}

// live reports whether the flight's watch still waits for it.
func (f *flight) live() bool { return !f.w.stopped && f.w.epoch == f.epoch }

// flights is a heap of flights by arrival, then by when they were sent.
type flights []*flight

func (h flights) Len() int { return len(h) }
func (h flights) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h flights) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flights) Push(x any)   { *h = append(*h, x.(*flight)) }
func (h *flights) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}
