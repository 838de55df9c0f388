package shards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/shardplan"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// MaxShards is the largest number of shards a group may have. A member
// announces every shard it holds, with its token and start, in one
// message: holding all of MaxShards takes at most about 490 KB, under half
// of nats-server's default max_payload of 1 MiB.
const MaxShards = shardplan.MaxShards

// joinSettle is how long a member that joins listens to the others'
// answers before it first decides what to stand for.
const joinSettle = 300 * time.Millisecond

// Group is one member of a shard group: a group name, a fixed number of
// shards, and the members that run it. Shard i is the election key
// "GROUP.i"; this member campaigns only for the shards the group's
// assignment (Assign) gives it, and hands a shard it holds to the member
// the assignment names by a named hand-over (streams.Election.HandOver).
//
// Create one with NewGroup (or the framework's NewShardGroup) and run it
// with Start. Its methods are safe for concurrent use.
type Group struct {
	identity string
	group    string
	n        int
	js       jetstream.JetStream
	o        options
	instance string // this member's own: copies under one identity are distinct members
	member   string // identity/instance: the member's name in the group
	subject  string

	started chan struct{} // closed by the first Start
	once    sync.Once
	poke    chan struct{} // wakes the loop; capacity 1

	mu       sync.Mutex
	since    time.Time             // when Start began
	held     map[int]*streams.Term // shards held now and their terms
	roll     map[string]heard      // the other members, by member name
	healthy  bool                  // the last health check's verdict
	asked    bool                  // a question was heard: announce
	mismatch *Announcement         // an older member given another shard count
	standFor map[int]MoveCause     // why each shard stood for would move to this member
	warned   map[string]time.Time  // when a peer's bad announcement was last logged, by member name
}

// peerWarnEvery is how often at most a member logs that it ignores a
// peer's announcements, per peer.
const peerWarnEvery = time.Minute

// heard is another member's latest announcement and when it came.
type heard struct {
	Announcement
	at time.Time
}

// NewGroup returns a member of shard group group of n shards under
// identity, over the JetStream context js of the connection it runs on.
// Every member of a group must give the same n. The identity is the value
// of the shard keys it holds; members may share one (the copies of a
// program on one host), as each has an instance of its own (Member).
//
// NewGroup checks its arguments and returns errors wrapping
// ErrInvalidGroup, ErrInvalidShardCount, ErrInvalidIdentity or
// ErrInvalidOption (js nil included); it does not talk to the broker.
func NewGroup(identity, group string, n int, js jetstream.JetStream, opts ...Option) (*Group, error) {
	if err := ValidateGroup(group); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("%w: %d shards: a group has 1 to %d", ErrInvalidShardCount, n, MaxShards)
	}
	if identity == "" || strings.ContainsAny(identity, "\r\n") {
		return nil, fmt.Errorf("%w: %q: give each member a non-empty, one-line name", ErrInvalidIdentity, identity)
	}
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream context: pass jetstream.New(nc)", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	// A trial election checks the identity and the bucket name as the
	// shards' elections will.
	if _, err := streams.NewElection(identity, Key(group, 0), js, streams.InBucket(o.bucket)); err != nil {
		if errors.Is(err, streams.ErrInvalidIdentity) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidIdentity, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	instance := randomInstance()
	return &Group{
		identity: identity, group: group, n: n, js: js, o: o,
		instance: instance, member: memberName(identity, instance),
		subject:  Subject(o.bucket, group),
		started:  make(chan struct{}),
		poke:     make(chan struct{}, 1),
		held:     map[int]*streams.Term{},
		roll:     map[string]heard{},
		standFor: map[int]MoveCause{},
		warned:   map[string]time.Time{},
		healthy:  true,
	}, nil
}

// ValidateGroup returns an error wrapping ErrInvalidGroup unless group can
// name a shard group: GROUP.0 must be a valid election key.
func ValidateGroup(group string) error {
	if group == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidGroup)
	}
	if err := streams.ValidateKey(Key(group, 0)); err != nil {
		return fmt.Errorf("%w %q: use letters, digits, '-', '_', and '.' between tokens (%w)", ErrInvalidGroup, group, err)
	}
	return nil
}

// Key returns the election key of shard i of group: "GROUP.i".
func Key(group string, shard int) string { return group + "." + strconv.Itoa(shard) }

func randomInstance() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Identity returns the member's identity.
func (g *Group) Identity() string { return g.identity }

// Member returns the member's name in the group, "identity/instance", as
// the other members, their logs and `conclave shards info` name it.
func (g *Group) Member() string { return g.member }

// Name returns the group's name.
func (g *Group) Name() string { return g.group }

// Shards returns the group's number of shards.
func (g *Group) Shards() int { return g.n }

// Held returns the shards this member holds now, ascending.
func (g *Group) Held() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Collect(maps.Keys(g.held))
	slices.Sort(out)
	return out
}

// Term returns the term of shard while this member holds it, else nil.
func (g *Group) Term(shard int) *streams.Term {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[shard]
}

func (g *Group) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// hear takes another member's announcement; it runs on the group
// subscription's goroutine. It answers a question in any announcement, and
// otherwise ignores an announcement it cannot use (see checkPeer), and says
// so.
func (g *Group) hear(a Announcement, at time.Time) {
	if a.Member() == g.member {
		return // our own
	}
	if a.Ask {
		// A question is answered whoever asks (anyone may ask, naming
		// nobody): a member given another shard count learns of it from
		// the answer, before it takes a shard.
		g.mu.Lock()
		g.asked = true
		g.mu.Unlock()
		g.wake()
	}
	if a.Identity != "" {
		if err := g.checkPeer(a); err != nil {
			g.warnPeer(a.Member(), at, "warn", "group %s: ignoring the announcement of %q: %v", g.group, a.Member(), err)
			return
		}
	}
	if a.Identity != "" && a.Shards != g.n {
		g.mismatched(a, at)
		return
	}
	g.mu.Lock()
	if a.Identity != "" {
		if old, ok := g.roll[a.Member()]; !ok || a.supersedes(old.Announcement) {
			g.roll[a.Member()] = heard{a, at}
		}
	}
	g.mu.Unlock()
	g.wake()
}

// checkPeer returns what makes a peer's announcement unusable, or nil:
// anyone allowed on the group's subject may publish on it, and the roll's
// weights, identities and shard numbers feed the assignment and the
// hand-overs.
func (g *Group) checkPeer(a Announcement) error {
	// One trial election checks both: the identity first, then the
	// instance, an option.
	opts := []streams.Option{streams.InBucket(g.o.bucket)}
	if a.Instance != "" {
		opts = append(opts, streams.WithInstance(a.Instance))
	}
	if _, err := streams.NewElection(a.Identity, Key(g.group, 0), g.js, opts...); errors.Is(err, streams.ErrInvalidOption) {
		return fmt.Errorf("its instance cannot name a candidate: %w", err)
	} else if err != nil {
		return fmt.Errorf("its identity cannot hold a shard: %w", err)
	}
	if a.Weight < 1 || a.Weight > MaxWeight {
		return fmt.Errorf("weight %d is outside 1 to %d", a.Weight, MaxWeight)
	}
	if a.Shards < 1 || a.Shards > MaxShards {
		return fmt.Errorf("shard count %d is outside 1 to %d", a.Shards, MaxShards)
	}
	for _, h := range a.Held {
		if h[0] >= uint64(a.Shards) {
			return fmt.Errorf("it holds shard %d of a group of %d shards", h[0], a.Shards)
		}
	}
	for _, s := range a.Standing {
		if s < 0 || s >= a.Shards {
			return fmt.Errorf("it stands for shard %d of a group of %d shards", s, a.Shards)
		}
	}
	return nil
}

// mismatched takes the announcement of a peer given another number of
// shards. The peer is left off the roll: its shards and its share are of
// another group. When the peer started first (ties go to the smaller
// member name) this member stops with ErrShardCountMismatch, so that a copy
// deployed with a new count fails visibly while the members that hold the
// shards carry on; the peer, hearing this member, only logs.
func (g *Group) mismatched(a Announcement, at time.Time) {
	g.mu.Lock()
	older := a.Since.Before(g.since) || a.Since.Equal(g.since) && a.Member() < g.member
	if older && !a.Leaving && g.mismatch == nil {
		g.mismatch = &a
	}
	g.mu.Unlock()
	if older {
		g.wake()
		return // the loop says why it stops
	}
	g.warnPeer(a.Member(), at, "error", "group %s: member %q was given %d shards, this member %d: it started later, so it stops with %v; give every member of a group the same count",
		g.group, a.Member(), a.Shards, g.n, ErrShardCountMismatch)
}

// warnPeer logs what is wrong with peer's announcements, at most once per
// peerWarnEvery for each peer.
func (g *Group) warnPeer(peer string, at time.Time, level, format string, args ...any) {
	g.mu.Lock()
	last, ok := g.warned[peer]
	quiet := ok && at.Sub(last) < peerWarnEvery
	if !quiet {
		if len(g.warned) >= 1024 { // names made up by the thousand: forget the old
			for id, t := range g.warned {
				if at.Sub(t) >= peerWarnEvery {
					delete(g.warned, id)
				}
			}
		}
		g.warned[peer] = at
	}
	g.mu.Unlock()
	if !quiet {
		g.logf(level, format+" (logged at most once a minute for this member)", args...)
	}
}

// Start runs the member until ctx ends, and returns nil then. It reads the
// bucket's TTL (waiting, retrying, while the bucket does not exist), joins
// the group, and from then on campaigns for the shards the assignment gives
// it. As ctx ends it announces that it leaves, hands each shard it holds to
// the member the assignment names once that member stands for it (within
// WithLeaveTimeout), releases the rest, and returns after the last
// OnRevoked. It returns ErrAlreadyStarted on a second call, and one
// wrapping ErrShardCountMismatch when an older member was given another
// number of shards.
func (g *Group) Start(ctx context.Context) error {
	first := false
	g.once.Do(func() { first = true; close(g.started) })
	if !first {
		return ErrAlreadyStarted
	}
	ttl, err := g.bucketTTL(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g.mu.Lock()
	g.since = time.Now()
	g.mu.Unlock()
	if rec := g.o.recorder; rec != nil {
		defer rec.Left(g.group, g.member) // after the last OnRevoked, and its Holding
	}
	return newRun(g, ttl).main(ctx)
}

// bucketTTL opens the bucket and reads its TTL, retrying while it does not
// exist or the broker does not answer, until ctx ends.
func (g *Group) bucketTTL(ctx context.Context) (time.Duration, error) {
	delay := 100 * time.Millisecond
	logged := false
	for {
		reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := g.js.KeyValue(reqCtx, g.o.bucket)
		var status jetstream.KeyValueStatus
		if err == nil {
			status, err = kv.Status(reqCtx)
		}
		cancel()
		if err == nil {
			if status.TTL() <= 0 {
				return 0, fmt.Errorf("shards: bucket %s has no TTL: it cannot hold elections", g.o.bucket)
			}
			return status.TTL(), nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return 0, fmt.Errorf("shards: opening bucket %s: %w", g.o.bucket, err)
		}
		if !logged {
			g.logf("warn", "group %s: cannot open bucket %s yet, retrying: %v", g.group, g.o.bucket, err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (g *Group) logf(level, format string, args ...any) {
	l := g.o.log
	if l == nil {
		return
	}
	switch level {
	case "debug":
		l.Debugf(format, args...)
	case "info":
		l.Infof(format, args...)
	case "warn":
		l.Warnf(format, args...)
	default:
		l.Errorf(format, args...)
	}
}

// encode returns an announcement as bytes.
func encode(a Announcement) []byte {
	b, _ := json.Marshal(a)
	return b
}
