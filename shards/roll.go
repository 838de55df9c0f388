package shards

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// Subject is the core NATS subject on which the members of group in bucket
// announce themselves, and on which anyone may ask them to (see Roll).
func Subject(bucket, group string) string { return standing.ShardsSubject(bucket, group) }

// Announcement is what a member says of itself on the group's subject:
// every announce interval, at once when what it holds or stands for
// changes, and when asked.
type Announcement struct {
	// Identity is the member's identity; empty in a question (Ask).
	Identity string `json:"identity,omitempty"`
	// Instance tells apart members under one identity (copies of a
	// program on one host), and the runs of one: each Start has its own.
	Instance string `json:"instance,omitempty"`
	// Since is when the member started.
	Since time.Time `json:"since,omitzero"`
	// Weight is the member's weight (WithWeight).
	Weight int `json:"weight,omitempty"`
	// Healthy is false while the member's health check fails.
	Healthy bool `json:"healthy"`
	// Leaving is set once the member is stopping: it takes no shard and
	// hands its own over.
	Leaving bool `json:"leaving,omitempty"`
	// Shards is the group's number of shards, as the member was given it.
	Shards int `json:"shards,omitempty"`
	// Held lists the shards the member holds, each with its term's
	// fencing token and when the term began (Unix milliseconds): [shard,
	// token, since].
	Held [][3]uint64 `json:"held,omitempty"`
	// Standing lists the shards the member campaigns for without holding
	// them: a holder hands a shard over only to a member standing for it.
	Standing []int `json:"standing,omitempty"`
	// Ask asks every member to announce itself now.
	Ask bool `json:"ask,omitempty"`
	// Seq numbers a run's announcements from 1: a member takes in a run's
	// latest only. One connection's messages arrive in order, but a member
	// that reconnects may publish through another broker of a cluster.
	Seq uint64 `json:"seq,omitempty"`
}

// Member names the member that announced a: "identity/instance", or its
// identity alone where a says no instance (an earlier build's). Members
// under one identity are distinct members, each holding its own shards.
func (a Announcement) Member() string { return memberName(a.Identity, a.Instance) }

func memberName(identity, instance string) string {
	if instance == "" {
		return identity
	}
	return identity + "/" + instance
}

// supersedes reports whether a is news over old, an announcement of the
// same member: a later one (any, from a member that does not number them).
func (a Announcement) supersedes(old Announcement) bool {
	if a.Seq == 0 || old.Seq == 0 {
		return true
	}
	return a.Seq > old.Seq
}

// HeldShards returns the shards of Held.
func (a Announcement) HeldShards() []int {
	out := make([]int, len(a.Held))
	for i, h := range a.Held {
		out[i] = int(h[0])
	}
	return out
}

// listener hears the announcements of a group. hear must not block: it runs
// on the connection's subscription goroutine, shared by all the members of
// the group in the process.
type listener interface {
	hear(a Announcement, at time.Time)
}

// hubKey identifies one subscription shared by a process: one per
// connection and group subject.
type hubKey struct {
	nc      *nats.Conn
	subject string
}

// hub is the one subscription to a group's subject that the members of the
// group on one connection share.
type hub struct {
	sub       *nats.Subscription
	listeners map[listener]struct{}
}

// hubs are the process's shared group subscriptions.
var hubs = struct {
	sync.Mutex
	m map[hubKey]*hub
}{m: map[hubKey]*hub{}}

// listen adds l to the hearers of subject on nc, subscribing if l is the
// first, and returns the function that removes it again.
func listen(nc *nats.Conn, subject string, l listener) (func(), error) {
	hubs.Lock()
	defer hubs.Unlock()
	key := hubKey{nc, subject}
	h := hubs.m[key]
	if h == nil {
		h = &hub{listeners: map[listener]struct{}{}}
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) { deliver(key, m) })
		if err != nil {
			return nil, fmt.Errorf("shards: subscribing to %s: %w", subject, err)
		}
		h.sub = sub
		hubs.m[key] = h
	}
	h.listeners[l] = struct{}{}
	return func() {
		hubs.Lock()
		defer hubs.Unlock()
		delete(h.listeners, l)
		if len(h.listeners) == 0 {
			_ = h.sub.Unsubscribe()
			delete(hubs.m, key)
		}
	}, nil
}

// deliver decodes one announcement and gives it to the hub's listeners.
func deliver(key hubKey, m *nats.Msg) {
	var a Announcement
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return
	}
	at := time.Now()
	hubs.Lock()
	h := hubs.m[key]
	var ls []listener
	if h != nil {
		for l := range h.listeners {
			ls = append(ls, l)
		}
	}
	hubs.Unlock()
	for _, l := range ls {
		l.hear(a, at)
	}
}

// rollWait is how long Roll collects announcements by default.
const rollWait = 500 * time.Millisecond

// Roll asks the members of group in bucket, over nc, to announce themselves
// and returns the latest announcement of each member heard within wait
// (0: 500ms), sorted by identity and instance (see Announcement.Member). A
// member that announced it leaves is included, with Leaving set. It is what
// `conclave shards info` shows.
func Roll(ctx context.Context, nc *nats.Conn, bucket, group string, wait time.Duration) ([]Announcement, error) {
	if err := ValidateGroup(group); err != nil {
		return nil, err
	}
	if wait <= 0 {
		wait = rollWait
	}
	heard := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(Subject(bucket, group), heard)
	if err != nil {
		return nil, fmt.Errorf("shards: group %s: listening to its members: %w", group, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Publish(Subject(bucket, group), encode(Announcement{Ask: true})); err != nil {
		return nil, fmt.Errorf("shards: group %s: asking its members: %w", group, err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	latest := map[string]Announcement{}
	for {
		select {
		case m := <-heard:
			var a Announcement
			if json.Unmarshal(m.Data, &a) == nil && a.Identity != "" {
				if old, ok := latest[a.Member()]; !ok || a.supersedes(old) {
					latest[a.Member()] = a
				}
			}
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	out := slices.Collect(maps.Values(latest))
	slices.SortFunc(out, func(a, b Announcement) int {
		return cmp.Or(strings.Compare(a.Identity, b.Identity), strings.Compare(a.Instance, b.Instance))
	})
	return out, nil
}
