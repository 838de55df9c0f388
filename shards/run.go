package shards

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/shardplan"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// handOverTimeout bounds one hand-over; the election returns well within it
// (its offer waits at most a second before it releases).
const handOverTimeout = 5 * time.Second

// retryDelay is how long a member waits before it tries again a hand-over
// the election refused as too soon, or restarts a shard's election that
// failed.
const retryDelay = time.Second

// run is one Start of a Group: the loop that decides what the member stands
// for and hands over. Its fields are the loop's own.
type run struct {
	g        *Group
	ttl      time.Duration
	interval time.Duration
	silence  time.Duration
	// electionCtx outlives Start's context: the member hands over and
	// releases after it ends.
	electionCtx context.Context

	runs         map[int]*shardRun   // the elections running, by shard
	handing      map[int]bool        // hand-overs in flight
	retryAt      map[int]time.Time   // no hand-over or restart before
	handedOver   chan handOverResult // hand-overs' outcomes
	ended        chan *shardRun      // elections whose Start returned
	wakeAt       time.Time           // the next pass due on time
	leaving      bool                // Start's context ended
	mismatch     *Announcement       // an older member has another shard count
	closed       error               // the connection closed for good
	announced    []byte              // the last announcement, Ask aside
	nextAnnounce time.Time           // the next periodic announcement
	seq          uint64              // announcements published, each numbered (Announcement.Seq)
	health       sync.WaitGroup      // the health checker
	stopHealth   context.CancelFunc  // ends the health checker
}

// shardRun is one shard's election.
type shardRun struct {
	shard    int
	e        *streams.Election
	cancel   context.CancelFunc
	stopping bool
	err      error // Start's result, once ended
}

type handOverResult struct {
	shard int
	to    string
	cause MoveCause
	err   error
}

func newRun(g *Group, ttl time.Duration) *run {
	return &run{
		g: g, ttl: ttl, interval: shardplan.AnnounceInterval(ttl), silence: shardplan.RollSilence(ttl),
		runs: map[int]*shardRun{}, handing: map[int]bool{}, retryAt: map[int]time.Time{},
		handedOver: make(chan handOverResult, g.n), ended: make(chan *shardRun, g.n),
	}
}

func (r *run) main(ctx context.Context) error {
	g := r.g
	r.electionCtx = context.WithoutCancel(ctx)
	nc := g.js.Conn()
	unlisten, err := listen(nc, g.subject, g)
	if err != nil {
		return err
	}
	defer unlisten()
	r.startHealth()
	defer r.endHealth()

	g.logf("info", "group %s: %s joins (%d shards, weight %d, TTL %v)", g.group, g.member, g.n, g.o.weight, r.ttl)
	r.announce(true, true)
	settle := time.NewTimer(joinSettle)
	select {
	case <-ctx.Done():
		settle.Stop()
		r.announceLeaving()
		return nil
	case <-settle.C:
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var leaveBy time.Time
	for {
		now := time.Now()
		if !r.leaving && r.mustLeave() {
			r.leaving, leaveBy = true, now.Add(g.o.leaveWithin)
		}
		r.pass(now)
		if r.leaving && r.doneLeaving() {
			break
		}
		if r.leaving && !now.Before(leaveBy) {
			g.logf("warn", "group %s: %s: %d shards not handed over within %v (WithLeaveTimeout): releasing them for any member to take",
				g.group, g.member, r.holding(), g.o.leaveWithin)
			break
		}
		if r.closed != nil {
			break
		}
		wait := time.Until(r.wakeAt)
		if r.leaving {
			wait = min(wait, time.Until(leaveBy))
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			if !r.leaving {
				r.leaving, leaveBy = true, time.Now().Add(g.o.leaveWithin)
				g.logf("info", "group %s: %s leaves, handing over %d shards", g.group, g.member, r.holding())
			}
			ctx = context.Background() // Done once
		case <-g.poke:
		case <-timer.C:
		case res := <-r.handedOver:
			r.handOverDone(res)
		case sr := <-r.ended:
			r.electionEnded(sr)
		}
		timer.Stop()
	}
	r.stopAll()
	r.announceLeaving()
	switch {
	case r.closed != nil:
		return r.closed
	case r.mismatch != nil:
		return fmt.Errorf("%w: group %s: this member was given %d shards, member %q, which started first, %d: give every member of a group the same count (to change it, stop every member, or start the new count under another group name)",
			ErrShardCountMismatch, g.group, g.n, r.mismatch.Member(), r.mismatch.Shards)
	}
	return nil
}

// mustLeave reports whether the member must stop because of what it
// heard: an older member given another number of shards. It logs why.
func (r *run) mustLeave() bool {
	g := r.g
	g.mu.Lock()
	r.mismatch = g.mismatch
	g.mu.Unlock()
	if r.mismatch == nil {
		return false
	}
	g.logf("error", "group %s: member %q, which started first, was given %d shards, this member %d: leaving (%v)",
		g.group, r.mismatch.Member(), r.mismatch.Shards, g.n, ErrShardCountMismatch)
	return true
}

// doneLeaving reports whether a leaving member has nothing left to hand
// over: it holds no shard, neither taken in nor won (see won), or nobody
// else is there to take what it holds.
func (r *run) doneLeaving() bool {
	if len(r.handing) > 0 {
		return false
	}
	g := r.g
	g.mu.Lock()
	others := false
	for _, h := range g.roll {
		if !h.Leaving {
			others = true
			break
		}
	}
	g.mu.Unlock()
	return !others || r.holding() == 0
}

// holding returns how many shards this member holds: taken in, or won
// (see won).
func (r *run) holding() int {
	g := r.g
	g.mu.Lock()
	held := maps.Clone(g.held)
	g.mu.Unlock()
	return len(held) + len(r.won(held))
}

// won returns the shards whose election this member won but whose term is
// not in held, OnAssigned not having run yet, with when each term began.
// Such a shard is held all the same: stopping its election would release
// it rather than hand it over.
func (r *run) won(held map[int]*streams.Term) map[int]time.Time {
	out := map[int]time.Time{}
	for s, sr := range r.runs {
		if held[s] != nil || !sr.e.IsLeader() {
			continue
		}
		if t := sr.e.Term(); t != nil {
			out[s] = t.Started()
		}
	}
	return out
}

// pass computes the assignment and acts on it: stands for the shards it
// gives this member, stops standing for the others, and hands over shards
// held for someone else who stands for them.
func (r *run) pass(now time.Time) {
	g := r.g
	r.wakeAt = now.Add(r.interval)

	g.mu.Lock()
	for id, h := range g.roll {
		if now.Sub(h.at) > r.silence {
			delete(g.roll, id)
			g.logf("info", "group %s: %s silent for %v: dropped from the roll", g.group, id, now.Sub(h.at).Round(time.Millisecond))
			continue
		}
		r.wakeAt = earliest(r.wakeAt, h.at.Add(r.silence+time.Millisecond))
	}
	healthy, asked := g.healthy, g.asked
	g.asked = false
	roll := make([]heard, 0, len(g.roll))
	for _, h := range g.roll {
		roll = append(roll, h)
	}
	held := make(map[int]*streams.Term, len(g.held))
	for s, t := range g.held {
		held[s] = t
	}
	g.mu.Unlock()

	st := shardplan.State{
		N: g.n, Self: Member{Identity: g.member, Weight: g.o.weight, Healthy: healthy}, Leaving: r.leaving,
		Held: make(map[int]time.Time, len(held)), Won: r.won(held), Running: make(map[int]bool, len(r.runs)),
		Handing: r.handing, RetryAt: r.retryAt, MinHold: g.o.minHold, Now: now,
	}
	byMember := map[string]Announcement{}
	for _, h := range roll {
		byMember[h.Member()] = h.Announcement
		p := shardplan.Peer{Member: Member{Identity: h.Member(), Weight: h.Weight, Healthy: h.Healthy}, Leaving: h.Leaving, Standing: h.Standing}
		for _, c := range h.Held {
			p.Held = append(p.Held, shardplan.Held{Shard: int(c[0]), Token: c[1]})
		}
		st.Peers = append(st.Peers, p)
	}
	for s, t := range held {
		st.Held[s] = t.Started()
	}
	for s, sr := range r.runs {
		st.Running[s] = sr.stopping
	}
	plan := shardplan.Decide(st)
	// Why each shard this member stands for would move to it. A holder
	// that just handed a shard over may announce before the win is seen
	// here: the cause already known is kept rather than read as a
	// takeover.
	g.mu.Lock()
	causes := make(map[int]MoveCause, len(g.standFor))
	for s, d := range plan.Desired {
		if d != g.member || held[s] != nil {
			continue
		}
		cause := moveCause(plan.Holders[s], byMember)
		if old, ok := g.standFor[s]; ok && cause == MoveTakeover {
			cause = old
		}
		causes[s] = cause
	}
	g.standFor = causes
	g.mu.Unlock()

	for _, s := range plan.Start {
		r.startShard(s)
	}
	for _, mv := range plan.HandOver {
		r.handOver(r.runs[mv.Shard], mv.To, reasons[mv.Reason])
	}
	for _, s := range plan.Stop {
		sr := r.runs[s]
		sr.stopping = true
		sr.cancel()
	}
	if !plan.WakeAt.IsZero() {
		r.wakeAt = earliest(r.wakeAt, plan.WakeAt)
	}
	for s, at := range r.retryAt {
		if now.Before(at) {
			r.wakeAt = earliest(r.wakeAt, at)
		} else {
			delete(r.retryAt, s)
		}
	}
	r.announce(asked, false)
}

// reasons names the causes of the hand-overs a pass asks for.
var reasons = map[shardplan.Reason]MoveCause{
	shardplan.Rebalance: MoveRebalance,
	shardplan.Leave:     MoveLeave,
	shardplan.Unhealthy: MoveUnhealthy,
}

// moveCause says why a shard held by holder moves: to even the spread
// unless its holder leaves or is unhealthy; a takeover when nobody on the
// roll holds it.
func moveCause(holder string, roll map[string]Announcement) MoveCause {
	a, ok := roll[holder]
	switch {
	case holder == "" || !ok:
		return MoveTakeover
	case a.Leaving:
		return MoveLeave
	case !a.Healthy:
		return MoveUnhealthy
	}
	return MoveRebalance
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// startShard starts the election of shard s.
func (r *run) startShard(s int) {
	g := r.g
	opts := []streams.Option{
		streams.InBucket(g.o.bucket),
		streams.WithInstance(g.instance), // hand-overs name the member as identity/instance
		streams.OnLeading(func(t *streams.Term) { g.assigned(s, t) }),
		streams.OnLost(func() { g.revoked(s) }),
	}
	if g.o.log != nil {
		opts = append(opts, streams.WithLogger(g.o.log))
	}
	e, err := streams.NewElection(g.identity, Key(g.group, s), g.js, opts...)
	if err != nil { // NewGroup checked the same arguments
		g.logf("error", "group %s: shard %d: %v", g.group, s, err)
		r.retryAt[s] = time.Now().Add(retryDelay)
		return
	}
	ctx, cancel := context.WithCancel(r.electionCtx)
	sr := &shardRun{shard: s, e: e, cancel: cancel}
	r.runs[s] = sr
	// Launched, not started on a goroutine: a group's shards at rest
	// share the process's scheduler and hold no goroutine each.
	e.Launch(ctx, func(err error) {
		sr.err = err
		cancel()
		r.ended <- sr
	})
}

// electionEnded forgets a shard's election that ended.
func (r *run) electionEnded(sr *shardRun) {
	if r.runs[sr.shard] == sr {
		delete(r.runs, sr.shard)
	}
	switch {
	case sr.err == nil:
	case errors.Is(sr.err, nats.ErrConnectionClosed):
		r.closed = fmt.Errorf("shards: group %s: %w", r.g.group, sr.err)
	default:
		r.g.logf("error", "group %s: shard %d's election stopped: %v", r.g.group, sr.shard, sr.err)
		r.retryAt[sr.shard] = time.Now().Add(retryDelay)
	}
}

// handOver hands shard sr.shard over to to, on a goroutine of its own.
func (r *run) handOver(sr *shardRun, to string, cause MoveCause) {
	if sr == nil {
		return
	}
	r.handing[sr.shard] = true
	r.g.logf("debug", "group %s: handing shard %d over to %s (%s)", r.g.group, sr.shard, to, cause)
	nc, bucket, key := r.g.js.Conn(), r.g.o.bucket, Key(r.g.group, sr.shard)
	go func() {
		ctx, cancel := context.WithTimeout(r.electionCtx, handOverTimeout)
		defer cancel()
		// The offer is taken with one write only by a candidate whose
		// election is up; one still starting takes the release that names
		// it instead, once it has read the key.
		awaitCandidate(ctx, nc, bucket, key, to, candidateWait)
		err := sr.e.HandOver(ctx, to)
		r.handedOver <- handOverResult{shard: sr.shard, to: to, cause: cause, err: err}
	}()
}

// candidateWait bounds how long a holder waits for the member it hands a
// shard to to answer as a candidate of the shard's election.
const candidateWait = time.Second

// awaitCandidate asks who stands in election key until to answers, or
// within at most within, whichever is first.
func awaitCandidate(ctx context.Context, nc *nats.Conn, bucket, key, to string, within time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	answers := make(chan *nats.Msg, 64)
	inbox := nc.NewRespInbox()
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	ask := time.NewTicker(50 * time.Millisecond)
	defer ask.Stop()
	for {
		if err := nc.PublishRequest(standing.CandidatesSubject(bucket, key), inbox, nil); err != nil {
			return
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-ask.C:
				waiting = false
			case m := <-answers:
				var c standing.Candidate
				if json.Unmarshal(m.Data, &c) == nil && c.NamedBy(to) {
					return
				}
			}
		}
	}
}

func (r *run) handOverDone(res handOverResult) {
	delete(r.handing, res.shard)
	g := r.g
	switch {
	case res.err == nil:
		g.logf("info", "group %s: handed shard %d over to %s (%s)", g.group, res.shard, res.to, res.cause)
	case errors.Is(res.err, streams.ErrHandOverTooSoon):
		r.retryAt[res.shard] = time.Now().Add(retryDelay)
	case errors.Is(res.err, streams.ErrNotLeader):
	default:
		g.logf("warn", "group %s: handing shard %d over to %s: %v", g.group, res.shard, res.to, res.err)
		r.retryAt[res.shard] = time.Now().Add(retryDelay)
	}
}

// stopAll stops every shard's election and waits for them to end: held
// shards are released (OnRevoked first), so that any member may take them.
func (r *run) stopAll() {
	for len(r.handing) > 0 {
		r.handOverDone(<-r.handedOver)
	}
	for _, sr := range r.runs {
		if !sr.stopping {
			sr.stopping = true
			sr.cancel()
		}
	}
	for len(r.runs) > 0 {
		r.electionEnded(<-r.ended)
	}
}

// announce publishes this member's announcement when it changed, when the
// periodic one is due, or when force; with ask, it asks the others to
// announce themselves too.
func (r *run) announce(force, ask bool) {
	g := r.g
	a := r.own()
	body := encode(a)
	now := time.Now()
	if !force && bytes.Equal(body, r.announced) && now.Before(r.nextAnnounce) {
		r.wakeAt = earliest(r.wakeAt, r.nextAnnounce)
		return
	}
	r.announced = body
	r.nextAnnounce = now.Add(r.interval)
	r.wakeAt = earliest(r.wakeAt, r.nextAnnounce)
	r.seq++
	a.Seq, a.Ask = r.seq, ask
	body = encode(a)
	nc := g.js.Conn()
	switch err := nc.Publish(g.subject, body); {
	case errors.Is(err, nats.ErrMaxPayload):
		g.logf("error", "group %s: announcing: %d bytes (%d shards held), above the server's max_payload of %d: the others drop this member from their roll; raise max_payload: %v",
			g.group, len(body), len(a.Held), nc.MaxPayload(), err)
	case err != nil:
		g.logf("warn", "group %s: announcing: %v", g.group, err)
	}
}

// announceLeaving says that this member has left, holding nothing.
func (r *run) announceLeaving() {
	r.leaving = true
	clear(r.runs)
	r.announce(true, false)
	_ = r.g.js.Conn().Flush()
}

// own returns this member's announcement as it stands.
func (r *run) own() Announcement {
	g := r.g
	g.mu.Lock()
	a := Announcement{
		Identity: g.identity, Instance: g.instance, Since: g.since, Weight: g.o.weight,
		Healthy: g.healthy, Leaving: r.leaving, Shards: g.n,
	}
	for s, t := range g.held {
		a.Held = append(a.Held, [3]uint64{uint64(s), t.Token(), uint64(max(t.Started().UnixMilli(), 0))})
	}
	for s, sr := range r.runs {
		if _, held := g.held[s]; !held && !sr.stopping {
			a.Standing = append(a.Standing, s)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(a.Held, func(x, y [3]uint64) int { return cmp.Compare(x[0], y[0]) })
	slices.Sort(a.Standing)
	return a
}

// startHealth runs the health check once, then every interval on a
// goroutine of its own.
func (r *run) startHealth() {
	g := r.g
	if g.o.health == nil {
		r.stopHealth = func() {}
		return
	}
	var running chan error // the check that has not returned yet, if any
	check := func(ctx context.Context) {
		cctx, cancel := context.WithTimeout(ctx, g.o.healthEvery)
		defer cancel()
		launch := func() {
			running = make(chan error, 1)
			go func(done chan<- error) { done <- g.o.health(cctx) }(running)
		}
		// A check that ignores its context is not waited for beyond its
		// bound: it counts as failing until it returns, and no other
		// starts meanwhile. When it returns in a later round, its result
		// says how things stood when it started: it is dropped, and the
		// round checks afresh within what is left of its bound.
		fresh := running == nil
		if fresh {
			launch()
		}
		var err error
		for {
			select {
			case err = <-running:
				running = nil
				if !fresh {
					fresh = true
					launch()
					continue
				}
			case <-cctx.Done():
				err = fmt.Errorf("the health check did not return within %v: make it return when its context ends", g.o.healthEvery)
			}
			break
		}
		g.mu.Lock()
		changed := g.healthy != (err == nil)
		g.healthy = err == nil
		g.mu.Unlock()
		if changed {
			if err != nil {
				g.logf("warn", "group %s: %s is unhealthy: %v", g.group, g.member, err)
			} else {
				g.logf("info", "group %s: %s is healthy again", g.group, g.member)
			}
			g.wake()
		}
	}
	ctx, cancel := context.WithCancel(r.electionCtx)
	r.stopHealth = cancel
	check(ctx)
	r.health.Add(1)
	go func() {
		defer r.health.Done()
		t := time.NewTicker(g.o.healthEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				check(ctx)
			}
		}
	}()
}

func (r *run) endHealth() {
	r.stopHealth()
	r.health.Wait()
}

// assigned runs on shard s's election goroutine as its term begins.
func (g *Group) assigned(s int, t *streams.Term) {
	g.mu.Lock()
	g.held[s] = t
	count := len(g.held)
	cause, moved := g.standFor[s]
	if !moved {
		cause = MoveTakeover // won while nobody was known to hold it
	}
	g.mu.Unlock()
	g.wake()
	if rec := g.o.recorder; rec != nil {
		rec.Holding(g.group, g.member, count)
		rec.Moved(g.group, cause)
	}
	if g.o.onAssigned != nil {
		g.o.onAssigned(s, t)
	}
}

// revoked runs on shard s's election goroutine as its term ends.
func (g *Group) revoked(s int) {
	g.mu.Lock()
	delete(g.held, s)
	count := len(g.held)
	g.mu.Unlock()
	g.wake()
	if rec := g.o.recorder; rec != nil {
		rec.Holding(g.group, g.member, count)
	}
	if g.o.onRevoked != nil {
		g.o.onRevoked(s)
	}
}
