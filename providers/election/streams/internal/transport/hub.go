package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A watchHub shares watches among the candidates and observers of one
// process that use one bucket over one connection. Each election key a
// process follows costs it at most one consumer on the broker, however many
// candidates and observers follow it, and each change of the key reaches the
// process once. When a process follows FoldAt or more keys under one prefix
// (the key's first dot-separated token, as in "app-a.scheduler"), the keys
// it starts following after that share one consumer filtered on the prefix
// ("$KV.<bucket>.app-a.>"): a single filter, which NATS permissions can
// scope, unlike a consumer with several filters.
//
// A hub is kept alive by the stores that use it and dropped by the garbage
// collector once none does.
type watchHub struct {
	key    hubKey
	kv     jetstream.KeyValue
	js     jetstream.JetStream // nil: feeds are KV watches with nats.go's settings
	log    Logger
	isNews Comparator // tells a bucket made again (see feed.recreatedLocked)

	mu         sync.Mutex
	keyFeeds   map[string]*feed     // one key's own feed
	groupFeeds map[string]*feed     // a prefix's shared feed
	following  map[string]int       // subscriptions per key
	groupKeys  map[string]int       // keys followed per prefix
	noFold     map[string]time.Time // prefixes whose shared feed failed, until when
	limitNoted bool                 // the consumer limit was logged

	streamMu sync.Mutex
	stream   jetstream.Stream

	// consume starts consuming a feed's consumer; nil is cons.Consume.
	// Tests set it to make Consume fail.
	consume func(cons jetstream.Consumer, handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error)

	statusMu   sync.Mutex
	statusBusy bool        // a read of the bucket's settings is under way
	statusNext *statusRead // the read that starts when it ends
}

// FoldAt is how many keys under one prefix a process must follow before
// the next ones share a consumer on the prefix. Below it, one consumer per
// key delivers nothing the process does not need; from it on, one consumer
// replaces many, at the cost of the prefix's other keys' changes.
const FoldAt = 8

// noFoldFor is how long a prefix whose shared consumer could not be made
// (for example because permissions allow only single keys) uses per-key
// consumers before trying again.
const noFoldFor = time.Minute

// subBuffer is how many changes a subscription holds before it is ended as
// too slow (its campaign then reads the key and subscribes again).
const subBuffer = 64

type hubKey struct {
	conn   any    // the *nats.Conn, or the KeyValue when there is no JetStream context
	api    string // the JetStream context's domain or API prefix (putPrefix): buckets of one name in two domains are two buckets
	bucket string
}

// hubs holds the live hub of each connection and bucket.
var hubs = struct {
	mu sync.Mutex
	m  map[hubKey]weak.Pointer[watchHub]
}{m: map[hubKey]weak.Pointer[watchHub]{}}

// hubFor returns the hub of the connection behind js (or of kv, without
// js) and kv's bucket, making it if needed with log and isNews.
func hubFor(kv jetstream.KeyValue, js jetstream.JetStream, log Logger, isNews Comparator) *watchHub {
	k := hubKey{conn: kv, bucket: kv.Bucket()}
	if js != nil && js.Conn() != nil {
		k.conn, k.api = js.Conn(), putPrefix(js)
	}
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	if h := hubs.m[k].Value(); h != nil {
		return h
	}
	h := &watchHub{key: k, kv: kv, js: js, log: log, isNews: isNews,
		keyFeeds: map[string]*feed{}, groupFeeds: map[string]*feed{},
		following: map[string]int{}, groupKeys: map[string]int{}, noFold: map[string]time.Time{}}
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
	p, _, ok := strings.Cut(key, ".")
	if !ok {
		return ""
	}
	return p
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

// subscribe follows key: the returned watcher delivers the key's latest
// message (if any), then nil, then every change, like a KV watch, until it
// is stopped or ctx ends. ttl tunes the heartbeats of a feed made for it.
func (h *watchHub) subscribe(ctx context.Context, key string, ttl time.Duration) (jetstream.KeyWatcher, error) {
	h.mu.Lock()
	f := h.keyFeeds[key]
	prefix := prefixOf(key)
	if f == nil && prefix != "" {
		f = h.groupFeeds[prefix]
		keys := h.groupKeys[prefix]
		if h.following[key] == 0 {
			keys++
		}
		if f == nil && keys >= FoldAt && time.Now().After(h.noFold[prefix]) {
			f = h.newFeedLocked(prefix+".>", prefix, "")
			h.groupFeeds[prefix] = f
		}
	}
	if f == nil {
		f = h.newFeedLocked(key, "", key)
		h.keyFeeds[key] = f
	}
	s := &hubWatch{hub: h, feed: f, key: key, c: make(chan jetstream.KeyValueEntry, subBuffer)}
	f.add(s)
	if h.following[key] == 0 && prefix != "" {
		h.groupKeys[prefix]++
	}
	h.following[key]++
	start := !f.starting
	f.starting = true
	h.mu.Unlock()

	if start {
		if err := f.start(ctx, ttl); err != nil {
			h.end(f, err)
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return nil, s.endErr()
	}
	// Like a KV watch, the subscription lives as long as ctx: its end
	// unsubscribes, and the feed stops with its last subscriber.
	s.release = context.AfterFunc(ctx, func() { h.unsubscribe(s) })
	return s, nil
}

func (h *watchHub) newFeedLocked(filter, prefix, key string) *feed {
	return &feed{hub: h, filter: filter, prefix: prefix, key: key,
		subs: map[string]map[*hubWatch]struct{}{}, last: map[string]lastMsg{}}
}

// unsubscribe ends s, and its feed when s was the feed's last subscriber.
func (h *watchHub) unsubscribe(s *hubWatch) {
	h.mu.Lock()
	f := s.feed
	gone := h.detachLocked(s, nil)
	stop := gone && f.detachLocked()
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
		close(s.c)
		if s.release != nil {
			s.release()
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
		}
	}
	return len(f.subs) == 0
}

// end ends f with err: every subscriber's channel closes, and their
// campaigns fall back to their timers and subscribe again with backoff.
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
	denied := f.prefix != "" && !f.ready && h.consumerDenied(f)
	if denied {
		h.noFold[f.prefix] = time.Now().Add(noFoldFor)
	}
	h.mu.Unlock()
	// Logged out of the lock: a logger may block, or call back into the
	// process's elections.
	if denied {
		h.log.Warnf("election bucket %s: permissions refuse a consumer on %s: the elections under %q use a consumer each for %v", h.kv.Bucket(), h.subject(f.filter), f.prefix, noFoldFor)
	}
	f.stopSource()
}

// consumerDenied reports whether the connection's latest error is the
// broker refusing, by permissions, to make f's consumer. NATS answers a
// request it refuses with silence, so the failure itself is a timeout; only
// the connection's asynchronous error names the cause.
func (h *watchHub) consumerDenied(f *feed) bool {
	if h.js == nil || h.js.Conn() == nil {
		return false
	}
	err := h.js.Conn().LastError()
	return err != nil && errors.Is(err, nats.ErrPermissionViolation) &&
		strings.Contains(err.Error(), "CONSUMER.CREATE") && strings.Contains(err.Error(), h.subject(f.filter))
}

// noteLimit logs, once per hub, that the broker refused a consumer for a
// limit, and how to lift it, and returns err explained.
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
// Store.Watch returns it. Besides a KeyWatcher's methods it has Err and
// Restart, which a caller reaches through an interface.
type hubWatch struct {
	hub  *watchHub
	feed *feed
	key  string
	c    chan jetstream.KeyValueEntry

	// under hub.mu
	closed  bool
	err     error
	release func() bool // stops the unsubscribing when the caller's context ends
}

// Updates returns the key's changes, as a KV watch's Updates does.
func (s *hubWatch) Updates() <-chan jetstream.KeyValueEntry { return s.c }

// Stop ends the subscription and closes its channel.
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
func (s *hubWatch) Restart() { s.feed.restart() }

// send hands ent to s, ending s if it has fallen too far behind.
func (s *hubWatch) sendLocked(ent jetstream.KeyValueEntry) {
	if s.closed {
		return
	}
	select {
	case s.c <- ent:
	default:
		s.hub.detachLocked(s, errors.New("the watch fell behind"))
	}
}

// statusRead is one read of the bucket's settings that callers share.
type statusRead struct {
	done chan struct{}
	st   jetstream.KeyValueStatus
	err  error
}

// status reads the bucket's settings with a request sent after the call
// began, as each caller needs (a term must not rest on a TTL read before
// it). Callers that arrive while a read is under way share the next one, so
// a process whose thousands of candidates read at once (on starting, on a
// failover) sends a few requests, not thousands.
func (h *watchHub) status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	h.statusMu.Lock()
	r := h.statusNext
	if r == nil {
		r = &statusRead{done: make(chan struct{})}
		if h.statusBusy {
			h.statusNext = r // sent when the read under way ends
		} else {
			h.statusBusy = true
			go h.readStatus(r)
		}
	}
	h.statusMu.Unlock()
	select {
	case <-r.done:
		return r.st, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readStatus makes read r, then the one queued meanwhile, if any.
func (h *watchHub) readStatus(r *statusRead) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		r.st, r.err = h.kv.Status(ctx)
		cancel()
		close(r.done)
		h.statusMu.Lock()
		r, h.statusNext = h.statusNext, nil
		h.statusBusy = r != nil
		h.statusMu.Unlock()
	}
}

// statusTimeout bounds a shared read of the bucket's settings; each caller
// also stops waiting when its own context ends.
const statusTimeout = 5 * time.Second
