package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A watchHub shares the watches of one process on one bucket over one
// connection: each change of a key reaches the process once, and its
// consumers on the bucket do not grow with its keys:
//
//   - its first MaxKeyFeeds keys get a consumer each, filtered on the key
//     (which NATS permissions can scope);
//   - the next ones join set feeds: up to maxSetFeeds consumers filtered on
//     up to setKeys keys each, made again when keys join;
//   - the rest, and the keys still waiting in set feeds, share one consumer
//     on the whole bucket (see foldWaitingLocked).
//
// When permissions refuse a consumer with several filters, the hub uses a
// consumer per key for noFoldFor, except that once the process follows
// FoldAt keys under one prefix (the key's first dot-separated token), its
// next keys there share a consumer on "$KV.<bucket>.<prefix>.>", for up to
// maxPrefixFeeds prefixes. The stores that use a hub keep it alive.
type watchHub struct {
	key    hubKey
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	log    Logger
	isNews Comparator // tells a bucket made again (see feed.recreatedLocked)

	mu         sync.Mutex
	keyFeeds   map[string]*feed     // one key's own feed
	groupFeeds map[string]*feed     // a prefix's shared feed
	setFeeds   []*feed              // feeds of sets of keys
	allFeed    *feed                // the feed of the whole bucket, for keys past the set feeds
	setOf      map[string]*feed     // the set feed each key in one belongs to
	noSet      time.Time            // set feeds refused by permissions: none until then
	following  map[string]int       // subscriptions per key
	groupKeys  map[string]int       // keys followed per prefix
	noFold     map[string]time.Time // prefixes whose shared feed was refused, until when
	limitNoted bool                 // the consumer limit was logged
	delivered  atomic.Uint64        // messages the feeds' consumers delivered

	streamMu sync.Mutex
	stream   jetstream.Stream

	// consume is Consume for a feed's consumer (tests replace it).
	consume func(cons jetstream.Consumer, handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error)

	gate gate // admits the process's writes and key reads (see maxInFlight)

	statusMu   sync.Mutex
	statusBusy *statusRead // the read of the bucket's settings under way
	statusNext *statusRead // the read that starts when it ends
	statusLast *statusRead // the latest answered read
	statusLost int         // reads in a row presumed lost (see patienceLocked)

	// What the stream's advisories serve (see settingsChanges, followAdvisories).
	changesMu sync.Mutex
	listeners map[*listener]struct{}
	feedsLive int // feeds with a consumer
	advisory  *nats.Subscription
	rereading bool // a read after an advisory is under way
	reread    bool // another advisory came meanwhile
}

// FoldAt is how many keys under one prefix a process must follow before
// the next ones share a consumer on the prefix, where set feeds are refused.
const FoldAt = 8

// The bounds on a hub's consumers (see watchHub). setKeys is small because
// the broker checks a new consumer's filters against each other, in time
// that grows with the square of their number.
const (
	MaxKeyFeeds    = 5
	maxPrefixFeeds = 4
	maxSetFeeds    = 6
	setKeys        = 256

	noFoldFor = time.Minute // per-key consumers after a shared one was refused
	subBuffer = 64          // changes a subscription holds before it ends as too slow
)

type hubKey struct {
	conn   *nats.Conn
	api    string // putPrefix of the JetStream context: one name in two domains is two buckets
	bucket string
}

// hubs holds the live hub of each connection and bucket.
var hubs = struct {
	mu sync.Mutex
	m  map[hubKey]weak.Pointer[watchHub]
}{m: map[hubKey]weak.Pointer[watchHub]{}}

// hubFor returns the hub of the connection behind js and kv's bucket,
// making it if needed with log and isNews.
func hubFor(kv jetstream.KeyValue, js jetstream.JetStream, log Logger, isNews Comparator) *watchHub {
	k := hubKey{conn: js.Conn(), api: putPrefix(js), bucket: kv.Bucket()}
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	if h := hubs.m[k].Value(); h != nil {
		return h
	}
	h := &watchHub{key: k, kv: kv, js: js, log: log, isNews: isNews, consume: jetstream.Consumer.Consume,
		keyFeeds: map[string]*feed{}, groupFeeds: map[string]*feed{}, setOf: map[string]*feed{},
		following: map[string]int{}, groupKeys: map[string]int{}, noFold: map[string]time.Time{},
		gate: gate{limit: maxInFlight}, listeners: map[*listener]struct{}{}}
	wp := weak.Make(h)
	hubs.m[k] = wp
	runtime.AddCleanup(h, func(k hubKey) {
		hubs.mu.Lock()
		defer hubs.mu.Unlock()
		if hubs.m[k] == wp {
			delete(hubs.m, k)
		}
	}, k)
	return h
}

// prefixOf returns key's first token when the key has more than one.
func prefixOf(key string) string {
	if p, _, ok := strings.Cut(key, "."); ok {
		return p
	}
	return ""
}

func (h *watchHub) subject(keyOrFilter string) string {
	return "$KV." + h.kv.Bucket() + "." + keyOrFilter
}

// openStream returns the bucket's stream, looked up once per hub.
func (h *watchHub) openStream(ctx context.Context) (jetstream.Stream, error) {
	h.streamMu.Lock()
	defer h.streamMu.Unlock()
	if h.stream != nil {
		return h.stream, nil
	}
	st, err := h.js.Stream(ctx, "KV_"+h.kv.Bucket())
	if err != nil {
		return nil, err
	}
	h.stream = st
	return st, nil
}

// subscribe follows key: like a KV watch, the watcher delivers the key's
// latest message (if any), then nil, then every change, until stopped. ctx
// bounds its set-up only; ttl tunes the heartbeats of a feed made for it.
func (h *watchHub) subscribe(ctx context.Context, key string, ttl time.Duration) (jetstream.KeyWatcher, error) {
	h.mu.Lock()
	f := h.feedForLocked(key)
	s := &hubWatch{hub: h, feed: f, key: key}
	f.add(s)
	if prefix := prefixOf(key); h.following[key] == 0 && prefix != "" {
		h.groupKeys[prefix]++
	}
	h.following[key]++
	start := !f.starting
	f.starting = true
	h.mu.Unlock()

	var err error
	if start {
		if err = f.start(ctx, ttl); err != nil {
			h.end(f, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil && s.feed == f { // not folded onto the whole-bucket feed, which serves it
		return nil, err
	}
	if s.closed {
		return nil, s.endErr()
	}
	return s, nil
}

// feedForLocked returns the feed that delivers key, making one if needed
// (see watchHub for which).
func (h *watchHub) feedForLocked(key string) *feed {
	prefix := prefixOf(key)
	if f := cmp.Or(h.keyFeeds[key], h.setOf[key], h.allFeed, h.groupFeeds[prefix]); f != nil {
		return f
	}
	setsRefused := time.Now().Before(h.noSet)
	if prefix != "" && setsRefused {
		keys := h.groupKeys[prefix]
		if h.following[key] == 0 {
			keys++
		}
		if keys >= FoldAt && len(h.groupFeeds) < maxPrefixFeeds && time.Now().After(h.noFold[prefix]) {
			f := h.newFeedLocked(prefix+".>", prefix, "")
			h.groupFeeds[prefix] = f
			return f
		}
	}
	if len(h.keyFeeds) < MaxKeyFeeds || setsRefused {
		f := h.newFeedLocked(key, "", key)
		h.keyFeeds[key] = f
		return f
	}
	var f *feed // the set feed with the fewest keys
	if len(h.setFeeds) > 0 {
		f = slices.MinFunc(h.setFeeds, func(a, b *feed) int { return cmp.Compare(len(a.keys), len(b.keys)) })
	}
	if f == nil || len(f.keys) >= setKeys {
		if len(h.setFeeds) >= maxSetFeeds {
			h.allFeed = h.newFeedLocked(">", "", "")
			h.allFeed.all = true
			h.foldWaitingLocked()
			return h.allFeed
		}
		f = h.newFeedLocked("", "", "")
		f.set, f.keys, f.filter = true, map[string]bool{}, "a set of keys"
		h.setFeeds = append(h.setFeeds, f)
	}
	h.setOf[key] = f
	f.joinLocked(key)
	return f
}

// foldWaitingLocked moves the keys waiting in set feeds for a consumer onto
// the whole-bucket feed, just made: thousands of keys followed at once then
// cost one consumer, not set feeds made again with hundreds of filters.
// Their subscribers, who had nothing yet, get the key's state as new ones.
// A set feed left with no key ends.
func (h *watchHub) foldWaitingLocked() {
	all := h.allFeed
	for _, sf := range slices.Clone(h.setFeeds) {
		for key, covered := range sf.keys {
			if covered {
				continue
			}
			subs := sf.subs[key]
			delete(sf.subs, key)
			delete(h.setOf, key)
			sf.leaveLocked(key)
			for s := range subs {
				s.feed = all
				all.add(s)
			}
		}
		if sf.detachLocked() {
			go sf.stopSource() // it may be making its consumer: not under the lock
		}
	}
}

func (h *watchHub) newFeedLocked(filter, prefix, key string) *feed {
	return &feed{hub: h, filter: filter, prefix: prefix, key: key,
		subs: map[string]map[*hubWatch]struct{}{}, last: map[string]lastMsg{}}
}

// unsubscribe ends s, and its feed when s was the feed's last subscriber.
func (h *watchHub) unsubscribe(s *hubWatch) {
	h.mu.Lock()
	f := s.feed
	stop := h.detachLocked(s, nil) && f.detachLocked()
	h.mu.Unlock()
	if stop {
		f.stopSource()
	}
}

// detachLocked removes s from its feed and closes it, and reports whether
// the feed has no subscriber left.
func (h *watchHub) detachLocked(s *hubWatch, err error) bool {
	f := s.feed
	if !s.closed {
		s.closed, s.err = true, err
		if s.c != nil {
			close(s.c)
		}
		if s.notify != nil {
			s.notify()
		}
		h.following[s.key]--
		if h.following[s.key] == 0 {
			delete(h.following, s.key)
			if p := prefixOf(s.key); p != "" {
				h.groupKeys[p]--
				if h.groupKeys[p] == 0 {
					delete(h.groupKeys, p)
				}
			}
		}
	}
	if subs := f.subs[s.key]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(f.subs, s.key)
			f.forgetLocked(s.key, time.Now())
			if f.set {
				delete(h.setOf, s.key)
				f.leaveLocked(s.key)
			}
		}
	}
	return len(f.subs) == 0
}

// end ends f and its subscriptions with err; their campaigns fall back to
// their timers and subscribe again with backoff.
func (h *watchHub) end(f *feed, err error) {
	h.mu.Lock()
	if f.ended {
		h.mu.Unlock()
		return
	}
	for _, subs := range f.subs {
		for s := range subs {
			h.detachLocked(s, err)
		}
	}
	f.detachLocked()
	// A prefix or whole-bucket feed is refused when its consumer is first
	// made; a set feed's may be refused when made again with several keys.
	made := !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, jetstream.ErrMaximumConsumersLimit)
	denied := ((f.prefix != "" || f.all) && !f.ready || f.set && made) && h.consumerDenied(f)
	var warning string
	switch {
	case denied && (f.set || f.all):
		h.noSet = time.Now().Add(noFoldFor)
		warning = fmt.Sprintf("election bucket %s: permissions refuse a consumer with several filters: the elections beyond the first %d use a consumer each (or one per prefix) for %v; allow $JS.API.CONSUMER.CREATE.KV_%s.* to share a few", h.kv.Bucket(), MaxKeyFeeds, noFoldFor, h.kv.Bucket())
	case denied:
		h.noFold[f.prefix] = time.Now().Add(noFoldFor)
		warning = fmt.Sprintf("election bucket %s: permissions refuse a consumer on %s: the elections under %q use a consumer each for %v", h.kv.Bucket(), h.subject(f.filter), f.prefix, noFoldFor)
	}
	h.mu.Unlock()
	if warning != "" { // out of the lock: a logger may block, or call back into the elections
		h.log.Warnf("%s", warning)
	}
	f.stopSource()
}

// consumerDenied reports whether the connection's latest error is the
// broker refusing f's consumer by permissions: the refused request itself
// only times out.
func (h *watchHub) consumerDenied(f *feed) bool {
	err := h.js.Conn().LastError()
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	if f.set {
		// Any consumer on the stream refused: the latest error may be that
		// of a per-key or prefix consumer, and a user who may not make one
		// of those may not make one without a filter either.
		return strings.Contains(err.Error(), "CONSUMER.CREATE.KV_"+h.kv.Bucket()+".")
	}
	return strings.Contains(err.Error(), "CONSUMER.CREATE") && strings.Contains(err.Error(), h.subject(f.filter))
}

// noteLimit logs, once per hub, that the broker refused a consumer for a
// limit and how to lift it, and returns err explained.
func (h *watchHub) noteLimit(err error) error {
	if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		return err
	}
	err = fmt.Errorf("%w: the stream KV_%s allows no more consumers: candidates campaign on their timers until one is free; raise the stream's limit (nats stream edit KV_%s --max-consumers=-1 on a server whose JetStream default allows it) or the server's JetStream max_consumers limit (nats-server caps streams at 1,000 consumers by default; a broker run by Conclave lifts it)", err, h.kv.Bucket(), h.kv.Bucket())
	h.mu.Lock()
	first := !h.limitNoted
	h.limitNoted = true
	h.mu.Unlock()
	if first {
		h.log.Warnf("election bucket %s: %v", h.kv.Bucket(), err)
	}
	return LoggedError{err}
}

// LoggedError marks an error the hub has already logged for the process:
// the campaigns it reaches log it at debug level only. It wraps the error.
type LoggedError struct{ error }

// Unwrap returns the error the hub logged.
func (e LoggedError) Unwrap() error { return e.error }

// hubWatch is one subscription to a feed: a KeyWatcher for one key, as
// Store.Watch returns it, with Err and Restart besides.
type hubWatch struct {
	hub  *watchHub
	feed *feed
	key  string

	// Under hub.mu. queued holds the deliveries not taken yet (Poll) until
	// Updates makes c; a subscription at rest holds neither.
	queued []jetstream.KeyValueEntry
	c      chan jetstream.KeyValueEntry
	closed bool
	err    error
	notify func() // told of each delivery and of the end (see Notify)
}

// Notify has the subscription call f each time it delivers an entry or
// ends, and at once if it holds some already. f is called under the hub's
// lock: it must not block nor call into the hub.
func (s *hubWatch) Notify(f func()) {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.notify = f
	if s.closed || len(s.queued) > 0 || len(s.c) > 0 {
		f()
	}
}

// Poll takes the next delivery without waiting: ent and open as a receive
// from Updates would give them, and got false when there is none yet. A
// caller polls or reads Updates, not both.
func (s *hubWatch) Poll() (ent jetstream.KeyValueEntry, open, got bool) {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if len(s.queued) > 0 {
		ent = s.queued[0]
		s.queued[0] = nil
		s.queued = s.queued[1:]
		if len(s.queued) == 0 {
			s.queued = nil // the array goes with it
		}
		return ent, true, true
	}
	if s.c != nil {
		select {
		case ent, open = <-s.c:
			return ent, open, true
		default:
			return nil, false, false
		}
	}
	return nil, false, s.closed
}

// Updates returns the key's changes, as a KV watch's Updates does: a
// channel made on the first call, holding what was queued before.
func (s *hubWatch) Updates() <-chan jetstream.KeyValueEntry {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if s.c == nil {
		s.c = make(chan jetstream.KeyValueEntry, subBuffer)
		for _, ent := range s.queued {
			s.c <- ent
		}
		s.queued = nil
		if s.closed {
			close(s.c)
		}
	}
	return s.c
}

// Stop ends the subscription; Poll or Updates then tell of its end.
func (s *hubWatch) Stop() error {
	s.hub.unsubscribe(s)
	return nil
}

// Err returns why the subscription ended on its own, if it did.
func (s *hubWatch) Err() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.endErr()
}

func (s *hubWatch) endErr() error {
	if s.err != nil {
		return s.err
	}
	return errors.New("the watch ended")
}

// Restart asks for the subscription's feed to be made again, when a
// candidate suspects it missed changes; the subscription stays.
func (s *hubWatch) Restart() {
	s.hub.mu.Lock()
	f := s.feed // the fold may move s onto the whole-bucket feed
	s.hub.mu.Unlock()
	f.restart()
}

// sendLocked hands ent to s, ending s if it has fallen too far behind. Only
// holders of hub.mu send on s.c, so a send while it has room never blocks.
func (s *hubWatch) sendLocked(ent jetstream.KeyValueEntry) {
	switch {
	case s.closed:
		return
	case s.c == nil && len(s.queued) < subBuffer:
		s.queued = append(s.queued, ent)
	case s.c != nil && len(s.c) < cap(s.c):
		s.c <- ent
	default:
		s.hub.detachLocked(s, errors.New("the watch fell behind"))
		return
	}
	if s.notify != nil {
		s.notify()
	}
}

// statusRead is one read of the bucket's settings that callers share.
type statusRead struct {
	done chan struct{}
	sent time.Time // when the request was sent (zero until then)
	st   jetstream.KeyValueStatus
	err  error
}

// status reads the bucket's settings with a request sent at most maxAge
// before it returns (0: sent after the call began, as a term needs that
// must not rest on an older TTL), and returns the read and its age. Callers
// share reads (one sent recently enough, answered or under way, or else the
// next one), so that thousands of elections send a few requests.
//
// A read unanswered after patienceLocked is presumed lost (as when sent
// while the stream had no leader): no caller joins it, and the next is sent
// without waiting for it to time out, so that a failover does not hold
// every read, those that begin terms included, for statusTimeout.
func (h *watchHub) status(ctx context.Context, maxAge time.Duration) (jetstream.KeyValueStatus, time.Duration, error) {
	h.statusMu.Lock()
	now := time.Now()
	var r *statusRead
	busy := h.statusBusy
	waiting := busy != nil && now.Sub(busy.sent) < h.patienceLocked() // not presumed lost
	switch {
	case maxAge > 0 && h.statusLast != nil && now.Sub(h.statusLast.sent) <= maxAge:
		r = h.statusLast
	case maxAge > 0 && waiting && now.Sub(busy.sent) <= maxAge:
		r = busy
	case h.statusNext != nil:
		r = h.statusNext
	default:
		r = &statusRead{done: make(chan struct{})}
		h.statusNext = r
		h.sendNextLocked(now)
	}
	h.statusMu.Unlock()
	select {
	case <-r.done:
		return r.st, time.Since(r.sent), r.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// patienceLocked is how long a read goes unanswered before it is presumed
// lost: statusPatience, doubled while reads in a row go unanswered, so that
// a slow broker gets at most two reads a second from each process; more
// would delay the term that waits for a read once the stream is back.
func (h *watchHub) patienceLocked() time.Duration {
	return statusPatience << min(h.statusLost, 1)
}

// sendNextLocked sends the queued read, if any, once the read under way is
// answered or presumed lost: it then becomes the read under way.
func (h *watchHub) sendNextLocked(now time.Time) {
	r := h.statusNext
	if r == nil {
		return
	}
	if busy := h.statusBusy; busy != nil {
		if wait := h.patienceLocked() - now.Sub(busy.sent); wait > 0 {
			time.AfterFunc(wait, h.sendNextStatus)
			return
		}
		h.statusLost++ // the read under way is presumed lost
	}
	h.statusNext = nil
	r.sent = now
	h.statusBusy = r
	go h.readStatus(r)
}

func (h *watchHub) sendNextStatus() {
	h.statusMu.Lock()
	defer h.statusMu.Unlock()
	h.sendNextLocked(time.Now())
}

// readStatus makes read r and, if it is still the read under way, sends
// the one queued meanwhile.
func (h *watchHub) readStatus(r *statusRead) {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	st, err := h.kv.Status(ctx)
	cancel()
	h.statusMu.Lock()
	defer h.statusMu.Unlock()
	r.st, r.err = st, err
	if err == nil {
		h.statusLost = 0
		if h.statusLast == nil || r.sent.After(h.statusLast.sent) {
			h.statusLast = r
		}
	}
	close(r.done)
	if h.statusBusy == r {
		h.statusBusy = nil
		h.sendNextLocked(time.Now())
	}
}

// statusTimeout bounds a shared read of the bucket's settings (each caller
// also stops waiting when its context ends). statusPatience is long for a
// healthy broker, which answers in milliseconds.
const (
	statusTimeout  = 5 * time.Second
	statusPatience = 250 * time.Millisecond
)

// settingsChanges calls notify each time the bucket's stream announces a
// change of its settings (an update, or the stream made or deleted), with
// when a read of the settings made after it was sent, and returns a
// function that stops the calls. notify is called under a lock of the
// hub's: it must not block nor call into the hub. Advisories only speed
// things up: ones lost or refused leave the elections' routine reads.
func (h *watchHub) settingsChanges(notify func(sent time.Time)) func() {
	l := &listener{notify: notify}
	h.changesMu.Lock()
	defer h.changesMu.Unlock()
	h.listeners[l] = struct{}{}
	h.adviseLocked()
	return func() {
		h.changesMu.Lock()
		defer h.changesMu.Unlock()
		delete(h.listeners, l)
		h.adviseLocked()
	}
}

// listener is one listener to changes of the bucket's settings.
type listener struct{ notify func(sent time.Time) }

// followAdvisories keeps the hub subscribed to the stream's advisories
// while a feed's consumer runs, and returns the function that says it
// stopped: a consumer learns its stream was deleted or made again only
// through a pull request or missing heartbeats, the advisory at once.
func (h *watchHub) followAdvisories() func() {
	h.changesMu.Lock()
	defer h.changesMu.Unlock()
	h.feedsLive++
	h.adviseLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.changesMu.Lock()
			defer h.changesMu.Unlock()
			h.feedsLive--
			h.adviseLocked()
		})
	}
}

// adviseLocked subscribes to the stream's advisories while the hub has
// listeners or feeds, and unsubscribes once it has neither.
func (h *watchHub) adviseLocked() {
	want := len(h.listeners) > 0 || h.feedsLive > 0
	switch {
	case !want && h.advisory != nil:
		_ = h.advisory.Unsubscribe()
		h.advisory = nil
	case want && h.advisory == nil && h.key.api == "":
		// Advisories are published in the stream's account, not through a
		// domain or another account's API prefix. The subject has the
		// stream's updates, creation and deletion (in a cluster, rarer
		// events too).
		sub, err := h.js.Conn().Subscribe("$JS.EVENT.ADVISORY.STREAM.*.KV_"+h.kv.Bucket(), h.advised)
		if err == nil {
			h.advisory = sub
		} else {
			h.log.Debugf("election bucket %s: cannot follow the stream's advisories (%v): TTL changes are noticed by the elections' routine reads, and a bucket made again by the watches' heartbeats", h.kv.Bucket(), err)
		}
	}
}

// advised takes in one of the stream's advisories for the feeds and the
// listeners.
func (h *watchHub) advised(m *nats.Msg) {
	event, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM."), ".")
	if event == "CREATED" || event == "DELETED" {
		h.streamReplaced(event)
	}
	h.changesMu.Lock()
	listening := len(h.listeners) > 0
	h.changesMu.Unlock()
	if listening {
		h.settingsChanged()
	}
}

// streamReplaced tells every feed that the bucket's stream was deleted or
// made again (event).
func (h *watchHub) streamReplaced(event string) {
	h.mu.Lock()
	feeds := slices.Concat(slices.Collect(maps.Values(h.keyFeeds)),
		slices.Collect(maps.Values(h.groupFeeds)), h.setFeeds)
	if h.allFeed != nil {
		feeds = append(feeds, h.allFeed)
	}
	h.mu.Unlock()
	for _, f := range feeds {
		f.streamReplaced(event)
	}
}

// settingsChanged reads the bucket's settings after an advisory (once for
// any number that come while it reads) and tells the listeners when that
// read was sent.
func (h *watchHub) settingsChanged() {
	h.changesMu.Lock()
	defer h.changesMu.Unlock()
	if h.rereading {
		h.reread = true
		return
	}
	h.rereading = true
	go func() {
		for again := true; again; {
			ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
			_, age, err := h.status(ctx, 0)
			cancel()
			sent := time.Now().Add(-age)
			h.changesMu.Lock()
			if err == nil {
				for l := range h.listeners {
					l.notify(sent)
				}
			}
			again, h.reread = h.reread, false
			h.rereading = again
			h.changesMu.Unlock()
		}
	}()
}
