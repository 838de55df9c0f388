package streams

import (
	"container/heap"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/shardplan"
	"github.com/conclave-io/conclave/internal/simkv"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// The shard group simulator: the members of one shard group (package
// shards) on the simulated bucket, each shard an election of the real
// lease machine, each member deciding with the group's own code
// (internal/shardplan: the assignment and what a pass does about it) from
// the announcements it heard. Members join, stop (handing their shards
// over), crash, pause, turn unhealthy and recover, are cut off, lose
// replies, lag, and see their watches stall and end, and shards' holders
// are forced to stand down, all drawn from the seed. After every event it
// checks each shard as the election simulator checks its key (at most one
// holder at any instant, fencing tokens that grow); once the group is
// quiet after the last fault, that each healthy member holds between the
// floor and the ceiling of its share and that nothing moves; then one
// join, leave, crash or failing health check, after which no shard moves
// twice and the spread is even again. A seed replays exactly.

// TestSimulateShards runs the shard group simulator's seeds: the flags of
// TestSimulate choose them; cmd/simulate -shards runs it.
func TestSimulateShards(t *testing.T) {
	if *simSeed != 0 {
		r := simulateShards(*simSeed, true)
		t.Logf("%s\n%s", r.summary(), strings.Join(r.trace, "\n"))
		if r.err != nil {
			t.Fatalf("seed %d: %v", *simSeed, r.err)
		}
		return
	}
	var (
		mu     sync.Mutex
		totals shardTotals
	)
	seeds := *simSeeds
	if raceDetector && !flagGiven("sim.seeds") {
		seeds = 50 // a shard seed runs many elections: ten times slower under the race detector
	}
	ran, failures := runSeeds(seeds, "go run ./cmd/simulate -shards -seed %d", func(seed uint64) error {
		r := simulateShards(seed, false)
		mu.Lock()
		totals.add(r)
		mu.Unlock()
		return r.err
	})
	t.Logf("simulated %d shard group seeds from %d: %s", ran, *simFrom, totals)
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
}

// TestSimulateShardsReplays: a seed replayed with its trace runs as it ran
// among the others, event for event, so that the command a failure prints
// shows that failure.
func TestSimulateShardsReplays(t *testing.T) {
	for _, seed := range []uint64{3, 4242, 9002821} {
		a, b := simulateShards(seed, false), simulateShards(seed, true)
		if a.summary() != b.summary() || fmt.Sprint(a.err) != fmt.Sprint(b.err) {
			t.Errorf("seed %d ran\n  %s (%v)\nand replayed\n  %s (%v)", seed, a.summary(), a.err, b.summary(), b.err)
		}
		if a.terms == 0 || a.checks == 0 {
			t.Errorf("seed %d ran nothing: %s", seed, a.summary())
		}
	}
}

// flagGiven reports whether the test's command line set flag name.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// shardTotals sums what the shard seeds did.
type shardTotals struct {
	seeds, shards, members, terms, moves, handOvers, faults, checks int
	eventMoves                                                      int
	events                                                          map[string]int
	byFault                                                         map[string]int
}

func (s *shardTotals) add(r shardResult) {
	s.seeds++
	s.shards += r.shards
	s.members += r.members
	s.terms += r.terms
	s.moves += r.moves
	s.eventMoves += r.eventMoves
	s.handOvers += r.handOvers
	s.faults += r.faults
	s.checks += r.checks
	if s.byFault == nil {
		s.byFault, s.events = map[string]int{}, map[string]int{}
	}
	for k, v := range r.byFault {
		s.byFault[k] += v
	}
	s.events[r.event]++
}

func (s shardTotals) String() string {
	var kinds, events []string
	for _, k := range shardFaultKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, s.byFault[k]))
	}
	for _, k := range shardEvents {
		events = append(events, fmt.Sprintf("%s %d", k, s.events[k]))
	}
	return fmt.Sprintf("%d shards over %d members, %d terms, %d moves of a shard to another member (%d hand-overs asked), %d faults (%s), events once quiet (%s) moving %d shards, none twice, %d checks, 0 violations",
		s.shards, s.members, s.terms, s.moves, s.handOvers, s.faults, strings.Join(kinds, ", "), strings.Join(events, ", "), s.eventMoves, s.checks)
}

type shardResult struct {
	seed                                             uint64
	err                                              error
	shards, members, terms, moves, handOvers, faults int
	eventMoves, checks                               int
	event                                            string
	byFault                                          map[string]int
	trace                                            []string
}

func (r shardResult) summary() string {
	return fmt.Sprintf("seed %d: %d shards, %d members, %d terms, %d moves, %d faults %v, then %s, %d checks", r.seed, r.shards, r.members, r.terms, r.moves, r.faults, r.byFault, r.event, r.checks)
}

var (
	shardFaultKinds = []string{"crash", "stop", "join", "pause", "partition", "oneway", "lag", "stall", "watchend", "standdown", "purge", "sick"}
	shardEvents     = []string{"join", "leave", "crash", "sick"}
)

const (
	shardGroup       = "g"
	shardFaultPhase  = 30 * time.Second
	shardJoinSettle  = 300 * time.Millisecond // shards' joinSettle
	shardHandOverMax = 5 * time.Second        // shards' handOverTimeout
	shardRetry       = time.Second            // shards' retryDelay
	shardAwait       = time.Second            // shards' candidateWait
	shardLeaveWithin = 5 * time.Second        // shards' default WithLeaveTimeout
)

// shardWorld is one seed's run of a shard group.
type shardWorld struct {
	*simBase
	n           int
	ttl         time.Duration
	keys        []*simWorld  // one election per shard
	slots       []*simMember // the current process of each member
	runs        []int        // the processes each slot has run
	all         []*simMember
	weights     []int // each slot's weight
	sameWeights bool

	// lastHolder is each shard's latest holder; moves counts the shards'
	// moves since the planned event (nil until then).
	lastHolder  []string
	moves       []int
	quiet       bool // the planned event is not yet due: nothing may move
	stage       string
	stageAt     time.Time // when the stage began
	stageBy     time.Time // when the spread must be even again
	event       string
	eventMember string // who joined, left, crashed or turned unhealthy
	budget      int    // the fewest moves the event needs
	eventAt     time.Time
	settledAt   time.Time
	handOvers   int
	moved       int // shards that moved to another member
	faults      int
	byFault     map[string]int
	seen        map[*simNode][3]int // each node's terms begun and ended, and whether it runs, as last seen
	dirty       map[*simWorld]bool  // the shards whose elections stepped since the last check
	fullAt      time.Time           // when every shard is checked next
}

// simMember is one process of a shard group member.
type simMember struct {
	sw       *shardWorld
	slot     int
	name     string
	weight   int
	alive    bool // the process runs (false once crashed or done)
	leaving  bool // stopping: it hands its shards over
	left     bool // done leaving: its elections stop
	leaveBy  time.Time
	joined   bool // the join settle has passed
	healthy  bool
	drift    float64
	base     time.Time
	baseTrue time.Time
	paused   time.Time
	cut      time.Time
	oneway   time.Time
	stall    time.Time
	roll     map[string]simHeard
	asked    bool
	nodes    []*simNode // each shard's election, or nil
	stopping []bool
	handing  []time.Time // when each hand-over in flight began (true time)
	retryAt  []time.Time // local time
	passGen  int
	passAt   time.Time
	said     string    // the last announcement, for "changed"
	sayNext  time.Time // the next periodic announcement (true time)
	seq      uint64    // announcements made, each numbered
}

type simHeard struct {
	p  shardplan.Peer
	at time.Time // local time of the hearer
	// since and seq: the run that announced (its start, true time) and
	// the announcement's number in it (shards' Announcement.Seq).
	since time.Time
	seq   uint64
}

func (m *simMember) local(t time.Time) time.Time {
	return m.base.Add(time.Duration(float64(t.Sub(m.baseTrue)) * (1 + m.drift)))
}

// simulateShards runs one seed.
func simulateShards(seed uint64, verbose bool) shardResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ttls := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}
	sw := &shardWorld{simBase: &simBase{rng: rng, seed: seed, t0: t0, now: t0, verbose: verbose}, byFault: map[string]int{}, seen: map[*simNode][3]int{}, dirty: map[*simWorld]bool{}}
	sw.ttl = ttls[rng.IntN(len(ttls))]
	msgTTL := rng.IntN(2) == 0
	sw.n = 1 + rng.IntN(12)
	slots := 2 + rng.IntN(4) // the last slot joins later
	sw.b = simkv.New(t0, sw.ttl, msgTTL)
	sw.b.SetLateness(func(rev uint64) time.Duration {
		h := (rev + seed) * 0x9e3779b97f4a7c15
		return time.Duration(h % uint64(simMaxLate+1))
	})
	sw.b.SetWatchLag(func() time.Duration {
		d := sw.dur(50*time.Microsecond, 2*time.Millisecond)
		if sw.rng.IntN(20) == 0 {
			d = sw.dur(2*time.Millisecond, 100*time.Millisecond)
		}
		sw.at(sw.now.Add(d), sw.flushWatches)
		return d
	})
	for s := range sw.n {
		k := &simWorld{simBase: sw.simBase, key: shardKey(s), ttl: sw.ttl, msgTTL: msgTTL, nodes: make([]*simNode, slots),
			lastToken: map[int]uint64{}, stamps: map[simWriteID]keymsg.Stamp{}, actions: map[[2]int64]int{}}
		k.stepped = sw.stepped
		sw.keys = append(sw.keys, k)
	}
	sw.lastHolder = make([]string, sw.n)
	sw.slots = make([]*simMember, slots)
	sw.runs = make([]int, slots)
	sw.weights = make([]int, slots)
	for i := range slots {
		sw.weights[i] = 1
		if rng.IntN(6) == 0 {
			sw.weights[i] = 2
		}
	}
	sw.sameWeights = !slices.Contains(sw.weights, 2)
	sw.logf("seed %d: %d shards, %d member slots (weights %v), ttl %v, per-message TTL %v", seed, sw.n, slots, sw.weights, sw.ttl, msgTTL)
	for i := range slots - 1 {
		sw.startMember(i, sw.dur(0, sw.ttl))
	}
	quietFrom := t0.Add(shardFaultPhase)
	for at := t0.Add(sw.dur(0, 2*time.Second)); at.Before(quietFrom); at = at.Add(sw.dur(200*time.Millisecond, 3*sw.ttl)) {
		sw.at(at, sw.fault)
	}
	// After the last fault: every slot runs again, and the group settles.
	sw.at(quietFrom, func() {
		sw.logf("the faults end")
		sw.calm = true
		for i, m := range sw.slots[:slots-1] {
			if m == nil || !m.alive || m.leaving {
				sw.startMember(i, sw.dur(0, sw.ttl))
			}
		}
		// The last faults heal within two TTLs; a renewal whose outcome
		// they left unknown ends its term within a TTL after.
		sw.stage, sw.stageAt, sw.stageBy = "after the faults", sw.now, sw.now.Add(sw.settleBound())
		sw.settledAt = sw.now.Add(3*sw.ttl + time.Second)
	})
	end := quietFrom.Add(3*sw.settleBound() + 10*time.Second)
	for steps := 0; sw.events.Len() > 0 && sw.err == nil; steps++ {
		if steps > 5_000_000 {
			sw.fail("more than 5,000,000 events: something loops")
			break
		}
		ev := heap.Pop(&sw.events).(simEvent)
		if ev.at.After(end) {
			break
		}
		sw.now = ev.at
		ev.fn()
		sw.check()
		if sw.stage == "done" {
			break
		}
	}
	if sw.err == nil && sw.stage != "done" {
		sw.fail("the run ended in stage %q: the group never settled", sw.stage)
	}
	r := shardResult{seed: seed, err: sw.err, shards: sw.n, members: slots, moves: sw.moved, handOvers: sw.handOvers, faults: sw.faults,
		checks: sw.res.checks, event: sw.event, byFault: sw.byFault, trace: sw.trace}
	for _, k := range sw.keys {
		for _, n := range k.all {
			r.terms += n.won
		}
	}
	for _, c := range sw.moves {
		r.eventMoves += c
	}
	return r
}

// settleBound is how long after the last fault, or after the planned
// event, the group must be spread evenly again: a restart's wait, a crashed
// member's silence on the roll and its keys' expiry (each about a TTL,
// with the broker's lateness), a standby's backoff and a hand-over's
// retries.
func (sw *shardWorld) settleBound() time.Duration { return 6*sw.ttl + 8*time.Second }

func (sw *shardWorld) flushWatches() {
	for _, k := range sw.keys {
		k.flushWatches()
	}
}

// shardKey names shard s's election key.
func shardKey(s int) string { return fmt.Sprintf("%s.%d", shardGroup, s) }

// members

// startMember starts a new process in slot after a delay, once its last
// process's elections have ended.
func (sw *shardWorld) startMember(slot int, after time.Duration) {
	sw.at(sw.now.Add(after), func() {
		if old := sw.slots[slot]; old != nil {
			if old.alive && !old.left && !old.leaving {
				return // it runs (started again meanwhile)
			}
			if old.alive && !old.left {
				sw.startMember(slot, 100*time.Millisecond) // it is still leaving
				return
			}
			for _, n := range old.nodes {
				if n != nil && n.alive {
					sw.startMember(slot, 100*time.Millisecond)
					return
				}
			}
		}
		m := &simMember{sw: sw, slot: slot, name: sw.runName(slot), weight: sw.weights[slot], alive: true, healthy: true,
			drift: (sw.rng.Float64()*2 - 1) * simMaxDrift, base: sw.now.Add(sw.dur(-simMaxOffset, simMaxOffset)), baseTrue: sw.now,
			roll: map[string]simHeard{}, nodes: make([]*simNode, sw.n), stopping: make([]bool, sw.n),
			handing: make([]time.Time, sw.n), retryAt: make([]time.Time, sw.n)}
		sw.slots[slot] = m
		sw.runs[slot]++
		sw.all = append(sw.all, m)
		sw.logf("%s joins", m.name)
		m.announce(true, true)
		sw.at(sw.now.Add(shardJoinSettle), func() {
			m.joined = true
			m.pass()
		})
	})
}

// wake has m decide again soon, as a change wakes a group's loop.
func (m *simMember) wake() {
	m.schedule(m.sw.now.Add(m.sw.dur(10*time.Microsecond, time.Millisecond)))
}

// schedule has m pass at t unless a pass is due earlier.
func (m *simMember) schedule(t time.Time) {
	sw := m.sw
	if !m.passAt.IsZero() && !m.passAt.After(t) && m.passAt.After(sw.now) {
		return
	}
	m.passGen++
	gen := m.passGen
	m.passAt = t
	sw.at(t, func() {
		if gen == m.passGen {
			m.passAt = time.Time{}
			m.pass()
		}
	})
}

// running reports whether m's loop runs: its process is up and has not
// finished leaving.
func (m *simMember) running() bool { return m.alive && !m.left && m.sw.slots[m.slot] == m }

// pass is one turn of a member's loop (shards' run.pass): it drops silent
// members, decides with shardplan.Decide and acts on the plan.
func (m *simMember) pass() {
	sw := m.sw
	if !m.running() || !m.joined {
		return
	}
	if sw.now.Before(m.paused) {
		m.schedule(m.paused)
		return
	}
	now := m.local(sw.now)
	interval, silence := shardplan.AnnounceInterval(sw.ttl), shardplan.RollSilence(sw.ttl)
	next := sw.now.Add(interval)
	for _, id := range m.rollNames() {
		if now.Sub(m.roll[id].at) > silence {
			delete(m.roll, id)
			sw.logf("%s drops silent %s from its roll", m.name, id)
		}
	}
	st := shardplan.State{N: sw.n, Self: shardplan.Member{Identity: m.name, Weight: m.weight, Healthy: m.healthy}, Leaving: m.leaving,
		Held: map[int]time.Time{}, Running: map[int]bool{}, Handing: map[int]bool{}, RetryAt: map[int]time.Time{}, Now: now}
	for _, id := range m.rollNames() {
		st.Peers = append(st.Peers, m.roll[id].p)
	}
	for s, n := range m.nodes {
		if n != nil && !n.alive {
			m.nodes[s], m.stopping[s] = nil, false // its Start returned
			n = nil
		}
		if !m.handing[s].IsZero() && (n == nil || !n.active || !sw.now.Before(m.handing[s].Add(shardHandOverMax))) {
			if n != nil && n.active {
				m.retryAt[s] = now.Add(shardRetry) // it timed out
			}
			m.handing[s] = time.Time{}
		}
		if n == nil {
			continue
		}
		st.Running[s] = m.stopping[s]
		if n.active {
			st.Held[s] = n.local(n.since)
		}
		if !m.handing[s].IsZero() {
			st.Handing[s] = true
			next = earliest(next, m.handing[s].Add(shardHandOverMax))
		}
		if !m.retryAt[s].IsZero() {
			st.RetryAt[s] = m.retryAt[s]
		}
	}
	if m.leaving && !m.left && (m.doneLeaving(st) || !now.Before(m.leaveBy)) {
		m.stopAll()
		return
	}
	plan := shardplan.Decide(st)
	for _, s := range plan.Start {
		sw.startElection(m, s)
	}
	for _, mv := range plan.HandOver {
		m.handOver(mv.Shard, mv.To)
	}
	for _, s := range plan.Stop {
		m.stopping[s], m.nodes[s].stopping = true, true
		sw.keys[s].notify(m.nodes[s], input{kind: inStop})
	}
	if !plan.WakeAt.IsZero() {
		next = earliest(next, m.trueAt(plan.WakeAt))
	}
	for _, at := range m.retryAt {
		if !at.IsZero() && now.Before(at) {
			next = earliest(next, m.trueAt(at))
		}
	}
	if m.leaving {
		next = earliest(next, m.trueAt(m.leaveBy))
	}
	m.announce(m.asked, false)
	m.asked = false
	m.schedule(earliest(next, m.sayNext))
}

func (m *simMember) trueAt(l time.Time) time.Time {
	return m.baseTrue.Add(time.Duration(float64(l.Sub(m.base))/(1+m.drift)) + time.Nanosecond)
}

func (m *simMember) rollNames() []string {
	names := make([]string, 0, len(m.roll))
	for id := range m.roll {
		names = append(names, id)
	}
	slices.Sort(names)
	return names
}

// doneLeaving reports whether a leaving member has nothing left to hand
// over (shards' run.doneLeaving).
func (m *simMember) doneLeaving(st shardplan.State) bool {
	if len(st.Handing) > 0 {
		return false
	}
	for _, h := range m.roll {
		if !h.p.Leaving {
			return len(st.Held) == 0
		}
	}
	return true
}

// stopAll ends a leaving member: each election stops, a leader offering
// its key to the best standby as a stopping election does, and the member
// says it has left.
func (m *simMember) stopAll() {
	sw := m.sw
	sw.logf("%s has left", m.name)
	for s, n := range m.nodes {
		if n == nil || !n.alive || m.stopping[s] {
			continue
		}
		m.stopping[s], n.stopping = true, true
		k := sw.keys[s]
		stop := input{kind: inStop}
		stop.handOver = decide(policyInput{self: shardCandidate(n), roll: shardRoll(k, n)}).successor
		k.notify(n, stop)
	}
	m.announce(true, false)
	m.left = true
}

// handOver hands shard s over to to, as shards' run.handOver does: it
// waits (up to a second) for to to stand in the shard's election, then
// asks the election to hand over, which its steward refuses unless to
// stands.
func (m *simMember) handOver(s int, to string) {
	sw := m.sw
	m.handing[s] = sw.now
	sw.handOvers++
	stands := func() bool {
		for _, c := range sw.keys[s].nodes {
			if c != nil && c.alive && c.name == to && !c.stopping && c.m.cfg.offers {
				return true
			}
		}
		return false
	}
	wait := shardAwait
	if stands() {
		wait = sw.dur(200*time.Microsecond, 5*time.Millisecond)
	}
	sw.logf("%s hands shard %d over to %s", m.name, s, to)
	sw.at(sw.now.Add(wait), func() {
		n := m.nodes[s]
		if n == nil || !n.alive || !n.active {
			m.handing[s] = time.Time{}
			m.wake()
			return
		}
		if !stands() {
			sw.logf("%s's hand-over of shard %d: %s does not stand", m.name, s, to)
			m.handing[s] = time.Time{}
			m.retryAt[s] = m.local(sw.now).Add(shardRetry)
			m.wake()
			return
		}
		sw.keys[s].notify(n, input{kind: inHandOver, handOver: handOver{to: to, instance: to}})
	})
}

// runName names the member that slot's next process runs as: each run is
// a member of its own, as each Start of a shards.Group has an instance of
// its own (its name in the group is identity/instance).
func (sw *shardWorld) runName(slot int) string {
	if sw.runs[slot] == 0 {
		return fmt.Sprintf("m%d", slot)
	}
	return fmt.Sprintf("m%d.%d", slot, sw.runs[slot])
}

// startElection starts m's election of shard s: the real lease machine,
// on m's clock, hindered by m's faults.
func (sw *shardWorld) startElection(m *simMember, s int) {
	k := sw.keys[s]
	if old := k.nodes[m.slot]; old != nil && old.alive {
		// The member's previous process still stops its election of s.
		m.retryAt[s] = m.local(sw.now).Add(100 * time.Millisecond)
		return
	}
	rng := rand.New(rand.NewPCG(sw.rng.Uint64(), sw.rng.Uint64()))
	cfg := machineConfig{identity: m.name, instance: m.name, key: k.key, writes: true, releaseOnStop: true, timings: simTimings(rng), random: rng.Int64N, offers: true}
	tm, _ := cfg.timings(k.ttl)
	n := &simNode{w: k, id: m.slot, name: m.name, identity: m.name, drift: m.drift, base: m.base, baseTrue: m.baseTrue, alive: true, started: sw.now,
		paused: m.paused, cut: m.cut, oneway: m.oneway, stall: m.stall}
	var log Logger = nopLogger{}
	if sw.verbose {
		log = simLog{k, m.name + "/" + k.key}
	}
	n.log = log
	k.campaign(n, cfg, tm)
	k.nodes[m.slot] = n
	k.all = append(k.all, n)
	m.nodes[s], m.stopping[s] = n, false
	_, born, _ := sw.b.Status(sw.now)
	sw.logf("%s stands for shard %d", m.name, s)
	k.step(n, input{kind: inStart, now: n.local(sw.now), born: born})
}

// stepped follows a member's election: a term that begins or ends wakes
// the member's loop (OnAssigned, OnRevoked), and a new holder of a shard
// is a move.
func (sw *shardWorld) stepped(n *simNode) {
	var m *simMember
	for _, c := range sw.all {
		if c.slot == n.id && c.nodes != nil && slices.Contains(c.nodes, n) {
			m = c
		}
	}
	if m == nil {
		return
	}
	sw.dirty[n.w] = true
	seen := sw.seen[n]
	if seen == [3]int{n.won, n.lost, btoi(n.alive)} {
		return // nothing the member's loop hears of
	}
	sw.seen[n] = [3]int{n.won, n.lost, btoi(n.alive)}
	if n.won != seen[0] {
		s := slices.Index(m.nodes, n)
		if prev := sw.lastHolder[s]; prev != n.name {
			sw.lastHolder[s] = n.name
			if prev != "" {
				sw.moved++
				sw.logf("shard %d moves from %s to %s", s, prev, n.name)
				if sw.quiet {
					sw.fail("shard %d moved from %s to %s in a quiet group", s, prev, n.name)
				}
				if sw.moves != nil {
					// One member of equal weight joined or went: only shards
					// moving to or from it need to move (Assign moves the
					// fewest; with weights a remainder may move between
					// the others).
					if sw.sameWeights && (sw.event == "join" && n.name != sw.eventMember || sw.event != "join" && prev != sw.eventMember) {
						sw.fail("shard %d moved from %s to %s after %s's %s: only its shards should move", s, prev, n.name, sw.eventMember, sw.event)
					}
					sw.moves[s]++
					if moved := sumOf(sw.moves); moved > sw.budget {
						sw.fail("the %s of %s moved %d shards, more than the %d it needs", sw.event, sw.eventMember, moved, sw.budget)
					}
					if sw.moves[s] > 1 {
						sw.fail("shard %d moved %d times after one %s (now from %s to %s)", s, sw.moves[s], sw.event, prev, n.name)
					}
				}
			}
		}
	}
	m.wake()
}

// announce publishes m's announcement to the others when it changed, when
// the periodic one is due, or when force; with ask, it asks them to
// announce themselves. Each copy arrives after a network delay unless
// lost.
func (m *simMember) announce(force, ask bool) {
	sw := m.sw
	p := shardplan.Peer{Member: shardplan.Member{Identity: m.name, Weight: m.weight, Healthy: m.healthy}, Leaving: m.leaving}
	for s, n := range m.nodes {
		switch {
		case n == nil || !n.alive || m.left:
		case n.active:
			p.Held = append(p.Held, shardplan.Held{Shard: s, Token: n.token})
		case !m.stopping[s]:
			p.Standing = append(p.Standing, s)
		}
	}
	said := fmt.Sprint(p)
	if !force && said == m.said && sw.now.Before(m.sayNext) {
		return
	}
	m.said, m.sayNext = said, sw.now.Add(shardplan.AnnounceInterval(sw.ttl))
	m.seq++
	h := simHeard{p: p, since: m.baseTrue, seq: m.seq}
	if sw.now.Before(m.cut) {
		return // lost
	}
	for _, o := range sw.slots {
		if o == nil || o == m || !o.running() || sw.rng.IntN(100) == 0 {
			continue
		}
		d := sw.dur(100*time.Microsecond, 3*time.Millisecond)
		if sw.rng.IntN(50) == 0 {
			d = sw.dur(3*time.Millisecond, 300*time.Millisecond)
		}
		sw.at(sw.now.Add(d), func() { o.hear(h, ask) })
	}
}

// hear takes another member's announcement in (shards' Group.hear).
func (m *simMember) hear(h simHeard, ask bool) {
	sw := m.sw
	if !m.running() || sw.now.Before(m.cut) {
		return
	}
	if sw.now.Before(m.paused) {
		sw.at(m.paused, func() { m.hear(h, ask) })
		return
	}
	// Only a member's latest announcement counts: the network's delays
	// reorder them (shards' Announcement.supersedes). Each run of a slot
	// is a member of its own (runName), as each Start of a shards.Group
	// has its own instance.
	if old, ok := m.roll[h.p.Identity]; !ok || h.seq > old.seq {
		h.at = m.local(sw.now)
		m.roll[h.p.Identity] = h
	}
	if ask {
		m.asked = true
	}
	m.wake()
}

// faults

// fault draws one fault and applies it.
func (sw *shardWorld) fault() {
	kind := shardFaultKinds[sw.rng.IntN(len(shardFaultKinds))]
	var up []*simMember
	for _, m := range sw.slots {
		if m != nil && m.running() && !m.leaving {
			up = append(up, m)
		}
	}
	pick := func() *simMember {
		if len(up) == 0 {
			return nil
		}
		return up[sw.rng.IntN(len(up))]
	}
	heal := func() time.Duration { return sw.dur(sw.ttl/10, 2*sw.ttl) }
	nodesOf := func(m *simMember) []*simNode {
		var ns []*simNode
		for _, n := range m.nodes {
			if n != nil && n.alive {
				ns = append(ns, n)
			}
		}
		return ns
	}
	switch kind {
	case "crash":
		m := pick()
		if m == nil {
			return
		}
		sw.logf("FAULT %s crashes", m.name)
		sw.crash(m)
		sw.startMember(m.slot, sw.dur(0, 2*sw.ttl))
	case "stop":
		m := pick()
		if m == nil {
			return
		}
		sw.leave(m)
		sw.startMember(m.slot, sw.dur(0, 3*sw.ttl))
	case "join":
		slot := -1
		for i, m := range sw.slots {
			if m == nil {
				slot = i
			}
		}
		if slot < 0 || slot == len(sw.slots)-1 && sw.rng.IntN(2) == 0 {
			return
		}
		sw.startMember(slot, 0)
	case "pause":
		m := pick()
		if m == nil {
			return
		}
		d := sw.dur(sw.ttl/5, 2*sw.ttl)
		sw.logf("FAULT %s paused for %v", m.name, d)
		m.paused = later(m.paused, sw.now.Add(d))
		for _, n := range nodesOf(m) {
			n.paused = m.paused
			sw.at(n.paused, func() {
				if n.alive && !n.busy && !sw.now.Before(n.paused) {
					n.w.drain(n)
					if !n.busy {
						n.w.step(n, input{kind: inTick, now: n.local(sw.now)})
					}
				}
			})
		}
	case "partition", "oneway", "stall":
		m := pick()
		if m == nil {
			return
		}
		d := heal()
		until := sw.now.Add(d)
		sw.logf("FAULT %s: %s for %v", kind, m.name, d)
		switch kind {
		case "partition":
			m.cut, m.stall = later(m.cut, until), later(m.stall, until)
		case "oneway":
			m.oneway = later(m.oneway, until)
		case "stall":
			m.stall = later(m.stall, until)
		}
		for _, n := range nodesOf(m) {
			n.cut, n.oneway, n.stall = later(n.cut, m.cut), later(n.oneway, m.oneway), later(n.stall, m.stall)
		}
	case "lag", "watchend":
		m := pick()
		if m == nil {
			return
		}
		ns := nodesOf(m)
		if len(ns) == 0 {
			return
		}
		n := ns[sw.rng.IntN(len(ns))]
		k := n.w
		if kind == "lag" {
			if len(k.history) < 2 {
				return
			}
			d := heal()
			old := k.history[len(k.history)-2]
			sw.logf("FAULT %s reads %s from a replica stuck at revision %d for %v", m.name, k.key, old.Revision, d)
			n.staleMsg, n.staleUntil = &old, sw.now.Add(d)
			break
		}
		if n.watcher == nil {
			return
		}
		sw.logf("FAULT %s's watch of %s ends", m.name, k.key)
		gen := n.watchGen
		sw.at(later(n.lastDlv, sw.now), func() {
			if n.watchGen == gen {
				k.deliver(n, input{kind: inWatchEnded, err: errors.New("nats: consumer deleted")})
			}
		})
	case "standdown", "purge":
		if !sw.keys[sw.rng.IntN(sw.n)].standDown(kind == "purge") {
			return
		}
	case "sick":
		m := pick()
		if m == nil {
			return
		}
		d := heal()
		sw.logf("FAULT %s's health check fails for %v", m.name, d)
		m.healthy = false
		m.wake()
		sw.at(sw.now.Add(d), func() {
			sw.logf("%s is healthy again", m.name)
			m.healthy = true
			m.wake()
		})
	}
	sw.faults++
	sw.byFault[kind]++
}

// crash ends m's process and its elections at once.
func (sw *shardWorld) crash(m *simMember) {
	m.alive = false
	for _, n := range m.nodes {
		if n != nil && n.alive {
			n.alive = false
			n.w.stopWatch(n)
		}
	}
}

// leave stops m as Start's context ending does: it announces that it
// leaves and hands its shards over, within the leave timeout.
func (sw *shardWorld) leave(m *simMember) {
	sw.logf("FAULT %s is stopped", m.name)
	m.leaving = true
	m.leaveBy = m.local(sw.now).Add(shardLeaveWithin)
	m.wake()
}

func sumOf(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checks

// check tests the promises at this instant: each shard's election as the
// election simulator tests its key, then the group's stage.
func (sw *shardWorld) check() {
	// A second holder can only appear as an election steps; every 50ms
	// each is checked anyway, which asks its hand-over policy as a
	// steward does.
	full := !sw.now.Before(sw.fullAt)
	if full {
		sw.fullAt = sw.now.Add(50 * time.Millisecond)
	}
	for _, k := range sw.keys {
		if full || sw.dirty[k] {
			k.check()
		}
	}
	clear(sw.dirty)
	if sw.err != nil || sw.stage == "" || sw.stage == "done" {
		return
	}
	switch {
	case sw.quiet && !sw.now.Before(sw.eventAt) && sw.moves == nil:
		sw.planned()
		return
	case sw.quiet && !sw.now.Before(sw.eventAt):
		sw.stage = "done"
		return
	case sw.quiet || sw.now.Before(sw.settledAt):
		return
	}
	ok, why := sw.even()
	switch {
	case ok:
		// Even: a quiet spell follows, in which nothing may move, then the
		// planned event (or, after it, the end).
		what := "faults end"
		if sw.moves != nil {
			what = sw.event
		}
		sw.logf("the group is even %v after the %s", sw.now.Sub(sw.stageAt).Round(time.Millisecond), what)
		sw.quiet, sw.eventAt = true, sw.now.Add(sw.dur(2*sw.ttl, 4*sw.ttl))
	case sw.now.After(sw.stageBy):
		sw.fail("%v %s, the group is not even: %s", sw.now.Sub(sw.stageAt).Round(time.Millisecond), sw.stage, why)
	}
}

// planned performs the planned event once the group has been quiet: a
// join (a member that never ran, or one started again), a member stopped
// or crashed, or a member's health check failing for good; from then on
// moves are counted.
func (sw *shardWorld) planned() {
	sw.quiet = false
	var up []*simMember
	free := -1
	for i, m := range sw.slots {
		switch {
		case m != nil && m.running() && !m.leaving:
			up = append(up, m)
		case m == nil || !m.alive || m.left:
			free = i
		}
	}
	sw.event = shardEvents[sw.rng.IntN(len(shardEvents))]
	if len(up) < 2 && free >= 0 {
		sw.event = "join"
	}
	if sw.event == "join" && free < 0 {
		sw.event = "leave"
	}
	sw.moves = make([]int, sw.n)
	// A joining member counts once its join settle has passed.
	sw.stage, sw.stageAt, sw.stageBy, sw.settledAt = "after the "+sw.event, sw.now, sw.now.Add(sw.settleBound()), sw.now.Add(shardJoinSettle+time.Millisecond)
	m := up[sw.rng.IntN(len(up))]
	sw.eventMember = m.name
	if sw.event == "join" {
		sw.eventMember = sw.runName(free)
	}
	// The fewest moves the event needs: those the assignment of the
	// members after it makes from the holders before it (Assign moves the
	// fewest, and its answer holds as the group follows it).
	var after []shardplan.Member
	for _, u := range up {
		if u != m || sw.event == "join" {
			after = append(after, shardplan.Member{Identity: u.name, Weight: u.weight, Healthy: true})
		}
	}
	switch sw.event {
	case "join":
		after = append(after, shardplan.Member{Identity: sw.eventMember, Weight: sw.weights[free], Healthy: true})
	case "sick":
		after = append(after, shardplan.Member{Identity: m.name, Weight: m.weight})
	}
	sw.budget = 0
	for s, d := range shardplan.Assign(sw.n, after, sw.lastHolder) {
		if d != sw.lastHolder[s] {
			sw.budget++
		}
	}
	sw.logf("the %s should move %d shards", sw.event, sw.budget)
	switch sw.event {
	case "join":
		sw.logf("EVENT m%d joins", free)
		sw.startMember(free, 0)
	case "leave":
		sw.logf("EVENT %s leaves", m.name)
		sw.leave(m)
	case "crash":
		sw.logf("EVENT %s crashes", m.name)
		sw.crash(m)
	case "sick":
		sw.logf("EVENT %s's health check fails", m.name)
		m.healthy = false
		m.wake()
	}
}

// even reports whether the group is spread evenly now: every shard held,
// and each running healthy member, of weight w of the members' total W,
// holding between floor(N*w/W) and ceil(N*w/W) shards; if not, why not.
func (sw *shardWorld) even() (bool, string) {
	var members []*simMember
	total := 0
	for _, m := range sw.slots {
		if m != nil && m.running() && !m.leaving && m.joined && m.healthy {
			members = append(members, m)
			total += m.weight
		}
	}
	if total == 0 {
		return false, "no healthy member runs"
	}
	held := map[string]int{}
	for s, k := range sw.keys {
		holder := ""
		for _, n := range k.all {
			if n.valid(sw.now) {
				holder = n.name
			}
		}
		if holder == "" {
			return false, fmt.Sprintf("shard %d has no holder", s)
		}
		held[holder]++
	}
	for _, m := range members {
		lo, hi := sw.n*m.weight/total, (sw.n*m.weight+total-1)/total
		if c := held[m.name]; c < lo || c > hi {
			return false, fmt.Sprintf("%s (weight %d of %d) holds %d of %d shards, not %d to %d", m.name, m.weight, total, c, sw.n, lo, hi)
		}
		delete(held, m.name)
	}
	if len(held) > 0 {
		return false, fmt.Sprintf("members that are not running healthy hold shards: %v", held)
	}
	return true, ""
}

// shardCandidate is a shard's candidate n as it answers who stands: the
// shard simulator runs no stewards, so its health is the fault's.
func shardCandidate(n *simNode) standing.Candidate {
	return standing.Candidate{Identity: n.identity, Instance: n.name, Priority: n.priority, Healthy: !n.sick}
}

// shardRoll is who stands in shard k's election, as its candidates other
// than n would answer: every running one, best first.
func shardRoll(k *simWorld, n *simNode) []standing.Candidate {
	var roll []standing.Candidate
	for _, c := range k.nodes {
		if c != nil && c != n && c.alive && c.obs == nil && !c.stopping && c.m.cfg.offers {
			roll = append(roll, shardCandidate(c))
		}
	}
	standing.Rank(roll)
	return roll
}
