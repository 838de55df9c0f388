package streams

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/simkv"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// The deterministic simulator: many candidates' lease machines and
// observers on one simulated bucket (internal/simkv, held to nats-server by
// its conformance test), under faults drawn from a seed: requests that are
// slow, lost, or applied with their answer lost; watches that lag, stall
// and end; processes paused past their deadlines, crashed, stopped and
// restarted; partitions one way and both ways; clocks that run at slightly
// different rates; the broker expiring keys up to 400 ms late; forced
// stand-downs, purges, keys vanishing without a marker, the bucket deleted
// and made again with revisions from 1, and TTL changes within the
// README's rules. After every event it checks the promises (see check).
// A seed replays exactly.

var (
	simSeeds = flag.Int("sim.seeds", defaultSimSeeds(), "simulator: how many seeds TestSimulate runs (2,000; 200 under the race detector)")
	simFrom  = flag.Uint64("sim.from", 1, "simulator: the first seed")
	simSeed  = flag.Uint64("sim.seed", 0, "simulator: replay this one seed, printing its events")
	simFor   = flag.Duration("sim.for", 0, "simulator: run seeds from sim.from until this much wall time has passed (the long mode)")
)

// defaultSimSeeds is how many seeds TestSimulate runs unless told: CI runs
// 2,000 without the race detector (go run ./cmd/simulate), and go test
// -race runs 200, enough to race the goroutines that share the seeds out.
func defaultSimSeeds() int {
	if raceDetector {
		return 200
	}
	return 2000
}

func TestSimulate(t *testing.T) {
	if *simSeed != 0 {
		r := simulate(*simSeed, true)
		t.Logf("%s\n%s", r.summary(), strings.Join(r.trace, "\n"))
		if r.err != nil {
			t.Fatalf("seed %d: %v", *simSeed, r.err)
		}
		return
	}
	var (
		mu     sync.Mutex
		totals simTotals
	)
	ran, failures := runSeeds(*simSeeds, "go run ./cmd/simulate -seed %d", func(seed uint64) error {
		r := simulate(seed, false)
		mu.Lock()
		totals.add(r)
		mu.Unlock()
		return r.err
	})
	t.Logf("simulated %d seeds from %d: %s", ran, *simFrom, totals)
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
}

// runSeeds runs one on seeds seeds from -sim.from (or on as many as fit in
// -sim.for), on every processor, until the first failure.
// It returns how many seeds ran, and for each that failed its error and
// the command that replays it (replay, given the seed).
func runSeeds(seeds int, replay string, one func(seed uint64) error) (int64, []string) {
	var (
		next     atomic.Uint64
		ran      atomic.Int64
		failed   atomic.Bool
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	next.Store(*simFrom)
	last := *simFrom + uint64(seeds)
	deadline := time.Time{}
	if *simFor > 0 {
		deadline = time.Now().Add(*simFor)
		last = ^uint64(0)
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				seed := next.Add(1) - 1
				if seed >= last || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				err := one(seed)
				ran.Add(1)
				if err != nil {
					failed.Store(true)
					mu.Lock()
					failures = append(failures, fmt.Sprintf("seed %d: %v\nreplay it: "+replay, seed, err, seed))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return ran.Load(), failures
}

// simTotals sums what the seeds did, to show the faults were exercised.
type simTotals struct {
	seeds, terms, faults, overlapsChecked int
	handOvers, landed                     int
	offers, taken, stopOffers, moves      int
	preferred, onward, pastTerm           int
	adopted, adoptedOnStop                int
	reportedHandOvers, reportedExpiries   int
	reportedRenewals                      int
	reportedHandOversUnsure               int
	seenHandOvers                         int
	byFault                               map[string]int
}

func (s *simTotals) add(r simResult) {
	s.seeds++
	s.terms += r.terms
	s.faults += r.faults
	s.overlapsChecked += r.checks
	s.handOvers += r.handOvers
	s.landed += r.landed
	s.offers += r.offers
	s.taken += r.taken
	s.stopOffers += r.stopOffers
	s.moves += r.moves
	s.preferred += r.preferred
	s.onward += r.onward
	s.pastTerm += r.pastTerm
	s.adopted += r.adopted
	s.adoptedOnStop += r.adoptedOnStop
	s.reportedHandOvers += r.reportedHandOvers
	s.reportedExpiries += r.reportedExpiries
	s.reportedRenewals += r.reportedRenewals
	s.reportedHandOversUnsure += r.reportedHandOversUnsure
	s.seenHandOvers += r.seenHandOvers
	if s.byFault == nil {
		s.byFault = map[string]int{}
	}
	for k, v := range r.byFault {
		s.byFault[k] += v
	}
}

func (s simTotals) String() string {
	var kinds []string
	for _, k := range simFaultKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, s.byFault[k]))
	}
	return fmt.Sprintf("%d terms, %d faults (%s), %d moves by the hand-over policy (%d leaders checked against a standby once quiet; %d announcements came in a later term than the one they were heard for), %d offers of the key (%d on stop, %d passed on past a refusal; %d taken up), %d hand-over releases (%d taken by the named candidate first), %d campaign writes of unknown outcome taken up as seen in the key (%d of them while stopping), observers' reports checked against who wrote what and why (%d hand-overs named, and %d more that were takes of a lapsed lease landing within it as the observer counts it; %d hand-overs delivered live; %d new terms after a lapsed lease; %d renewals), %d checks, 0 violations",
		s.terms, s.faults, strings.Join(kinds, ", "), s.moves, s.preferred, s.pastTerm, s.offers, s.stopOffers, s.onward, s.taken, s.handOvers, s.landed, s.adopted, s.adoptedOnStop,
		s.reportedHandOvers, s.reportedHandOversUnsure, s.seenHandOvers, s.reportedExpiries, s.reportedRenewals, s.overlapsChecked)
}

type simResult struct {
	seed                  uint64
	err                   error
	terms, faults, checks int
	handOvers, landed     int // hand-over releases stored, and those whose named candidate took the key next
	offers, taken         int // offers of the key sent, and those the named candidate took up
	moves                 int // terms the hand-over policy moved
	preferred             int // candidates the leader was checked against once the faults were over (checkPreferred)
	stopOffers            int // offers sent by stopping leaders
	onward                int // offers of stopping leaders passed on to the next standby after a refusal
	pastTerm              int // announcements delivered while a later term than the one they were heard for runs
	adopted               int // campaign writes of unknown outcome taken up as their writer saw them in the key
	adoptedOnStop         int // of those, by a candidate stopping (most by the stop's one read of the key)
	byFault               map[string]int
	trace                 []string
	// Observers' reports judged against who wrote what and why
	// (checkReport): hand-overs named, new terms after a lapsed lease,
	// renewals; hand-overs named that were takes of a lapsed lease
	// landing within it as the observer counts it, which it cannot tell;
	// hand-overs delivered live.
	reportedHandOvers, reportedExpiries, reportedRenewals int
	reportedHandOversUnsure, seenHandOvers                int
}

func (r simResult) summary() string {
	return fmt.Sprintf("seed %d: %d terms, %d faults %v, %d checks", r.seed, r.terms, r.faults, r.byFault, r.checks)
}

var simFaultKinds = []string{"crash", "stop", "pause", "partition", "oneway", "lag", "stall", "watchend", "standdown", "purge", "vanish", "recreate", "ttl", "handover", "sick"}

// Local clocks run at rates within simMaxDrift of true time and start
// within simMaxOffset of the broker's clock: over a seed's run they stay
// within the smallest safety margin (100 ms at TTL 1 s) of it, as the
// README asks of clocks (NTP slewing, not stepping).
const (
	simMaxDrift  = 0.0005
	simMaxOffset = 30 * time.Millisecond
)

const (
	simKey        = "k"
	simFaultPhase = 60 * time.Second
	simMaxLate    = 400 * time.Millisecond
)

// simBase is what the elections of one seed's run share: the seed's
// randomness, true time, the events due, the bucket, the trace, the first
// violation and the counts.
type simBase struct {
	rng     *rand.Rand
	seed    uint64
	t0      time.Time
	now     time.Time // true time; the broker's clock
	seq     uint64
	events  simQueue
	b       *simkv.Bucket
	verbose bool
	trace   []string
	res     simResult
	err     error
	// calm: requests are neither lost nor slower than 5ms (the shard
	// group simulator's quiet spells: a lease lapsed by a lost renewal
	// moves its shard).
	calm bool
}

// simWorld is one key's election in a seed's run: the election simulator
// runs one, the shard group simulator one per shard.
type simWorld struct {
	*simBase
	key    string
	ttl    time.Duration
	msgTTL bool
	// stopsInDoubt: one in four stored writes that take the key and whose
	// answer is lost are followed by a Stop before the answer is due (the
	// election simulator's; a shard's candidates stop with their member).
	stopsInDoubt bool
	nodes        []*simNode // the current process of each candidate
	all          []*simNode // every process that ever ran, for the checks
	obs          []*simNode // observers: machines with writes off

	epoch int // bumps when the bucket is made again
	// lastMove is when the hand-over policy last moved a term.
	lastMove time.Time
	// stamps are what each write said of itself (its headers), by
	// revision and write time: simkv keeps no headers.
	stamps      map[simWriteID]keymsg.Stamp
	lastToken   map[int]uint64 // the highest token of each epoch
	noStartTil  time.Time      // no candidate starts before (after a vanish or removal, as the README asks)
	lastTTLAt   time.Time      // when the TTL was last lowered
	lastHolder  string         // who the bucket last named as leader
	holderSince time.Time      // since when
	terms       []simTerm
	lastVanish  time.Time
	history     []simkv.Msg // the key's messages, for reads a lagging replica answers
	deposed     string      // the instance a forced stand-down removed, until another takes the key
	// sharedIdentity: the candidates are copies of two identities, h0 and
	// h1, told apart by their instances alone (one seed in four).
	sharedIdentity bool
	deposedAt      time.Time
	deposedTTL     time.Duration // the TTL at the stand-down: the sit-out lasts one
	handedOver     simHandOver   // the latest hand-over release, until someone takes the key
	removed        bool          // the bucket is deleted
	quietFrom      time.Time     // faults end here
	ledAfter       bool          // a leader was seen after the faults
	// faultsEnd is when the last fault's effects ended: the quiet phase's
	// start, or later, when a bucket deleted before it is made again.
	faultsEnd time.Time
	// stepped, when set, is told of every step of a node (the shard group
	// simulator follows its members' elections so).
	stepped func(n *simNode)
	actions map[[2]int64]int // (node, simulated second) → actions
	duties  map[[2]int64]int // (node, simulated second) → its steward's duties
	// heardLast is when each leader last takes in an announcement of each
	// sender: one connection's messages reach a subscriber in order, so a
	// late one holds back those sent after it.
	heardLast map[[2]*simNode]time.Time
	// msgs is every message of the key stored while observers watch, in
	// order, with who wrote it and why: the truth observers' reports are
	// judged against (checkReport).
	msgs []simMsg
}

// simHandOver is a stored release that hands the key over.
type simHandOver struct {
	to       string
	instance string    // "": any candidate of identity to
	node     *simNode  // the candidate ready describes
	at       time.Time // true time
	within   time.Duration
	// ready: when it was stored, the candidate named could take the key
	// at once (running, healthy, watching, unhindered); failures is how
	// many of its requests had failed then (a failure since excuses it).
	ready    bool
	failures int
}

// simTakeBound is how soon a candidate that a release names, and that was
// ready to take the key, must send the write that takes it unless a fault
// held it up since: it learns of the release by its watch, whose delivery
// may lag by up to 500ms, and writes at once.
const simTakeBound = 750 * time.Millisecond

type simTerm struct {
	epoch int
	token uint64
	name  string
}

type simNode struct {
	w  *simWorld
	id int
	// name is the candidate's instance, its own; identity is what its
	// writes say, which copies share in one seed in four (sharedIdentity).
	name, identity string
	m              *machine
	d              *driver     // its real driver, whose machine m is
	c              *campaigner // a candidate's: its real campaigner, driven by d
	log            Logger      // where its machine's lines go
	// failures counts its requests answered with an error (lost, refused,
	// timed out); sentAt is when it sent its latest request (true time).
	failures int
	sentAt   time.Time
	// priority and sick are what the candidate announces of itself to the
	// hand-over policy (WithPriority, a failing health check).
	priority int
	sick     bool
	// st is the real state of its steward (nil: it runs none); standGen
	// drops its older wake-ups; moving counts its moves not yet answered.
	// askedFor is the token of the term it last moved for.
	st         *stand
	healthFrom time.Time // when its stand's health last changed (true time)
	standGen   int
	moving     int
	confirmed  *policy // the move the answers to its latest question called for, not made yet
	askedFor   uint64
	drift      float64 // the local clock runs at 1+drift of true time
	base       time.Time
	baseTrue   time.Time
	alive      bool
	started    time.Time // true time
	crashed    time.Time // true time it crashed, if it did
	gen        int       // wake generation; older wakes are dropped
	busy       bool
	paused     time.Time // true time until which the process does not run
	inbox      []input
	watcher    *simkv.Watcher
	watchGen   int
	lastDlv    time.Time  // true time of the latest delivery scheduled
	cut        time.Time  // both ways partitioned until (true time)
	oneway     time.Time  // replies lost until (true time)
	stall      time.Time  // watch deliveries held until (true time)
	staleMsg   *simkv.Msg // what reads return until staleUntil: a lagging replica
	staleUntil time.Time
	active     bool      // a term runs
	until      time.Time // its deadline, local time
	token      uint64
	won        int
	lost       int
	stopping   bool
	obs        *Observer // an observer's judge, or nil for a candidate
	since      time.Time // when the term began (true time)
	wonAt      time.Time // the machine's hold that the term rests on
	holdToken  uint64    // the first term's token of that hold
	// toldAt is when the first write saying the running term's token was
	// stored (true time; zero until then): from it observers know the
	// token exactly.
	toldAt time.Time
	// beginsAt is when the hold's latest write was stored, if it said the
	// term begins as it lands (zero when a write since said it waits).
	beginsAt time.Time
	tookAt   time.Time // when its latest campaign write was stored (true time)
	// ttlRead is the process's latest answered read of the bucket's
	// settings (its sent time local), which the process's other elections
	// may have made: it serves a read whose since it meets.
	ttlRead *input
	// takingUp answers, in order, the offers of the key the machine took
	// in: each sends the answer back to the leader that offered.
	takingUp []func(err error)
	// told is what an observer last reported (every change, renewals
	// too); views are the views its machine passed it in the step under
	// way, which its reports judge.
	told    Leadership
	toldMsg Leadership // the last report on a message (not an expiry)
	views   []keyView
	// steps counts the observer's steps that reported; toldIn is the one
	// that made told.
	steps, toldIn int
}

// simClock is a node's clock for its real driver and term: its local time
// of the world's instant. It sets no timer (the world steps the driver);
// holding a func, it is not comparable, so no scheduler is kept for it.
type simClock struct{ now func() time.Time }

func (c simClock) Now() time.Time { return c.now() }
func (c simClock) NewTimer(time.Duration) clock.Timer {
	panic("simulator bug: a timer set on a simulated clock")
}

// clock is n's local clock.
func (n *simNode) clock() simClock { return simClock{func() time.Time { return n.local(n.w.now) }} }

func (n *simNode) local(t time.Time) time.Time {
	return n.base.Add(time.Duration(float64(t.Sub(n.baseTrue)) * (1 + n.drift)))
}

// trueAt is the first true instant at which the local clock reads l or later.
func (n *simNode) trueAt(l time.Time) time.Time {
	t := n.baseTrue.Add(time.Duration(float64(l.Sub(n.base)) / (1 + n.drift)))
	for n.local(t).Before(l) {
		t = t.Add(time.Nanosecond)
	}
	return t
}

func (n *simNode) valid(t time.Time) bool { return n.alive && n.active && n.local(t).Before(n.until) }

// event

type simEvent struct {
	at  time.Time
	seq uint64
	fn  func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (w *simBase) at(t time.Time, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	w.seq++
	heap.Push(&w.events, simEvent{at: t, seq: w.seq, fn: fn})
}

func (w *simBase) logf(format string, args ...any) {
	if !w.verbose {
		return // only a replayed seed prints its trace
	}
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs ", w.now.Sub(w.t0).Seconds())+fmt.Sprintf(format, args...))
}

func (w *simBase) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %.3fs: %s", w.now.Sub(w.t0).Seconds(), fmt.Sprintf(format, args...))
		w.logf("VIOLATION: %v", w.err)
	}
}

func (w *simBase) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// simulate runs one seed.
func simulate(seed uint64, verbose bool) simResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ttls := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}
	w := &simWorld{simBase: &simBase{rng: rng, seed: seed, t0: t0, now: t0, verbose: verbose, res: simResult{seed: seed, byFault: map[string]int{}}},
		key: simKey, lastToken: map[int]uint64{}, stamps: map[simWriteID]keymsg.Stamp{}, actions: map[[2]int64]int{}, duties: map[[2]int64]int{}}
	w.ttl = ttls[rng.IntN(len(ttls))]
	w.msgTTL = rng.IntN(2) == 0
	w.stopsInDoubt = true
	w.sharedIdentity = seed%4 == 3 // from the seed, not its draws: other seeds run as before
	w.b = simkv.New(t0, w.ttl, w.msgTTL)
	w.b.SetLateness(func(rev uint64) time.Duration {
		h := (rev + seed) * 0x9e3779b97f4a7c15
		return time.Duration(h % uint64(simMaxLate+1))
	})
	// The server's consumers get to each message a little after it is
	// stored; one replaced (or gone) by then is never delivered.
	w.b.SetWatchLag(func() time.Duration {
		d := w.dur(50*time.Microsecond, 2*time.Millisecond)
		if w.rng.IntN(20) == 0 {
			d = w.dur(2*time.Millisecond, 100*time.Millisecond)
		}
		w.at(w.now.Add(d), w.flushWatches)
		return d
	})
	n := 2 + rng.IntN(5)
	w.nodes = make([]*simNode, n)
	w.logf("seed %d: %d candidates, ttl %v, per-message TTL %v", seed, n, w.ttl, w.msgTTL)
	for i := range n {
		w.start(i, w.dur(0, w.ttl))
	}
	for i := range 1 + rng.IntN(2) {
		w.startObserver(i)
	}
	w.quietFrom = t0.Add(simFaultPhase)
	w.faultsEnd = w.quietFrom
	for at := t0.Add(w.dur(0, 2*time.Second)); at.Before(w.quietFrom); at = at.Add(w.dur(200*time.Millisecond, 4*w.ttl)) {
		w.at(at, w.fault)
	}
	// A bucket deleted before the quiet phase is made again up to
	// maxTTL + 2s into it (recreate): the run lasts that much longer.
	end := w.quietFrom.Add(w.liveBound() + w.maxTTL() + 2*time.Second + 5*w.ttl)
	var checkLed func()
	checkLed = func() {
		if due := w.faultsEnd.Add(w.liveBound()); w.now.Before(due) {
			w.at(due, checkLed)
			return
		}
		if !w.ledAfter {
			w.fail("no leader within %v after the last fault", w.liveBound())
		}
	}
	w.at(w.quietFrom.Add(w.liveBound()), checkLed)
	// Leadership goes where the policy says once the faults are over.
	var checkPreferred func()
	checkPreferred = func() {
		if due := w.faultsEnd.Add(w.liveBound() + w.preferBound()); w.now.Before(due) {
			w.at(due, checkPreferred)
			return
		}
		w.checkPreferred()
	}
	w.at(w.quietFrom.Add(w.liveBound()+w.preferBound()), checkPreferred)
	end = later(end, w.quietFrom.Add(w.liveBound()+w.preferBound()+time.Second))
	for steps := 0; w.events.Len() > 0 && w.err == nil; steps++ {
		if steps > 2_000_000 {
			w.fail("more than 2,000,000 events: something loops")
			break
		}
		ev := heap.Pop(&w.events).(simEvent)
		if ev.at.After(end) {
			break
		}
		w.now = ev.at
		ev.fn()
		w.check()
	}
	w.res.err = w.err
	w.res.trace = w.trace
	for _, n := range w.all {
		w.res.terms += n.won
	}
	return w.res
}

// liveBound is how long after the last fault heals a leader must lead: the
// README's slowest path is a forced stand-down seen late (a TTL to notice
// the key gone, a TTL's wait) behind a deposed leader's sit-out, with the
// broker's lateness and a standby's backoff.
func (w *simWorld) liveBound() time.Duration { return 4*w.maxTTL() + 3*time.Second }

func (w *simWorld) maxTTL() time.Duration { return max(w.ttl, 5*time.Second) }

// preferBound is how long after a candidate stands, healthy, a leader
// that should give way to it has done so: two moves (a chain of
// priorities), each after a minimum term, behind one lost announcement.
func (w *simWorld) preferBound() time.Duration {
	return 2*simMinTerm*w.maxTTL() + standing.AnnouncementInterval(w.maxTTL()) + 2*time.Second
}

// checkPreferred fails the seed when, with the faults long over, a leader
// with a steward still leads, in a term begun preferBound ago, though a
// candidate that has stood, healthy, as long should have taken over: one of a higher priority, or,
// while the leader has been unhealthy that long, any healthy one.
func (w *simWorld) checkPreferred() {
	var leader *simNode
	for _, n := range w.nodes {
		if n != nil && n.valid(w.now) {
			leader = n
		}
	}
	if leader == nil || leader.st == nil || leader.stopping {
		return
	}
	from := w.faultsEnd.Add(w.liveBound())
	for _, c := range w.nodes {
		if c == nil || c == leader || !c.alive || c.st == nil || c.stopping || !c.st.healthy {
			continue
		}
		// Counted from when both stood, healthy or not as now, and the
		// leader's term began: requests are still lost now and then, and
		// a term may end and begin again.
		since := later(later(from, leader.since), later(c.started, later(c.healthFrom, leader.healthFrom)))
		if w.now.Sub(since) < w.preferBound() {
			continue
		}
		w.res.preferred++
		if leader.st.healthy && c.priority > leader.priority || !leader.st.healthy {
			w.fail("%s (priority %d, healthy %v) leads %v after %s (priority %d, healthy) stood to take over: leadership did not go where the policy says",
				leader.name, leader.priority, leader.st.healthy, w.now.Sub(since).Round(time.Millisecond), c.name, c.priority)
		}
	}
}

// check tests the promises at this instant.
func (w *simWorld) check() {
	w.res.checks++
	var valid []*simNode
	for _, n := range w.all {
		if n.valid(w.now) {
			valid = append(valid, n)
		}
	}
	if len(valid) > 1 {
		var leaders []string
		for _, n := range valid {
			leaders = append(leaders, fmt.Sprintf("%s (token %d, valid until %.3fs local)", n.name, n.token, n.until.Sub(n.base).Seconds()))
		}
		w.fail("two leaders at once: %s", strings.Join(leaders, ", "))
	}
	if len(valid) == 1 && !w.now.Before(w.faultsEnd) {
		w.ledAfter = true
	}
	for _, o := range w.obs {
		w.checkObserver(o)
	}
}

// simMinTerm is the candidates' minimum term, in TTLs (WithMinTerm).
const simMinTerm = 2

// simStandingWait is how long a question of who stands collects answers,
// as standing.Standing does by default.
const simStandingWait = 250 * time.Millisecond

// roll is who stands, as the candidates would answer n's question of who
// stands: every other running candidate with a steward, best first, with
// its health as its steward last found it.
func (w *simWorld) roll(n *simNode) []standing.Candidate {
	var roll []standing.Candidate
	for _, c := range w.nodes {
		if c != nil && c != n && c.alive && c.st != nil && !c.stopping {
			roll = append(roll, c.candidate())
		}
	}
	standing.Rank(roll)
	return roll
}

// candidate is n as it announces itself and answers.
func (n *simNode) candidate() standing.Candidate {
	return n.st.self(n.standNow())
}

// standNow is n as its steward reads it for its stand.
func (n *simNode) standNow() standNow {
	return standNow{self: standing.Candidate{Identity: n.identity, Instance: n.name, Priority: n.priority, Leaving: n.stopping}, ttl: n.m.tm.ttl}
}

// simHealthEvery is how often the candidates run their health checks.
const simHealthEvery = time.Second

// stand steps n's real stand, the steward's state (stand.step), and does
// what it says, as the steward would, in the simulated world: its
// announcements reach the leaders that listen, unless lost; its question
// of who stands is answered by the running candidates after
// simStandingWait; its health check reads the fault that makes it fail;
// its moves go to the machine as a hand-over (moved).
func (w *simWorld) stand(n *simNode) {
	if n.st == nil || !n.alive {
		return
	}
	n.standGen++
	gen := n.standGen
	if w.now.Before(n.paused) {
		w.at(n.paused, func() {
			if gen == n.standGen {
				w.stand(n)
			}
		})
		return
	}
	now := n.local(w.now)
	var token uint64
	var started time.Time
	if t := n.c.term; t != nil && t.Valid() {
		token, started = t.Token(), t.Started()
	}
	n.st.follow(now, token, started, n.stopping)
	out := n.st.step(now, n.standNow())
	if out.announce {
		w.announce(n, n.candidate())
	}
	switch {
	case out.check:
		w.at(w.now.Add(w.dur(0, 20*time.Millisecond)), func() {
			if !n.alive {
				return
			}
			var err error
			if n.sick {
				err = errCheckFails
			}
			if n.st.checked(n.local(w.now), err) {
				n.healthFrom = w.now
				w.notify(n, input{kind: inHealth, unhealthy: err})
			}
			w.poke(n)
		})
	case out.ask != noDuty:
		// The candidates answer at once, as they stand now, and the
		// question gathers them for simStandingWait; one cut off from n
		// (or n itself cut off) is not heard, and no answer is no error.
		d, asked := out.ask, now
		var answers []standing.Candidate
		if !w.now.Before(n.cut) {
			for _, c := range w.roll(n) {
				if o := w.node(c.Identity, c.Instance); o != nil && !w.now.Before(o.cut) {
					answers = append(answers, c)
				}
			}
		}
		w.at(w.now.Add(simStandingWait), func() {
			if n.alive {
				n.st.answered(n.local(w.now), asked, d, token, answers, nil, n.standNow())
				if d == dutyConfirm {
					n.confirmed = n.st.move // the move these answers call for, if any
				}
				w.poke(n)
			}
		})
	case out.move != nil:
		w.moved(n, *out.move)
	}
	if out.check || out.ask != noDuty || out.move != nil {
		k := [2]int64{int64(n.id), int64(w.now.Sub(w.t0) / time.Second)}
		if w.duties[k]++; w.duties[k] > simMaxDutiesPerSecond {
			w.fail("%s's steward sent more than %d duties (checks, questions, moves) in one simulated second: it spins", n.name, simMaxDutiesPerSecond)
		}
	}
	if !out.wake.IsZero() {
		w.at(n.trueAt(out.wake), func() {
			if gen == n.standGen {
				w.stand(n)
			}
		})
	}
}

// simMaxDutiesPerSecond bounds a steward's checks, questions and moves: a
// check a second, a question and a confirmation a term, a move.
const simMaxDutiesPerSecond = 8

// poke steps n's stand once the event under way is done, as a steward's
// pass follows what pokes it.
func (w *simWorld) poke(n *simNode) {
	w.at(w.now, func() { w.stand(n) })
}

// announce carries n's announcement c to the leaders that listen: each
// takes it in for the term it listened for, unless it is lost.
func (w *simWorld) announce(n *simNode, c standing.Candidate) {
	for _, o := range w.nodes {
		if o == nil || o == n || !o.alive || o.st == nil || o.st.hears == 0 {
			continue
		}
		if w.now.Before(n.cut) || w.now.Before(o.cut) || w.rng.IntN(100) == 0 {
			continue
		}
		token := o.st.hears
		delay := w.dur(100*time.Microsecond, 3*time.Millisecond)
		if w.rng.IntN(20) == 0 {
			// Late: a subscriber's callbacks fall behind, and the word
			// comes under the term it was heard for, which may have
			// ended since.
			delay = w.dur(50*time.Millisecond, 6*time.Second)
		}
		if w.heardLast == nil {
			w.heardLast = map[[2]*simNode]time.Time{}
		}
		pair := [2]*simNode{n, o}
		at := later(w.now.Add(delay), w.heardLast[pair]) // in the order sent
		w.heardLast[pair] = at
		w.at(at, func() {
			if !o.alive {
				return
			}
			if token == o.st.hears || o.st.hears == 0 {
				o.st.hear(o.local(w.now), token, c)
				w.poke(o)
				return
			}
			// A later term runs: its roll holds what it heard, not
			// what a past term did.
			w.res.pastTerm++
			before := slices.Clone(o.st.roll.heard)
			o.st.hear(o.local(w.now), token, c)
			if !reflect.DeepEqual(before, o.st.roll.heard) {
				w.fail("%s's term %d took in %s's word heard for its past term %d", o.name, o.st.hears, c.Instance, token)
			}
			w.poke(o)
		})
	}
}

// moved hands n's term over as policy p says, once it checked p: a move
// to a candidate other than n that answered healthy and not leaving. As
// steward.move does, it asks the machine to hand over at once: the offer
// of the key goes to the target whatever became of it since it answered
// (crashed, cut off, unhealthy: taken up whatever its check says), and
// the stand hears how it ended (afterMove). It checks that no term moves
// within the minimum term of the last move (no ping-pong).
func (w *simWorld) moved(n *simNode, p policy) {
	to, minTerm := p.to, n.st.minTerm
	if !to.Healthy || to.Leaving || sameAs(to, n.candidate()) {
		w.fail("the hand-over policy moved %s's term to %+v, which cannot take it", n.name, to)
	}
	if n.confirmed == nil || n.confirmed.to != to {
		w.fail("%s's steward moved its term to %s without asking who stands first", n.name, to.Instance)
	}
	n.confirmed = nil
	if n.askedFor != n.token {
		if !w.lastMove.IsZero() && w.now.Sub(w.lastMove) < minTerm*9/10 {
			w.fail("the hand-over policy moved leadership again %v after the last move, within the minimum term of %v", w.now.Sub(w.lastMove).Round(time.Millisecond), minTerm)
		}
		n.askedFor, w.lastMove = n.token, w.now
		w.res.moves++
	}
	w.logf("%s's policy hands over to %s: %s", n.name, to.Identity, p.why)
	n.moving++
	w.notify(n, input{kind: inHandOver, handOver: handOver{to: to.Identity, instance: to.Instance}})
}

// nodes

func (w *simWorld) start(id int, after time.Duration) {
	w.at(w.now.Add(after), func() {
		if w.now.Before(w.noStartTil) {
			w.start(id, w.noStartTil.Sub(w.now)+w.dur(0, w.ttl))
			return
		}
		name := fmt.Sprintf("c%d", id)
		rng := rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64()))
		identity := name
		if w.sharedIdentity {
			identity = fmt.Sprintf("h%d", id%2)
		}
		cfg := machineConfig{identity: identity, instance: name, key: w.key, writes: true, releaseOnStop: true,
			timings: simTimings(rng), random: rng.Int64N,
			offers: id%5 != 4} // one in five runs no steward: it neither offers (it releases to the candidate it names) nor takes offers
		tm, _ := cfg.timings(w.ttlRead())
		n := &simNode{w: w, id: id, name: name, identity: identity, priority: w.rng.IntN(3), drift: (w.rng.Float64()*2 - 1) * simMaxDrift, base: w.now.Add(w.dur(-simMaxOffset, simMaxOffset)), baseTrue: w.now, alive: true, started: w.now}
		var log Logger = nopLogger{}
		if w.verbose {
			log = simLog{w, name}
		}
		n.log = log
		w.campaign(n, cfg, tm)
		if cfg.offers {
			n.st = newStand(identity, name, simMinTerm*tm.ttl, simHealthEvery, rng.Int64N)
			n.st.open(n.local(w.now))
			n.c.successor = func(but ...handOver) handOver {
				ho := n.st.successor(n.standNow(), but...)
				for _, c := range n.st.roll.list() {
					if ho.names(c) && !c.Healthy {
						w.fail("the hand-over policy named %s, unhealthy as it last said, as %s's successor", c.Instance, n.name)
					}
				}
				return ho
			}
			w.poke(n)
		}
		w.nodes[id] = n
		w.all = append(w.all, n)
		_, born, _ := w.b.Status(w.now)
		w.logf("%s starts", name)
		w.step(n, input{kind: inStart, now: n.local(w.now), born: born})
	})
}

// campaign gives candidate n its real campaigner on its real driver,
// whose effects the world performs (send), with a machine of cfg: the
// simulator's timings, randomness and offers.
func (w *simWorld) campaign(n *simNode, cfg machineConfig, tm timings) {
	e := &Election{identity: n.identity, instance: n.name, key: w.key, opts: defaultOptions()}
	e.opts.clock, e.opts.log = n.clock(), n.log
	n.c = newCampaigner(e, newNotifier(), tm, nil)
	n.c.m, n.c.ctx = newMachine(cfg, tm), context.Background()
	n.d, n.m = &n.c.driver, n.c.m
	real := n.c.apply
	n.d.apply = func(notes []note) (input, bool) { return w.apply(n, notes, real) }
}

// ttlRead is the TTL a starting candidate reads (Start reads it first).
func (w *simWorld) ttlRead() time.Duration { return w.ttl }

// simTimings returns the default timings with a standby backoff that
// draws its jitter from rng. Every other call renews at an interval drawn
// between TTL/3 and half the lease, the span the default cadence covers at
// long TTLs (renewCadence), which the simulator's TTLs do not reach.
func simTimings(rng *rand.Rand) func(time.Duration) (timings, error) {
	return func(ttl time.Duration) (timings, error) {
		e := &Election{opts: defaultOptions()}
		tm, err := e.timings(ttl)
		tm.standby = simBackoff{tm.standby, rng}
		if hi := (ttl - tm.margin) / 2; err == nil && hi > tm.renew && rng.IntN(2) == 0 {
			tm.renew += time.Duration(rng.Int64N(int64(hi-tm.renew) + 1))
		}
		return tm, err
	}
}

// simBackoff jitters a backoff's steps from a seeded source.
type simBackoff struct {
	b   Backoff
	rng *rand.Rand
}

func (s simBackoff) Duration(n int) time.Duration {
	d := s.b.(backoff.Policy)
	d.Jitter = backoff.NoJitter
	step := d.Duration(n)
	return step - time.Duration(float64(step)*backoff.DefaultJitter*s.rng.Float64())
}

// step feeds n an input and carries out what its machine asks.
func (w *simWorld) step(n *simNode, in input) {
	if !n.alive {
		return
	}
	if n.busy {
		panic(fmt.Sprintf("simulator bug: %s stepped while its request is outstanding", n.name))
	}
	if w.stepped != nil {
		defer w.stepped(n)
	}
	doubt := n.m.doubt
	wake, do := n.d.handle(in) // the real driver: the machine, then its notes to the campaigner or the observer (see apply)
	if doubt != nil && n.m.doubt == nil && n.m.hold != nil && n.m.hold.sent.Equal(doubt.sent) {
		w.res.adopted++
		if n.m.stopping() {
			w.res.adoptedOnStop++
		}
	}
	if v := n.m.view; n.obs == nil && v.known && v.State == KeyReleased && v.HandOverTo == n.identity &&
		(v.HandOverInstance == "" || v.HandOverInstance == n.name) && n.m.sitOut.until.After(in.now) {
		w.fail("%s sits out for %v a release that hands the key over to it", n.name, n.m.sitOut.until.Sub(in.now).Round(time.Millisecond))
	}
	if n.d.done {
		w.logf("%s finished", n.name)
		n.alive = false
		if n.st != nil {
			// Its steward stops with it, and says it leaves.
			c := n.candidate()
			c.Leaving = true
			w.announce(n, c)
		}
		return
	}
	if do.kind != doNothing {
		w.send(n, do)
		return
	}
	n.gen++
	gen := n.gen
	if !wake.After(in.now) {
		w.countAction(n) // a wake due at once counts as an action: a loop of them is a spin
	}
	w.at(n.trueAt(wake), func() {
		if n.alive && gen == n.gen && !n.busy && !w.now.Before(n.paused) {
			w.step(n, input{kind: inTick, now: n.local(w.now)})
		}
	})
}

// apply stands between n's real driver and what the driver passes its
// notes to (real: the campaigner's apply, or the observer's): it checks
// each note against the world first, passes it on, and keeps the world's
// account of the term from what the real apply made of it. It carries out
// the effects the world simulates in the driver's place: a watch stopped,
// an offer of the key answered.
func (w *simWorld) apply(n *simNode, notes []note, real func([]note) (input, bool)) (next input, ok bool) {
	w.checkNotes(n, notes)
	for _, nt := range notes {
		if nt.kind == noteStopWatch {
			w.stopWatch(n)
		}
	}
	if n.obs != nil {
		n.views = n.views[:0]
		for _, nt := range notes {
			if nt.kind == noteViewChanged {
				n.views = append(n.views, *nt.view)
			}
		}
		next, ok = real(notes)
		w.hear(n)
		return next, ok
	}
	for _, nt := range notes {
		switch nt.kind {
		case noteBegan:
			if n.active {
				w.fail("%s began a term while one ran (OnWon twice)", n.name)
			}
			if n.stopping {
				w.fail("%s began a term after it was asked to stop (OnWon after Stop)", n.name)
			}
		case noteExtended:
			if !n.active {
				w.fail("%s extended a term that had ended", n.name)
			}
		case noteEnded:
			if n.lost >= n.won {
				w.fail("%s lost a term it had not won (OnLost without OnWon)", n.name)
			}
		}
		lapsed, told := real([]note{nt})
		if told {
			next, ok = lapsed, true
		}
		switch nt.kind {
		case noteBegan:
			n.active, n.until, n.token, n.since = true, nt.until, nt.token, w.now
			n.toldAt = time.Time{}
			if !n.beginsAt.IsZero() && n.m.held().rev == nt.token {
				n.toldAt = n.beginsAt // the write that took the key said the term begins, and none since said otherwise
			}
			if !n.m.held().wonAt.Equal(n.wonAt) {
				// A new hold of the key: its first write is the token an
				// observer names (a later term of the same hold, after a
				// deadline, keeps the key without a write an observer
				// could tell from a renewal).
				n.wonAt, n.holdToken = n.m.held().wonAt, nt.token
			}
			n.won++
			if last := w.lastToken[w.epoch]; nt.token <= last {
				w.fail("%s began a term with token %d, not above the last one %d", n.name, nt.token, last)
			}
			if n.name == w.deposed && n.tookAt.After(w.deposedAt) && w.now.Sub(w.deposedAt) < w.deposedTTL {
				w.fail("%s, deposed by a forced stand-down %v ago, leads again before anyone else took the key: it did not sit out", n.name, w.now.Sub(w.deposedAt).Round(time.Millisecond))
			}
			w.lastToken[w.epoch] = nt.token
			w.terms = append(w.terms, simTerm{epoch: w.epoch, token: nt.token, name: n.name})
			w.logf("%s leads, token %d, until %.3fs from now", n.name, nt.token, nt.until.Sub(n.local(w.now)).Seconds())
			w.poke(n) // its steward follows the term
		case noteExtended:
			if told {
				n.active = false // the term ended by the clock first, as the real Term found
				continue
			}
			if !n.local(w.now).Before(n.until) {
				w.fail("%s's term was extended at %v, past its deadline", n.name, n.local(w.now).Sub(n.until))
			}
			n.until = nt.until
		case noteLimited:
			if nt.until.Before(n.until) {
				n.until = nt.until
			}
		case noteEnded:
			n.lost++
			n.active = false
			w.logf("%s stops leading (%s)", n.name, nt.cause)
			w.poke(n)
		case noteHandOver:
			if n.moving > 0 {
				// The answer to a move of its steward's (or to a hand-over
				// asked of it meanwhile, which the real driver pairs the
				// same way, oldest first).
				n.moving--
				n.st.moved(n.local(w.now), afterMove(nt.err, n.m.tm.ttl))
				w.poke(n)
			}
		case noteTakeOver:
			if len(n.takingUp) == 0 {
				w.fail("%s answered an offer of the key it was not made", n.name)
				continue
			}
			reply := n.takingUp[0]
			n.takingUp = n.takingUp[1:]
			reply(nt.err)
		}
	}
	if t := n.c.term; (t != nil && t.Valid()) != n.valid(w.now) {
		w.fail("%s's term, by the real campaigner, is valid %v; by the simulator's account, %v", n.name, t != nil && t.Valid(), n.valid(w.now))
	}
	return next, ok
}

func (w *simWorld) stopWatch(n *simNode) {
	if n.watcher != nil {
		n.watcher.Stop()
		n.watcher = nil
	}
	n.watchGen++
	kept := n.inbox[:0]
	for _, in := range n.inbox {
		if in.kind != inWatchEntry && in.kind != inWatchInitialDone && in.kind != inWatchEnded {
			kept = append(kept, in) // what a stopped watch delivered is gone with it
		}
	}
	n.inbox = kept
}

func (w *simWorld) countAction(n *simNode) {
	k := [2]int64{int64(n.id), int64(w.now.Sub(w.t0) / time.Second)}
	w.actions[k]++
	if w.actions[k] > simMaxActionsPerSecond {
		w.fail("%s took more than %d actions in one simulated second: it spins", n.name, simMaxActionsPerSecond)
	}
}

// simMaxActionsPerSecond bounds a candidate's or observer's requests: a
// renewal every third of a TTL, retries every 50 ms at the least, a
// standby's backoff from 20 ms with a read before each campaign, a watch
// remade from 100 ms (at most 26 a second, measured over 2,000 seeds).
const simMaxActionsPerSecond = 60

// offer carries n's offer of the key, a core NATS request, to the
// candidate the real driver names (driver.offerTo): the candidate's
// process, if it runs and takes offers, takes it in and answers once its
// machine has, unless either way is lost; n hears the answer, or gives up
// at its timeout. A stop's offer refused goes on to the next standby the
// driver names, as offerOnward does. One offer in twenty arrives up to
// three TTLs late, and one in twenty twice.
func (w *simWorld) offer(n *simNode, a action) {
	sent := n.local(w.now)
	answered := false
	to, _ := n.d.offerTo(a, nil)
	var refused []handOver
	reply := func(in input) {
		if !answered {
			answered = true
			in.kind, in.sent, in.handOver = inOffer, sent, to
			w.answer(n, a, in)
		}
	}
	w.at(w.now.Add(time.Duration(float64(a.timeout)/(1+n.drift))), func() { reply(input{err: context.DeadlineExceeded}) })
	if n.stopping {
		w.res.stopOffers++
	}
	lost := func(from, to *simNode) bool {
		return w.now.Before(from.cut) || w.now.Before(to.cut) || w.rng.IntN(100) == 0
	}
	var send func()
	answer := func(err error) {
		if answered || !n.alive {
			return
		}
		if err != nil && to.orNext {
			refused = append(refused, to)
			if next, ok := n.d.offerTo(a, refused); ok {
				w.logf("%s's offer refused by %s (%v): offering the key to %s", n.name, to.to, err, next.to)
				w.res.onward++
				to = next
				send()
				return
			}
		}
		reply(input{err: err})
	}
	send = func() {
		w.res.offers++
		ho := to
		deliver := func() {
			var c *simNode
			for _, o := range w.nodes {
				if o != nil && o.alive && o.obs == nil && o.m.cfg.offers && o.is(ho.to, ho.instance) {
					c = o
				}
			}
			if c == nil || lost(n, c) {
				w.logf("%s's offer of revision %d to %s reaches nobody", n.name, a.expect, ho.to)
				return
			}
			c.takingUp = append(c.takingUp, func(err error) {
				if err == nil {
					w.res.taken++
				}
				if w.now.Before(c.oneway) || lost(c, n) {
					return
				}
				w.at(w.now.Add(w.dur(100*time.Microsecond, 3*time.Millisecond)), func() {
					if to == ho {
						answer(err)
					}
				})
			})
			w.notify(c, input{kind: inOffered, from: n.identity, expect: a.expect, born: a.epoch})
		}
		delay := w.dur(100*time.Microsecond, 3*time.Millisecond)
		if w.rng.IntN(20) == 0 {
			delay = w.dur(0, 3*w.ttl)
		}
		w.at(w.now.Add(delay), deliver)
		if w.rng.IntN(20) == 0 {
			w.at(w.now.Add(w.dur(0, 3*w.ttl)), deliver)
		}
	}
	send()
}

// otherCandidate names a candidate of alive other than n, drawn from the
// seed, or "" when there is none.
func (w *simWorld) otherCandidate(alive []*simNode, n *simNode) handOver {
	var others []*simNode
	for _, o := range alive {
		if o != n && o.obs == nil {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return handOver{}
	}
	o := others[w.rng.IntN(len(others))]
	return handOver{to: o.identity, instance: o.name}
}

// send carries a request over the simulated network.
func (w *simWorld) send(n *simNode, a action) {
	w.countAction(n)
	if a.kind == doOffer {
		n.busy = true
		w.offer(n, a)
		return
	}
	if w.verbose {
		w.logf("%s sends action %d expect %d (view %s rev %d seen %.3f expires %.3f, ttl %v)", n.name, a.kind, a.expect, n.m.view.describe(), n.m.view.Revision,
			n.trueAt(n.m.view.seenAt).Sub(w.t0).Seconds(), n.trueAt(n.m.view.expiresBy).Sub(w.t0).Seconds(), n.m.tm.ttl)
	}
	n.busy = true
	n.sentAt = w.now
	sent := n.local(w.now)
	if c := n.ttlRead; a.kind == doReadTTL && c != nil && !a.since.IsZero() && !c.sent.Before(a.since) && w.rng.IntN(2) == 0 {
		// Served by a read the process made before (see simNode.ttlRead).
		in := *c
		w.at(w.now.Add(w.dur(0, time.Millisecond)), func() { w.answer(n, a, in) })
		return
	}
	timeout := time.Duration(float64(a.timeout) / (1 + n.drift))
	giveUp := w.now.Add(timeout)
	lat := func() time.Duration {
		switch r := w.rng.IntN(100); {
		case r < 90:
			return w.dur(200*time.Microsecond, 5*time.Millisecond)
		case r < 98:
			return w.dur(5*time.Millisecond, 100*time.Millisecond)
		default:
			return w.dur(100*time.Millisecond, 2*a.timeout)
		}
	}
	l1, l2 := lat(), lat()
	if w.calm {
		l1, l2 = min(l1, 5*time.Millisecond), min(l2, 5*time.Millisecond)
	}
	cut := w.now.Before(n.cut)
	if cut || w.rng.IntN(200) == 0 && !w.calm {
		// Lost on the way, or never sent (it waited out its time for a
		// turn in the process's gate): never applied.
		err := context.DeadlineExceeded
		if w.rng.IntN(4) == 0 {
			err = fmt.Errorf("%w: %w", transport.ErrNotSent, context.DeadlineExceeded)
		}
		w.at(giveUp, func() { w.answer(n, a, input{sent: sent, err: err}) })
		return
	}
	replyLost := w.now.Before(n.oneway) || w.rng.IntN(200) == 0 && !w.calm
	w.at(w.now.Add(l1), func() {
		in := w.apply2(n, a)
		in.sent = sent
		if replyLost || w.now.Add(l2).After(giveUp) {
			if left := giveUp.Sub(w.now); w.stopsInDoubt && in.err == nil && a.write != 0 && left > 0 && !w.calm &&
				w.now.Before(w.quietFrom) && w.rng.IntN(4) == 0 {
				// Stop is called while the answer to a stored write
				// that takes the key is lost, a fault of the fault
				// phase: the stop's one read of the key finds the
				// write (see dueStopping).
				w.at(w.now.Add(w.dur(0, left)), func() {
					if n.alive && !n.stopping {
						w.res.faults++
						w.res.byFault["stop"]++
						w.faultsEnd = later(w.faultsEnd, w.now)
						w.stop(n)
					}
				})
			}
			w.at(giveUp, func() { w.answer(n, a, input{sent: sent, err: context.DeadlineExceeded}) })
			return
		}
		w.at(w.now.Add(l2), func() { w.answer(n, a, in) })
	})
}

// apply2 performs a request on the bucket as the broker receives it.
func (w *simWorld) apply2(n *simNode, a action) input {
	b := w.b
	switch a.kind {
	case doRead:
		msg, err := b.Latest(w.now, w.key)
		if err != nil {
			return input{kind: inRead, err: jetstream.ErrStreamNotFound}
		}
		if n.staleMsg != nil && w.now.Before(n.staleUntil) {
			msg = n.staleMsg // the replica n reads from lags behind
		} else if len(w.history) > 1 && w.rng.IntN(30) == 0 {
			// A replica behind the stream's leader answers with an older
			// message of the key.
			old := w.history[len(w.history)-2-w.rng.IntN(min(len(w.history)-1, 3))]
			msg = &old
		}
		in := input{kind: inRead}
		if msg != nil {
			e := w.entry(msg)
			in.entry = &e
		}
		return in
	case doWrite:
		var ttl time.Duration
		if w.msgTTL {
			ttl = transport.MessageTTL(w.ttl)
		}
		rev, err := b.Put(w.now, w.key, []byte(n.identity), a.expect, ttl)
		if err == nil {
			w.stamps[simWriteID{rev, w.now}] = a.stamp(n.name)
			var tookUp string // the identity whose offer of the key this write takes up
			if t := n.m.taking; t.rev != 0 && a.expect == t.rev && !a.renewal {
				tookUp = t.from
			}
			w.logMsg(simMsg{op: simkv.Put, rev: rev, identity: n.identity, instance: n.name, expect: a.expect, renewal: a.renewal, term: a.term, tookUpFrom: tookUp})
			switch {
			case a.term.begins:
				n.beginsAt = w.now
			case a.term.waits:
				n.beginsAt = time.Time{}
			}
			if n.active && n.toldAt.IsZero() && (a.term.token == n.token || a.term.begins && rev == n.token) {
				n.toldAt = w.now
			}
		}
		w.flushWatches()
		w.remember()
		if err == nil && n.name != w.deposed {
			w.deposed = "" // someone else took the key: the sit-out did its work
		}
		if err == nil && !a.renewal {
			n.tookAt = w.now
			if ho := w.handedOver; ho.to != "" {
				// The first to take a key handed over: the named candidate,
				// or, after the window (which the others count from when
				// they learn of the release), anyone.
				if ho.names(n) {
					w.res.landed++
					if w.now.Before(w.quietFrom) && w.rng.IntN(3) != 0 {
						// Pass it on at once, while the others may still sit
						// out the window of the release that named n, and
						// may not even see n's write (a lagging consumer
						// skips a message replaced meanwhile).
						w.at(w.now.Add(w.dur(100*time.Microsecond, 5*time.Millisecond)), func() { w.passOn(n) })
					}
					if took := n.sentAt.Sub(ho.at); ho.ready && ho.node == n && n.failures == ho.failures && n.hinderedAfter(ho.at).Equal(ho.at) && took > simTakeBound {
						w.fail("%s sent the write that took the key handed over to it %v after the release, though it was ready: it sat the hand-over out", n.name, took.Round(time.Millisecond))
					}
				} else if w.now.Sub(ho.at) < ho.within*99/100 {
					w.fail("%s took the key %v after it was handed over to %s, within the hand-over's window of %v", n.name, w.now.Sub(ho.at).Round(time.Millisecond), ho.to, ho.within)
				}
			}
		}
		if err == nil {
			w.handedOver = simHandOver{}
		}
		switch {
		case errors.Is(err, simkv.ErrWrongRevision):
			return input{kind: inWrite, err: w.mismatch()}
		case errors.Is(err, simkv.ErrNoBucket):
			return input{kind: inWrite, err: jetstream.ErrNoStreamResponse}
		case err != nil:
			w.fail("simulated put: %v", err)
		}
		w.logf("%s wrote revision %d over %d", n.name, rev, a.expect)
		return input{kind: inWrite, rev: rev, expect: a.expect}
	case doRelease:
		var payload []byte
		switch {
		case a.marked && a.handOver.to != "":
			payload = handOverPayload(n.identity, a.handOver.to, a.handOver.within)
		case a.marked:
			payload = releasePayload(n.identity)
		}
		rev, err := b.Delete(w.now, w.key, a.expect, payload)
		if err == nil {
			st := keymsg.Stamp{Instance: n.name} // as the driver's release says
			if a.marked {
				st.HandOverInstance = a.handOver.instance
			}
			w.stamps[simWriteID{rev, w.now}] = st
			m := simMsg{op: simkv.Delete, rev: rev, identity: n.identity, instance: n.name, expect: a.expect, marked: a.marked}
			if a.marked {
				m.handOverTo = a.handOver.to
			}
			w.logMsg(m)
		}
		if err == nil && a.marked && a.handOver.to != "" {
			w.handedOver = simHandOver{to: a.handOver.to, instance: a.handOver.instance, at: w.now, within: a.handOver.within}
			// The release names an identity, and the copy offered the key
			// where the offer named one: only that copy may take it at once.
			if to := w.node(a.handOver.to, a.handOver.instance); to != nil {
				w.handedOver.ready, w.handedOver.failures, w.handedOver.node = w.readyToTake(to), to.failures, to
			}
			w.res.handOvers++
			w.logf("%s hands over to %s within %v", n.name, a.handOver.to, a.handOver.within)
		}
		w.flushWatches()
		w.remember()
		switch {
		case errors.Is(err, simkv.ErrWrongRevision):
			return input{kind: inRelease, err: w.mismatch()}
		case err != nil:
			return input{kind: inRelease, err: jetstream.ErrNoStreamResponse}
		}
		w.logf("%s released at revision %d (marked %v)", n.name, rev, a.marked)
		return input{kind: inRelease, marked: a.marked}
	case doReadTTL:
		ttl, born, err := b.Status(w.now)
		if err != nil {
			return input{kind: inTTL, err: jetstream.ErrStreamNotFound}
		}
		return input{kind: inTTL, ttl: ttl, born: born}
	case doWatch:
		wt, err := b.Watch(w.now, w.key)
		if err != nil {
			return input{kind: inWatchMade, err: jetstream.ErrStreamNotFound}
		}
		w.stopWatch(n)
		n.watcher = wt
		n.lastDlv = w.now
		return input{kind: inWatchMade}
	}
	panic("unknown action")
}

// answer hands a request's outcome to n once it runs.
func (w *simWorld) answer(n *simNode, a action, in input) {
	if !n.alive {
		return
	}
	in.expect, in.write = a.expect, a.write
	if in.err != nil {
		n.failures++
	}
	if in.kind == 0 && in.err != nil {
		in.kind = map[actionKind]inputKind{doRead: inRead, doWrite: inWrite, doRelease: inRelease, doReadTTL: inTTL, doWatch: inWatchMade, doOffer: inOffer}[a.kind]
		if a.kind == doWatch {
			w.stopWatch(n) // a watch made after its request timed out is dropped
		}
	}
	if w.now.Before(n.paused) {
		w.at(n.paused, func() { w.answer(n, a, in) })
		return
	}
	n.busy = false
	in.now = n.local(w.now)
	in.stop = n.takeStop() // as the real scheduler hands an outcome
	if in.kind == inTTL && in.err == nil && (n.ttlRead == nil || n.ttlRead.sent.Before(in.sent)) {
		c := in
		n.ttlRead = &c
	}
	w.step(n, in)
	if a.kind == doWatch && in.err == nil {
		w.flushWatches()
	}
	w.drain(n)
}

// takeStop takes the stop queued for n, if any, out of its inbox, by the
// real scheduler's rule (stopFirst).
func (n *simNode) takeStop() *input {
	stop, rest := stopFirst(n.inbox, func(in input) inputKind { return in.kind })
	n.inbox = rest
	return stop
}

// drain hands n what its watch delivered while it was busy.
func (w *simWorld) drain(n *simNode) {
	for n.alive && !n.busy && len(n.inbox) > 0 && !w.now.Before(n.paused) {
		in := n.inbox[0]
		if stop := n.takeStop(); stop != nil {
			in = *stop // what was posted goes before what the watch delivered
		} else {
			n.inbox = n.inbox[1:]
		}
		in.now = n.local(w.now)
		w.step(n, in)
	}
}

// simWriteID names a write of the key: its revision and when it was stored
// (revisions start again when the bucket is made again).
type simWriteID struct {
	rev     uint64
	written time.Time
}

// entry reads msg as the transport would: with what its writer said of
// itself in its headers.
func (w *simWorld) entry(msg *simkv.Msg) Entry {
	st := w.stamps[simWriteID{msg.Revision, msg.Written}]
	return ReadEntry(keymsg.NewEntry(bucketName, msg.Key, msg.Value, msg.Revision, msg.Written, simOp(msg.Op), msg.TTL).WithStamp(st))
}

func simOp(op simkv.Op) jetstream.KeyValueOp {
	switch op {
	case simkv.Delete:
		return jetstream.KeyValueDelete
	case simkv.Purge:
		return jetstream.KeyValuePurge
	}
	return jetstream.KeyValuePut
}

// flushWatches schedules what each watch has queued, with each node's lag.
func (w *simWorld) flushWatches() {
	w.b.Advance(w.now)
	for _, n := range w.all {
		w.flushWatch(n.watcher, &n.lastDlv, n.stall, n.watchGen, func(in input) { w.deliver(n, in) })
	}
}

func (w *simWorld) flushWatch(wt *simkv.Watcher, last *time.Time, stall time.Time, gen int, to func(input)) {
	if wt == nil {
		return
	}
	for {
		d, ok := wt.Next()
		if !ok {
			break
		}
		at := later(later(*last, w.now.Add(w.dur(100*time.Microsecond, 3*time.Millisecond))), stall)
		if w.rng.IntN(50) == 0 {
			at = at.Add(w.dur(0, 500*time.Millisecond)) // a lagging delivery
		}
		*last = at
		in := input{kind: inWatchInitialDone}
		if d.Msg != nil {
			e := w.entry(d.Msg)
			in = input{kind: inWatchEntry, entry: &e}
		}
		w.at(at, func() { to(in) })
	}
	if wt.Ended() {
		at := later(*last, w.now)
		w.at(at, func() { to(input{kind: inWatchEnded, err: errors.New("nats: consumer deleted")}) })
	}
}

func (w *simWorld) deliver(n *simNode, in input) {
	if w.verbose {
		what := "end of initial values"
		if in.entry != nil {
			what = in.entry.Describe()
		}
		w.logf("%s's watch delivers %s (kind %d, watching %v)", n.name, what, in.kind, n.watcher != nil)
	}
	if !n.alive || n.watcher == nil {
		return
	}
	if in.kind == inWatchEnded {
		w.stopWatch(n)
	}
	if n.busy || w.now.Before(n.paused) {
		n.inbox = append(n.inbox, in)
		return
	}
	in.now = n.local(w.now)
	w.step(n, in)
}

// faults

// stop stops n, as Stop does, and starts it again within two TTLs.
func (w *simWorld) stop(n *simNode) {
	// A stopping leader offers the key to the standby its steward ranks
	// best, if it knows one: here any other candidate, or one that is not
	// running.
	stop := input{kind: inStop}
	if w.rng.IntN(5) == 0 {
		stop.handOver.to = "ghost"
	}
	// Otherwise the real driver asks the real policy on the real roll as
	// it takes the stop: the best healthy standby the steward heard of
	// (see campaign).
	w.logf("FAULT %s is stopped (successor %q)", n.name, stop.handOver.to)
	n.stopping = true
	if !n.busy && !w.now.Before(n.paused) {
		stop.now = n.local(w.now)
		w.step(n, stop)
	} else {
		n.inbox = append(n.inbox, stop)
	}
	w.start(n.id, w.dur(0, 2*w.ttl))
}

// fault draws one fault and applies it.
func (w *simWorld) fault() {
	kind := simFaultKinds[w.rng.IntN(len(simFaultKinds))]
	alive := w.running()
	pick := func() *simNode {
		// Leaders are picked more often: faults matter most there.
		for _, n := range alive {
			if n.active && w.rng.IntN(2) == 0 {
				return n
			}
		}
		if len(alive) == 0 {
			return nil
		}
		return alive[w.rng.IntN(len(alive))]
	}
	ttl := w.ttl
	heal := func() time.Duration { return w.dur(ttl/10, 2*ttl) }
	if (kind == "pause" || kind == "stall" || kind == "watchend") && len(w.obs) > 0 && w.rng.IntN(4) == 0 {
		// Observers are processes too.
		o := w.obs[w.rng.IntN(len(w.obs))]
		pick = func() *simNode { return o }
	}
	switch kind {
	case "crash", "stop":
		n := pick()
		if n == nil {
			return
		}
		if kind == "crash" {
			w.logf("FAULT %s crashes", n.name)
			n.alive, n.crashed = false, w.now
			w.stopWatch(n)
			w.start(n.id, w.dur(0, 2*ttl))
		} else {
			w.stop(n)
		}
	case "pause":
		n := pick()
		if n == nil {
			return
		}
		d := w.dur(ttl/5, 2*ttl)
		w.logf("FAULT %s paused for %v", n.name, d)
		n.paused = later(n.paused, w.now.Add(d))
		w.at(n.paused, func() {
			if n.alive && !n.busy && !w.now.Before(n.paused) {
				w.drain(n)
				if !n.busy {
					w.step(n, input{kind: inTick, now: n.local(w.now)})
				}
			}
		})
	case "partition":
		if !w.hinder(pick, heal, "%s cut off both ways for %v", func(n *simNode) []*time.Time { return []*time.Time{&n.cut, &n.stall} }) {
			return
		}
	case "oneway":
		if !w.hinder(pick, heal, "%s's replies lost for %v", func(n *simNode) []*time.Time { return []*time.Time{&n.oneway} }) {
			return
		}
	case "lag":
		n := pick()
		if n == nil || len(w.history) < 2 {
			return
		}
		d := heal()
		old := w.history[len(w.history)-2]
		w.logf("FAULT %s reads from a replica stuck at revision %d for %v", n.name, old.Revision, d)
		n.staleMsg, n.staleUntil = &old, w.now.Add(d)
	case "stall":
		if !w.hinder(pick, heal, "%s's watch stalls for %v", func(n *simNode) []*time.Time { return []*time.Time{&n.stall} }) {
			return
		}
	case "watchend":
		n := pick()
		if n == nil || n.watcher == nil {
			return
		}
		w.logf("FAULT %s's watch ends", n.name)
		gen := n.watchGen
		w.at(later(n.lastDlv, w.now), func() {
			if n.watchGen == gen {
				w.deliver(n, input{kind: inWatchEnded, err: errors.New("nats: consumer deleted")})
			}
		})
	case "sick":
		// A failing health check: the candidate stops campaigning (a
		// leader keeps leading) until it passes again.
		n := pick()
		if n == nil || n.obs != nil {
			return
		}
		d := heal()
		w.logf("FAULT %s's health check fails for %v", n.name, d)
		// A candidate with a steward finds it by its check; one without
		// is told at once.
		n.sick = true
		if n.st == nil {
			w.notify(n, input{kind: inHealth, unhealthy: errCheckFails})
		}
		w.at(w.now.Add(d), func() {
			if n.alive {
				n.sick = false
				if n.st == nil {
					w.notify(n, input{kind: inHealth})
				}
			}
		})
	case "handover":
		var leader *simNode
		for _, n := range alive {
			if n.active && n.obs == nil {
				leader = n
			}
		}
		if leader == nil {
			return
		}
		to := handOver{to: "ghost"} // a candidate that is not running: the others take over after the window
		if w.rng.IntN(5) != 0 {
			if other := w.otherCandidate(alive, leader); other.to != "" {
				to = other
			}
		}
		w.logf("FAULT %s is asked to hand over to %s/%s", leader.name, to.to, to.instance)
		w.notify(leader, input{kind: inHandOver, handOver: to})
	case "standdown", "purge":
		if !w.standDown(kind == "purge") {
			return
		}
	case "vanish":
		// The README does not promise that a candidate that has not yet
		// read the key takes a vanished key as a stand-down.
		if w.removed || !w.allSettled() {
			return
		}
		w.logf("FAULT the key vanishes without a marker (stream purge)")
		if w.verbose {
			for _, n := range w.nodes {
				if n != nil {
					w.logf("  %s alive %v knows revision %d", n.name, n.alive, n.m.view.Revision)
				}
			}
		}
		w.lastVanish = w.now
		w.b.Vanish(w.now, w.key)
		w.noStartTil = later(w.noStartTil, w.now.Add(w.maxTTL()))
		// A standby whose watch is made again now finds the key absent
		// before it could expire: the case a removal must be told by.
		for _, n := range w.nodes {
			if n != nil && n.alive && n.watcher != nil && !n.m.phase.holds() && w.rng.IntN(2) == 0 {
				gen := n.watchGen
				w.at(later(n.lastDlv, w.now.Add(w.dur(0, w.ttl/2))), func() {
					if n.watchGen == gen {
						w.deliver(n, input{kind: inWatchEnded, err: errors.New("nats: consumer deleted")})
					}
				})
			}
		}
	case "recreate":
		if w.removed || !w.allSettled() {
			return
		}
		w.logf("FAULT the bucket is deleted")
		w.lastVanish = w.now
		w.b.Remove(w.now)
		w.removed = true
		w.history = nil
		w.noStartTil = later(w.noStartTil, w.now.Add(2*w.maxTTL()))
		w.flushWatches()
		w.at(w.now.Add(w.dur(w.maxTTL(), w.maxTTL()+2*time.Second)), func() {
			w.logf("FAULT the bucket is made again, ttl %v", w.ttl)
			w.faultsEnd = later(w.faultsEnd, w.now)
			w.b.Recreate(w.now, w.ttl, w.msgTTL)
			w.removed = false
			w.epoch++
			w.noStartTil = later(w.noStartTil, w.now.Add(w.maxTTL()))
		})
	case "ttl":
		if w.removed {
			return
		}
		old := w.ttl
		var next time.Duration
		if w.rng.IntN(2) == 0 {
			// Lower by at most the safety margin, one old TTL after the
			// last change, as the README allows, and keep lowering so for
			// a while: standbys read the TTL only every minute.
			if w.now.Sub(w.lastTTLAt) < old || !w.lowerTTL() {
				return
			}
			w.res.faults++
			w.res.byFault[kind]++
			return
		} else {
			next = (old + time.Duration(w.rng.Int64N(int64(old)))).Round(100 * time.Millisecond)
			if next > 8*time.Second {
				return
			}
		}
		w.logf("FAULT the TTL changes from %v to %v", old, next)
		w.setTTL(next)
	}
	w.res.faults++
	w.res.byFault[kind]++
}

// startObserver starts an Observer's machine, judged by the Observer's
// own code, on the simulated bucket.
func (w *simWorld) startObserver(id int) {
	name := fmt.Sprintf("o%d", id)
	ttl, born, _ := w.b.Status(w.now)
	tm, _ := observerTimings(ttl)
	rng := rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64()))
	// Every report, renewals too, goes to checkReport: the simulator runs
	// the notifier's queue itself as the step that made it ends (hear),
	// and no goroutine does.
	o := &Observer{key: w.key, opts: options{log: nopLogger{}, renewals: true}, current: Leadership{Key: w.key}, n: &notifier{running: true}}
	var log Logger = nopLogger{}
	if w.verbose {
		log = simLog{w, name}
	}
	n := &simNode{w: w, id: 1000 + id, name: name, identity: name, obs: o, log: log, base: w.now, baseTrue: w.now, alive: true, started: w.now,
		drift: (w.rng.Float64()*2 - 1) * simMaxDrift}
	// The observer's real driver, as Run makes it.
	o.driver = driver{key: w.key, clock: n.clock(), m: newMachine(machineConfig{key: w.key, timings: observerTimings, random: rng.Int64N}, tm), tm: tm, log: log,
		apply: func(notes []note) (input, bool) { return w.apply(n, notes, o.apply) }}
	n.d, n.m = &o.driver, o.driver.m
	o.opts.onChange = func(l Leadership) { w.checkReport(n, l) }
	w.obs = append(w.obs, n)
	w.all = append(w.all, n)
	w.step(n, input{kind: inStart, now: n.local(w.now), born: born})
}

// checkObserver tests what observer n reports against the bucket: once the
// key's holder has not changed for simObserverBound, the observer names it
// (or no leader), and a token it vouches for is not below the one of the
// write that took the key (a renewal taken for a new term, after a watch
// lagged, reports a higher token: a fenced resource then refuses the
// leader loudly, which is safe; a lower one would let a deposed term in).
func (w *simWorld) checkObserver(n *simNode) {
	l := n.obs.Leadership()
	holder := w.holder()
	if holder != w.lastHolder {
		w.lastHolder, w.holderSince = holder, w.now
	}
	// A paused observer reports nothing new; its bound runs from when it
	// resumed.
	since := later(w.holderSince, n.paused)
	if !w.now.Before(n.paused) && w.now.Sub(since) >= w.observerBound() && l.Leader != holder {
		w.fail("observer %s reports %q leading, but %q has held the key for %v", n.name, l.Leader, holder, w.now.Sub(w.holderSince).Round(time.Millisecond))
	}
	if l.Token != 0 && (l.Event == EventElected || l.Event == EventCurrent || l.Event == EventRenewed) {
		// A term is reported only once it has begun: never on a write
		// that said its term waits.
		if st := w.stamps[simWriteID{l.Revision, l.Renewed}]; st.Term == keymsg.TermWaits {
			w.fail("observer %s reports %s's term with token %d on revision %d, which said its term waits", n.name, l.Leader, l.Token, l.Revision)
		}
	}
	for _, c := range w.nodes {
		// Every write says its term: once a write told the running term's
		// token, the observer names exactly that token, whatever its watch
		// missed, while the key holds a write of it. A paused observer
		// reports nothing new: its bound runs from when it resumed. A key
		// purged or taken since tells the token no more: the observer then
		// has the holder's bound to find it gone.
		if c == nil || !c.is(l.Leader, l.Instance) || !c.valid(w.now) || c.toldAt.IsZero() || w.now.Before(n.paused) || w.holder() != c.identity {
			continue
		}
		bound := w.observerTokenBound()
		if !n.m.watch.working() {
			bound = w.observerBound() // without a watch it reads the key on its timers
		}
		if w.now.Sub(n.hinderedAfter(c.toldAt)) > bound && l.Token != c.token {
			w.fail("observer %s reports %s's term with token %d, but the term that runs has token %d", n.name, l.Leader, l.Token, c.token)
		}
	}
}

// simMsg is a message of the key as the world stored it, with who wrote
// it and why.
type simMsg struct {
	op      simkv.Op
	rev     uint64
	written time.Time
	epoch   int
	ttl     time.Duration // the bucket's TTL when it was stored
	// identity and instance: the candidate that wrote the put or the
	// release; "" for a forced stand-down or a purge.
	identity, instance string
	expect             uint64 // the revision the write or release was made over (0: none)
	// A put: a renewal, or a write that takes the key; what it said of its
	// term; and, if it took up an offer of the key, the identity that
	// offered it.
	renewal    bool
	term       termMark
	tookUpFrom string
	// A delete: the candidate's release marked as such, and whom it
	// handed the key over to.
	marked     bool
	handOverTo string
}

// logMsg records m, just stored, in the key's messages while observers
// watch (checkReport judges their reports by them).
func (w *simWorld) logMsg(m simMsg) {
	if len(w.obs) == 0 {
		return
	}
	m.written, m.epoch, m.ttl = w.now, w.epoch, w.ttl
	w.msgs = append(w.msgs, m)
}

// msgAt returns the index in w.msgs of the message id names: they are
// stored in time order.
func (w *simWorld) msgAt(id simWriteID) (int, bool) {
	i, _ := slices.BinarySearchFunc(w.msgs, id.written, func(m simMsg, t time.Time) int { return m.written.Compare(t) })
	for ; i < len(w.msgs) && w.msgs[i].written.Equal(id.written); i++ {
		if w.msgs[i].rev == id.rev {
			return i, true
		}
	}
	return 0, false
}

func (m simMsg) String() string {
	switch {
	case m.op == simkv.Purge:
		return fmt.Sprintf("a purge at revision %d", m.rev)
	case m.op == simkv.Delete && m.identity == "":
		return fmt.Sprintf("a forced stand-down at revision %d", m.rev)
	case m.op == simkv.Delete && m.handOverTo != "":
		return fmt.Sprintf("%s/%s's release at revision %d handing over to %s", m.identity, m.instance, m.rev, m.handOverTo)
	case m.op == simkv.Delete:
		return fmt.Sprintf("%s/%s's release at revision %d (marked %v)", m.identity, m.instance, m.rev, m.marked)
	case m.renewal:
		return fmt.Sprintf("%s/%s's renewal at revision %d over %d, saying %q", m.identity, m.instance, m.rev, m.expect, m.term.header())
	case m.tookUpFrom != "":
		return fmt.Sprintf("%s/%s's write at revision %d over %d taking up %s's offer, saying %q", m.identity, m.instance, m.rev, m.expect, m.tookUpFrom, m.term.header())
	}
	return fmt.Sprintf("%s/%s's write at revision %d over %d taking the key, saying %q", m.identity, m.instance, m.rev, m.expect, m.term.header())
}

// hear runs the reports observer n made in the step under way, in order,
// as its notifier's goroutine would.
func (w *simWorld) hear(n *simNode) {
	q := n.obs.n
	n.steps++
	for {
		q.mu.Lock()
		queue := q.queue
		q.queue = nil
		q.mu.Unlock()
		if len(queue) == 0 {
			return
		}
		for _, nt := range queue {
			nt.fn()
			close(nt.done)
		}
	}
}

// checkReport judges l, what observer n reports as it reports it, against
// who wrote what and why:
//   - A renewal reported is a write by that candidate renewing the term
//     of the token reported: never a write that took the key (a new
//     term's, or a hold whose term waits), nor one of another term.
//
// The rest is judged where the observer can tell, when the message before
// the write reported is the one it last reported on (its watch skipped
// nothing between); a holder whose term has not begun (taking) hands no
// term over and has none to expire:
//   - A term reported handed over by a leader began by a write that took
//     up that leader's offer over its write, or one after its release
//     that handed the key over.
//   - A hand-over delivered live (the offer taken up within the lease by
//     every TTL in question, or a take over the release) is reported as
//     handed over by that leader, with nothing reported between, unless
//     the observer reported an expiry before the write reached it.
//   - A write that took the key once the lease of the write before it had
//     run out by the broker's clock, delivered live, is reported after an
//     expiry (no leader), never straight after that write's leader, as
//     its hand-over or renewal. The lease counts by the longest of the
//     TTLs the bucket had when the write was stored and has now and the
//     observer knows.
func (w *simWorld) checkReport(n *simNode, l Leadership) {
	prev, last, prevNow := n.told, n.toldMsg, n.toldIn == n.steps
	n.told, n.toldIn = l, n.steps
	if !l.Renewed.IsZero() {
		n.toldMsg = l
	}
	if prev.Event == "" || l.State != KeyHeld || l.Event == EventCurrent {
		return
	}
	i, ok := w.msgAt(simWriteID{l.Revision, l.Renewed})
	if !ok {
		w.fail("observer %s reports %s at revision %d, which no candidate wrote", n.name, l.Leader, l.Revision)
		return
	}
	m := w.msgs[i]
	if m.op != simkv.Put || m.identity != l.Leader || m.instance != l.Instance {
		w.fail("observer %s reports %s/%s leading on %s", n.name, l.Leader, l.Instance, m)
		return
	}
	var before *simMsg
	if i > 0 && w.msgs[i-1].epoch == m.epoch && last.Revision == w.msgs[i-1].rev && last.Renewed.Equal(w.msgs[i-1].written) {
		before = &w.msgs[i-1] // the message last reported on: nothing skipped between
	}
	if l.Event == EventRenewed {
		w.res.reportedRenewals++
		if !m.renewal || m.term.token != l.Token {
			w.fail("observer %s reports %s as a renewal of the term with token %d", n.name, m, l.Token)
		}
	}
	if before == nil || m.renewal {
		return
	}
	over := m.expect == before.rev // written over it, not after it expired
	offered := before.op == simkv.Put && over && m.tookUpFrom == before.identity
	release := before.op == simkv.Delete && before.marked && before.handOverTo != "" // a release handing the key over
	if l.Event == EventElected && l.HandedOverBy != "" {
		by := before.identity == l.HandedOverBy && (l.HandedOverByInstance == "" || before.instance == l.HandedOverByInstance)
		switch {
		case before.op == simkv.Put && !offered && m.written.Before(before.written.Add(n.m.tm.ttl)):
			// A take of a lease that ran out by a shorter TTL than the
			// observer's (the taker's, not yet raised, or the bucket's
			// before a raise the observer has read since) or by a clock
			// that runs fast, landing within the lease as the observer
			// counts it: an offer could be taken up then too, and the
			// observer cannot tell the two apart.
			w.res.reportedHandOversUnsure++
		case !by || !offered && !release: // a release's marker may expire before the take
			w.fail("observer %s reports %s as handed over by %s/%s, after %s", n.name, m, l.HandedOverBy, l.HandedOverByInstance, before)
		default:
			w.res.reportedHandOvers++
		}
	}
	live := n.sawLive(m)
	between := !prev.Renewed.Equal(before.written) // an expiry reported since the message before
	if live && (l.Event == EventElected || l.Event == EventTaking) && last.Event != EventTaking && (!between || prevNow) &&
		(offered && m.written.Before(before.written.Add(min(before.ttl, w.ttl, n.m.tm.ttl))) || release && over) {
		// A hand-over delivered live: the offer of the leader last
		// reported, taken up within its lease by every TTL in question, or
		// a take over its release handing the key over. (An expiry the
		// observer reported in an earlier step, having read the key gone
		// while its watch lagged, leaves it nothing to hand over from.)
		w.res.seenHandOvers++
		if l.HandedOverBy != before.identity || between {
			w.fail("observer %s reports %s (%s, handed over by %q) after %s, with %s reported between", n.name, m, l.Event, l.HandedOverBy, before, prev.Event)
		}
	}
	takes := m.term.begins || m.term.waits
	if takes && before.op == simkv.Put && last.HasLeader() && last.Event != EventTaking && live {
		lease := before.written.Add(max(before.ttl, w.ttl, n.m.tm.ttl))
		if !m.written.Before(lease) {
			w.res.reportedExpiries++
			if prev.HasLeader() {
				w.fail("observer %s reports %s (%s), written %v after the lease of %s ran out, straight after %s's term (%s) with no expiry between",
					n.name, m, l.Event, m.written.Sub(lease).Round(time.Millisecond), before, prev.Leader, prev.Event)
			}
		}
	}
}

// sawLive reports whether observer n's watch delivered m live in the step
// under way.
func (n *simNode) sawLive(m simMsg) bool {
	for _, v := range n.views {
		if v.live && v.Revision == m.rev && v.Written.Equal(m.written) {
			return true
		}
	}
	return false
}

// running returns the nodes alive and not stopping, in slot order.
func (w *simWorld) running() []*simNode {
	var alive []*simNode
	for _, n := range w.nodes {
		if n != nil && n.alive && !n.stopping {
			alive = append(alive, n)
		}
	}
	return alive
}

// passOn asks n, if it leads, to hand over to another running candidate
// at once: a quick succession of hand-overs, which must not leave the
// next candidate sitting out the window of the one before.
func (w *simWorld) passOn(n *simNode) {
	if !n.alive || !n.active || n.stopping {
		return
	}
	if to := w.otherCandidate(w.running(), n); to.to != "" {
		w.logf("FAULT %s is asked to pass the election on to %s/%s", n.name, to.to, to.instance)
		w.notify(n, input{kind: inHandOver, handOver: to})
	}
}

// readyToTake reports whether the candidate named can take the key at
// once when a release names it: running, healthy, watching the key, with
// a TTL it can use and no fault holding it up.
func (w *simWorld) readyToTake(c *simNode) bool {
	m := c.m
	return c.alive && c.obs == nil && !c.sick && m.unhealthy == nil && !m.stopping() && m.mode == running &&
		m.ttlUnusable == nil && m.watch.working() && !c.hinderedAfter(w.now).After(w.now)
}

// node returns a running candidate of identity that is instance (any of
// them for ""), or nil.
func (w *simWorld) node(identity, instance string) *simNode {
	for _, c := range w.nodes {
		if c != nil && c.alive && c.obs == nil && c.is(identity, instance) {
			return c
		}
	}
	return nil
}

// is reports whether n is a candidate of identity that is instance (any
// of them for "").
func (n *simNode) is(identity, instance string) bool {
	return n.identity == identity && (instance == "" || n.name == instance)
}

// names reports whether the hand-over's release names n: its identity, and
// its instance where the release names one.
func (ho simHandOver) names(n *simNode) bool { return n.is(ho.to, ho.instance) }

// hinderedAfter is the later of t and the end of every fault that holds up
// what node n learns: a pause, a stalled watch, a partition, lost replies,
// reads answered by a lagging replica.
func (n *simNode) hinderedAfter(t time.Time) time.Time {
	for _, u := range []time.Time{n.paused, n.stall, n.cut, n.oneway, n.staleUntil} {
		t = later(t, u)
	}
	return t
}

// holder is who the bucket's latest message names as leader, or "".
func (w *simWorld) holder() string {
	if w.removed {
		return ""
	}
	msg, _ := w.b.Latest(w.now, w.key)
	if msg == nil || msg.Op != simkv.Put {
		return ""
	}
	return string(msg.Value)
}

// observerTokenBound is how long an observer may still name the token of
// a leader's previous term once a new one began: the new term's first write
// reaches it through its watch, and it may read the TTL to judge it.
func (w *simWorld) observerTokenBound() time.Duration { return 2*w.maxTTL()/5 + time.Second }

// observerBound is how long an observer may take to report a change of
// holder: an expiry is silent, so it is found by a read a little after the
// predicted expiry (up to a TTL after the write, plus the broker's
// lateness and the check's delay), and a watch made again after a fault
// takes its backoff.
func (w *simWorld) observerBound() time.Duration { return 2*w.maxTTL() + 3*time.Second }

// mismatch is the error nats-server answers a compare-and-swap that found
// another revision with: it names the key's latest revision.
func (w *simWorld) mismatch() error {
	var cur uint64
	if msg, _ := w.b.Latest(w.now, w.key); msg != nil {
		cur = msg.Revision
	}
	return transport.MapMismatch(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
		Description: fmt.Sprintf("wrong last sequence: %d", cur)})
}

// allSettled reports whether every running candidate has read or watched
// the key's latest message: the README promises that a vanished key or a
// recreated bucket is a stand-down only to candidates that knew the write
// it removed.
func (w *simWorld) allSettled() bool {
	msg, _ := w.b.Latest(w.now, w.key)
	if msg == nil {
		return false
	}
	for _, n := range w.nodes {
		if n != nil && n.alive && (!n.m.view.known || n.m.view.Revision != msg.Revision) {
			return false
		}
	}
	return true
}

// checkNotes fails the seed on a line of n's machine that reports a bug
// (the driver logs the lines).
func (w *simWorld) checkNotes(n *simNode, notes []note) {
	for _, nt := range notes {
		if nt.kind == noteLog && strings.Contains(nt.format, "bug:") {
			w.fail("%s logged a bug: %s", n.name, fmt.Sprintf(nt.format, nt.args...))
		}
	}
}

// simLog puts a machine's log lines in the trace of a replayed seed.
type simLog struct {
	w    *simWorld
	name string
}

func (l simLog) Debugf(f string, a ...any) { l.w.logf("  "+l.name+" debug "+f, a...) }
func (l simLog) Infof(f string, a ...any)  { l.w.logf("  "+l.name+" info "+f, a...) }
func (l simLog) Warnf(f string, a ...any)  { l.w.logf("  "+l.name+" warn "+f, a...) }
func (l simLog) Errorf(f string, a ...any) { l.w.logf("  "+l.name+" error "+f, a...) }

// lowerTTL lowers the bucket's TTL by at most a tenth, and schedules up to
// a few more such steps, each one old TTL after the one before. It reports
// whether it lowered it.
func (w *simWorld) lowerTTL() bool {
	old := w.ttl
	next := old - time.Duration(w.rng.Int64N(int64(old/10)+1)).Truncate(10*time.Millisecond)
	if next < time.Second || w.removed {
		return false
	}
	for _, n := range w.nodes {
		if n != nil && n.alive && n.m.phase.holds() && n.m.tm.ttl != old {
			// The README's rule assumes each step reached the leader (it
			// reads the TTL every TTL while in touch): one cut off for
			// two steps may overlap, which is not promised.
			return false
		}
	}
	w.logf("FAULT the TTL is lowered from %v to %v", old, next)
	w.setTTL(next)
	if w.rng.IntN(4) != 0 && w.now.Add(old).Before(w.quietFrom) {
		w.at(w.now.Add(old+w.dur(0, old/2)), func() {
			if !w.lowerTTL() {
				w.at(w.now.Add(old), func() { w.lowerTTL() }) // the leader has not taken the last step in yet
			}
		})
	}
	return true
}

// advise tells each process of a change of the bucket's settings, as the
// stream's update advisory does: a process that hears of it (most, after a
// delay; none that is cut off) reads the settings once, and each of its
// elections is asked to read them, served by that read.
func (w *simWorld) advise() {
	for _, n := range w.all {
		if !n.alive || w.now.Before(n.cut) || w.rng.IntN(5) == 0 {
			continue // advisories can be lost: the routine reads remain
		}
		heard := w.now.Add(w.dur(100*time.Microsecond, 300*time.Millisecond))
		w.at(heard, func() {
			if !n.alive || w.now.Before(n.cut) {
				return
			}
			sent := n.local(w.now)
			w.at(w.now.Add(w.dur(200*time.Microsecond, 5*time.Millisecond)), func() {
				ttl, born, err := w.b.Status(w.now)
				if err != nil || !n.alive {
					return
				}
				w.at(w.now.Add(w.dur(200*time.Microsecond, 5*time.Millisecond)), func() {
					if !n.alive {
						return
					}
					if n.ttlRead == nil || n.ttlRead.sent.Before(sent) {
						n.ttlRead = &input{kind: inTTL, sent: sent, ttl: ttl, born: born}
					}
					w.notify(n, input{kind: inAskTTL, sent: sent})
				})
			})
		})
	}
}

// setTTL changes the bucket's TTL and advises the candidates of it. A
// deposed holder sits out a TTL as it knows it when it learns of the
// stand-down, which a TTL lowered meanwhile shortens.
func (w *simWorld) setTTL(ttl time.Duration) {
	w.ttl, w.lastTTLAt = ttl, w.now
	if w.deposed != "" {
		w.deposedTTL = min(w.deposedTTL, ttl)
	}
	w.b.SetTTL(w.now, ttl)
	w.advise()
}

// notify steps n with in, or queues it while n is busy or paused.
func (w *simWorld) notify(n *simNode, in input) {
	if n.busy || w.now.Before(n.paused) {
		n.inbox = append(n.inbox, in)
		return
	}
	in.now = n.local(w.now)
	w.step(n, in)
}

// remember notes the key's latest message, for stale reads.
func (w *simWorld) remember() {
	if msg, _ := w.b.Latest(w.now, w.key); msg != nil {
		w.history = append(w.history, *msg)
		if len(w.history) > 8 {
			w.history = w.history[1:]
		}
	}
}

// hinder applies a fault lasting heal() to the process pick chooses, if
// any: it moves each of the process's deadlines that until names to at
// least then, and reports whether there was a process.
func (w *simWorld) hinder(pick func() *simNode, heal func() time.Duration, format string, until func(*simNode) []*time.Time) bool {
	n := pick()
	if n == nil {
		return false
	}
	d := heal()
	w.logf("FAULT "+format, n.name, d)
	for _, t := range until(n) {
		*t = later(*t, w.now.Add(d))
	}
	return true
}

// standDown forces the key's holder to stand down, by a delete marker or,
// with purge, a purge; it reports whether a holder was there to depose.
func (w *simWorld) standDown(purge bool) bool {
	if w.removed {
		return false
	}
	msg, _ := w.b.Latest(w.now, w.key)
	if msg == nil || msg.Op != simkv.Put {
		return false
	}
	// A forced stand-down moves leadership: the deposed holder sits
	// out the takeover that follows.
	w.deposed, w.deposedAt, w.deposedTTL = w.stamps[simWriteID{msg.Revision, msg.Written}].Instance, w.now, w.ttl
	for _, n := range w.nodes {
		if n != nil && n.alive && n.name == w.deposed {
			w.deposedTTL = min(w.ttl, n.m.tm.ttl) // it sits out a TTL as it knows it (see setTTL)
		}
	}
	if purge {
		w.logf("FAULT the key is purged")
		w.logMsg(simMsg{op: simkv.Purge, rev: w.b.Purge(w.now, w.key)})
		w.remember()
	} else {
		w.logf("FAULT forced stand-down of revision %d", msg.Revision)
		rev, err := w.b.Delete(w.now, w.key, msg.Revision, nil)
		if err != nil {
			return false
		}
		w.logMsg(simMsg{op: simkv.Delete, rev: rev, expect: msg.Revision})
		w.remember()
	}
	w.flushWatches()
	return true
}
