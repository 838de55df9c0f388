package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// bench runs the scenarios on the shared in-process broker.
type bench struct {
	cfg  config
	srv  *server.Server
	js   jetstream.JetStream
	keys atomic.Int64
	ids  atomic.Int64
	log  func(format string, args ...any)
}

func (b *bench) key(prefix string) string {
	return fmt.Sprintf("%s_%d", prefix, b.keys.Add(1))
}

// candidate prepares a candidate of l in election key; events go to ch. A
// callback must never block inside the library, so an event that finds ch
// full is dropped: give ch room for every event a scenario waits for.
func (b *bench) candidate(ctx context.Context, l lib, key string, ch chan<- event) (*candidate, error) {
	return b.candidateTo(ctx, l, key, toChan(ch), 0)
}

func toChan(ch chan<- event) func(event) {
	return func(e event) {
		select {
		case ch <- e:
		default:
		}
	}
}

func (b *bench) candidateTo(ctx context.Context, l lib, key string, sink func(event), grace time.Duration) (*candidate, error) {
	id := fmt.Sprintf("%s-%d", strings.ToLower(l.String()), b.ids.Add(1))
	return newCandidate(ctx, spec{lib: l, url: b.srv.ClientURL(), key: key, id: id, sink: sink, grace: grace})
}

// candidates prepares n candidates of l in election key.
func (b *bench) candidates(ctx context.Context, l lib, key string, n int, ch chan<- event) ([]*candidate, error) {
	return b.candidatesTo(ctx, l, key, n, toChan(ch))
}

func (b *bench) candidatesTo(ctx context.Context, l lib, key string, n int, sink func(event)) ([]*candidate, error) {
	var cs []*candidate
	for range n {
		c, err := b.candidateTo(ctx, l, key, sink, 0)
		if err != nil {
			stopAll(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// leaderWithin bounds every wait for a leader: the slowest path is Choria's,
// a 5s start-up splay, a TTL for the old key to expire, a campaign interval
// of 0.75 TTL to notice and another to be told it won.
func (b *bench) leaderWithin() time.Duration { return 4*b.cfg.ttl + 10*time.Second }

// waitWon returns the next OnWon event of a candidate accept allows.
func waitWon(ch <-chan event, accept func(*candidate) bool, within time.Duration) (event, error) {
	deadline := time.After(within)
	for {
		select {
		case ev := <-ch:
			if ev.kind == evWon && accept(ev.c) {
				return ev, nil
			}
		case <-deadline:
			return event{}, fmt.Errorf("no leader within %v", within)
		}
	}
}

func anyone(*candidate) bool { return true }

func notThis(c *candidate) func(*candidate) bool {
	return func(o *candidate) bool { return o != c }
}

// firstLeader starts n candidates of l at once on a fresh key and returns
// how long the first OnWon took, counted from the moment Start was called.
// Connecting and opening the bucket happen before the clock starts.
func (b *bench) firstLeader(ctx context.Context, l lib, n int) (time.Duration, error) {
	ch := make(chan event, 1024)
	cs, err := b.candidates(ctx, l, b.key("first"), n, ch)
	if err != nil {
		return 0, err
	}
	defer stopAll(cs)
	start := time.Now()
	for _, c := range cs {
		c.start()
	}
	ev, err := waitWon(ch, anyone, b.leaderWithin())
	if err != nil {
		return 0, fmt.Errorf("%s first leader of %d: %w", l, n, err)
	}
	return ev.at.Sub(start), nil
}

// handoffLane keeps one election of three candidates of l and, rounds
// times, stops the leader the way a user stops an election and times the
// next OnWon. A new candidate joins after each round, so three always run.
// pause says how long the leader leads before it is stopped.
func (b *bench) handoffLane(ctx context.Context, l lib, rounds int, pause func() time.Duration) ([]time.Duration, error) {
	ch := make(chan event, 1024)
	key := b.key("handoff")
	cs, err := b.candidates(ctx, l, key, 3, ch)
	if err != nil {
		return nil, err
	}
	defer func() { stopAll(cs) }()
	for _, c := range cs {
		c.start()
	}
	ev, err := waitWon(ch, anyone, b.leaderWithin())
	if err != nil {
		return nil, fmt.Errorf("%s handoff: %w", l, err)
	}
	leader := ev.c
	var out []time.Duration
	for range rounds {
		time.Sleep(pause())
		start := time.Now()
		stopped := make(chan struct{})
		go func(c *candidate) { c.stop(); close(stopped) }(leader)
		ev, err := waitWon(ch, notThis(leader), b.leaderWithin())
		if err != nil {
			return nil, fmt.Errorf("%s handoff: %w", l, err)
		}
		<-stopped
		out = append(out, ev.at.Sub(start))
		leader = ev.c
		c, err := b.candidate(ctx, l, key, ch)
		if err != nil {
			return nil, err
		}
		c.start()
		cs = append(cs, c)
	}
	return out, nil
}

// failoverLane, rounds times, starts three candidates of l on a fresh key,
// lets the winner lead for a random part of a TTL (so the crash falls at a
// random point of its renewal cycle), closes its connection and times the
// next OnWon.
func (b *bench) failoverLane(ctx context.Context, l lib, rounds int) ([]time.Duration, error) {
	var out []time.Duration
	for range rounds {
		d, err := b.failover(ctx, l)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (b *bench) failover(ctx context.Context, l lib) (time.Duration, error) {
	ch := make(chan event, 1024)
	cs, err := b.candidates(ctx, l, b.key("failover"), 3, ch)
	if err != nil {
		return 0, err
	}
	defer stopAll(cs)
	for _, c := range cs {
		c.start()
	}
	ev, err := waitWon(ch, anyone, b.leaderWithin())
	if err != nil {
		return 0, fmt.Errorf("%s failover: %w", l, err)
	}
	leader := ev.c
	time.Sleep(rand.N(b.cfg.ttl))
	start := time.Now()
	leader.crash()
	ev, err = waitWon(ch, notThis(leader), b.leaderWithin())
	if err != nil {
		return 0, fmt.Errorf("%s failover: %w", l, err)
	}
	return ev.at.Sub(start), nil
}

// steadyResult is one election's load on the broker at steady state.
type steadyResult struct {
	standbys int
	window   time.Duration
	writes   float64 // stream writes per minute
	in, out  float64 // broker messages in and out per minute
}

// steady runs one election of l with a leader and n standbys, each on its
// own connection, alone on the broker, and counts over the window what the
// broker sees: writes to the stream, and messages in and out (Varz).
func (b *bench) steady(ctx context.Context, l lib, n int) (steadyResult, error) {
	won := make(chan time.Time, 1)
	sink := func(e event) {
		if e.kind == evWon {
			select {
			case won <- e.at:
			default:
			}
		}
	}
	cs, err := b.candidatesTo(ctx, l, b.key("steady"), n+1, sink)
	if err != nil {
		return steadyResult{}, err
	}
	defer stopAll(cs)
	start := time.Now()
	for _, c := range cs {
		c.start()
	}
	select {
	case at := <-won:
		time.Sleep(time.Until(settledAt(l, start, at)))
	case <-time.After(b.leaderWithin()):
		return steadyResult{}, fmt.Errorf("%s steady state with %d standbys: no leader within %v", l, n, b.leaderWithin())
	}
	seq0, err := streamLastSeq(ctx, b.js)
	if err != nil {
		return steadyResult{}, err
	}
	v0, err := localVarz(b.srv)
	if err != nil {
		return steadyResult{}, err
	}
	time.Sleep(b.cfg.window)
	// Varz first: the stream-info requests are messages too, and must fall
	// outside the window.
	v1, err := localVarz(b.srv)
	if err != nil {
		return steadyResult{}, err
	}
	seq1, err := streamLastSeq(ctx, b.js)
	if err != nil {
		return steadyResult{}, err
	}
	mins := b.cfg.window.Minutes()
	d := v1.sub(v0)
	return steadyResult{standbys: n, window: b.cfg.window, writes: float64(seq1-seq0) / mins, in: float64(d.In) / mins, out: float64(d.Out) / mins}, nil
}

// choriaSplay is the longest Choria waits before its first campaign.
const choriaSplay = 5 * time.Second

// settledAt is when candidates of l started at start, whose first leader
// won at won, are in their steady state: a second after the win, and for
// Choria also a second after the last candidate's start-up splay.
func settledAt(l lib, start, won time.Time) time.Time {
	at := won.Add(time.Second)
	if l == choriaLib {
		at = later(at, start.Add(choriaSplay+time.Second))
	}
	return at
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
