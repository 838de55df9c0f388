package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMachineStoppingLeaderOffersTheKeyToItsSuccessor: a leader stopped
// with a successor named ends its term, then offers the key over its own
// revision to the successor, within its lease; taken up, nothing is
// released and the machine finishes.
func TestMachineStoppingLeaderOffersTheKeyToItsSuccessor(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	rev := m.held().rev
	out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if m.termRuns() || !slices.Contains(noteKinds(out.notes), noteEnded) {
		t.Fatalf("the term goes on (notes %v): it must end before the offer", noteKinds(out.notes))
	}
	if out.do.kind != doOffer || out.do.expect != rev || out.do.handOver.to != "c" {
		t.Fatalf("action %v expect %d to %q; want an offer of revision %d to c", out.do.kind, out.do.expect, out.do.handOver.to, rev)
	}
	if out.do.timeout <= 0 || out.do.timeout > maxOfferTimeout || now.Add(out.do.timeout).After(m.held().lease) {
		t.Fatalf("offer timeout %v: want at most %v and within the lease", out.do.timeout, maxOfferTimeout)
	}
	now = now.Add(2 * time.Millisecond)
	out = m.feed(input{kind: inOffer, now: now, sent: now.Add(-2 * time.Millisecond)})
	for i := 0; i < 10 && m.mode != finished; i++ {
		if out.do.kind == doRelease || out.do.kind == doWrite {
			t.Fatalf("action %v after the successor took the key: nothing is ours to write", out.do.kind)
		}
		out = m.feed(input{kind: inTick, now: now})
	}
	if m.mode != finished {
		t.Fatalf("the machine did not finish after the offer was taken up (phase %v, action %v)", m.phase, out.do.kind)
	}
}

// TestMachineStopOfferNotTakenUpReleases: a successor that does not take
// the key up (gone, refusing, or its answer lost) leaves the release every
// stop makes, marked, and naming nobody: the others need not wait for it.
func TestMachineStopOfferNotTakenUpReleases(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	rev := m.held().rev
	out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind != doOffer {
		t.Fatalf("action %v, want the offer", out.do.kind)
	}
	now = now.Add(out.do.timeout)
	out = m.feed(input{kind: inOffer, now: now, sent: now.Add(-out.do.timeout), err: context.DeadlineExceeded})
	if out.do.kind != doRelease || !out.do.marked || out.do.handOver.to != "" || out.do.expect != rev {
		t.Fatalf("action %v marked %v to %q expect %d; want the marked release of revision %d naming nobody", out.do.kind, out.do.marked, out.do.handOver.to, out.do.expect, rev)
	}
}

// TestMachineStopWithoutSuccessorReleases: with no successor named, with
// none that can be offered to (the driver cannot offer, or the name is the
// candidate's own), or with release on stop turned off, a stopping leader
// does as before: it releases, or leaves the key to expire.
func TestMachineStopWithoutSuccessorReleases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		offers, keep bool
		to           string
		want         actionKind
	}{
		{name: "no successor", offers: true, want: doRelease},
		{name: "driver cannot offer", offers: false, to: "c", want: doRelease},
		{name: "itself", offers: true, to: "a", want: doRelease},
		{name: "release on stop off", offers: true, to: "c", keep: true, want: doNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, now := leadingMachine(t, tc.offers)
			m.cfg.releaseOnStop = !tc.keep
			out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: tc.to}})
			if out.do.kind != tc.want {
				t.Fatalf("action %v, want %v", out.do.kind, tc.want)
			}
		})
	}
}

// TestMachineStopOfferWaitsForEarlierHolders: while a leader deposed
// before this term may still count on the key, a release cannot be marked,
// and neither is the key offered: the successor's term would begin at
// once. The stop releases unmarked, as before.
func TestMachineStopOfferWaitsForEarlierHolders(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	if !m.releaseMarked(now) {
		t.Fatal("the test's leader could not mark its release to begin with")
	}
	// The key was taken after a forced stand-down just seen: its holder
	// may count on it for a TTL from then (rule 1).
	m.held().from, m.held().fromSeenAt, m.held().fromTTL = KeyRemoved, now, m.tm.ttl
	if m.releaseMarked(now) {
		t.Fatal("a release is marked while the removed holder may count on the key")
	}
	out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind == doOffer || (out.do.kind == doRelease && out.do.marked) {
		t.Fatalf("action %v marked %v while an earlier holder may count on the key", out.do.kind, out.do.marked)
	}
}

// rollOf lists the candidates e's steward knows to be standing, by
// identity, best first.
func rollOf(e *Election) []string {
	e.mu.Lock()
	s := e.steward
	e.mu.Unlock()
	if s == nil {
		return nil
	}
	var ids []string
	for _, c := range s.st.roll.list() {
		ids = append(ids, c.Identity)
	}
	return ids
}

// TestStopHandsTheKeyToTheBestStandby: a leader that stops offers the key
// to the standby it ranks best (here, of equal priorities, the first by
// identity), which leads next without a release and a race of campaigns:
// among a, b and c, stopping the leader and starting it again moves
// leadership between a and b only, twenty times in a row. By a release
// alone c would win about half of them.
func TestStopHandsTheKeyToTheBestStandby(t *testing.T) {
	t.Parallel()
	const rounds = 20
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	es := map[string]*Election{}
	stops := map[string]func(){}
	start := func(name string) {
		es[name] = mustElection(t, name, "stopoffer", openBucket(t, connect(t, ts.url())),
			append(rec.options(name), WithMinTerm(200*time.Millisecond))...)
		stops[name] = runElection(t, es[name])
	}
	start("a")
	rec.waitFor(t, 10*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	start("b")
	start("c")
	var took []time.Duration
	for i := range rounds {
		evs := rec.snapshot()
		leader := evs[len(evs)-1].who
		want := map[string]string{"a": "b", "b": "a"}[leader]
		if want == "" {
			t.Fatalf("round %d: %s leads: %s", i, leader, describe(evs))
		}
		eventually(t, 10*time.Second, fmt.Sprintf("round %d: leader %s to know both standbys", i, leader), func() bool {
			return len(rollOf(es[leader])) == 2
		})
		before := wins(evs, "")
		asked := time.Now()
		stops[leader]()
		evs = rec.waitFor(t, 10*time.Second, fmt.Sprintf("round %d: the next leader after %s stopped", i, leader),
			func(evs []event) bool { return wins(evs, "") == before+1 })
		if next := evs[len(evs)-1]; !next.won || next.who != want {
			t.Fatalf("round %d: %s stopped knowing %v, and %s leads, not %s: %s", i, leader, []string{want, "c"}, next.who, want, describe(evs))
		}
		took = append(took, evs[len(evs)-1].at.Sub(asked))
		start(leader)
	}
	checkHistory(t, rec.snapshot())
	slices.Sort(took)
	t.Logf("%d stops, each handed to the best standby: from Stop to its OnWon p50 %v, max %v",
		rounds, took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
}

// TestMachineStopAfterGiveUpReleaseStillHandsOver: a leader whose bucket's
// TTL became unusable gives the key up (a release while running); once the
// TTL is usable again it campaigns, wins and leads. When it then stops, it
// must offer the key to its successor (or at least release it), not leave
// it to expire: the giving-up release was not the release after stopping.
func TestMachineStopAfterGiveUpReleaseStillHandsOver(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	born := now.Add(-time.Hour)
	now = now.Add(time.Millisecond)
	out := m.feed(input{kind: inTTL, now: now, sent: now, ttl: 500 * time.Millisecond, born: born})
	if out.do.kind != doRelease || m.termRuns() {
		t.Fatalf("action %v leading %v after the TTL became unusable; want the giving-up release", out.do.kind, m.termRuns())
	}
	out = m.feed(input{kind: inRelease, now: now, sent: now, marked: out.do.marked})
	if m.phase != candidate {
		t.Fatalf("phase %v after the giving-up release", m.phase)
	}
	rev := m.seenRev + 1 // the release's marker
	now = now.Add(time.Millisecond)
	out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
	for i := 0; i < 200 && !m.termRuns(); i++ {
		switch out.do.kind {
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now})
		case doWrite:
			rev++
			out = m.feed(input{kind: inWrite, now: now, sent: now, rev: rev, expect: out.do.expect})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
		case doWatch:
			out = m.feed(input{kind: inWatchMade, now: now, sent: now})
		default:
			now = now.Add(m.tm.ttl / 20)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	if !m.termRuns() {
		t.Fatal("the machine did not come to lead again")
	}
	out = m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind != doOffer && out.do.kind != doRelease {
		t.Fatalf("stopping leader of revision %d: action %v, done %v (phase %v): the key is left to expire", m.held().rev, out.do.kind, out.done, m.phase)
	}
}

// TestMachineStopOfferNotAfterTheLeaseLapsed: a leader paused past its
// lease (its timer and the stop fire together) must not offer the key as
// if its hold were fresh: a lapsed lease is to be followed by a read of the
// bucket's settings before anything rests on the hold (the bucket may have
// been made again, and its revision may be another candidate's), and the
// taker of an offer begins its term at once.
func TestMachineStopOfferNotAfterTheLeaseLapsed(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	now = m.held().lease.Add(time.Second) // paused past the lease; no tick came first
	out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind == doOffer || (out.do.kind == doRelease && out.do.marked) {
		t.Fatalf("action %v marked %v, %v after the lease lapsed, with no read of the settings since", out.do.kind, out.do.marked, now.Sub(m.held().lease))
	}
}

// TestMachineHandOverNotAfterTheLeaseLapsed: as on stop, a hand-over asked
// of a leader paused past its lease (before its timer came) neither
// offers the key nor releases it marked until the bucket's settings are
// read again: the hand-over is refused as too soon.
func TestMachineHandOverNotAfterTheLeaseLapsed(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	now = m.held().lease.Add(time.Second)
	out := m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	if out.do.kind == doOffer || (out.do.kind == doRelease && out.do.marked) {
		t.Fatalf("action %v marked %v, %v after the lease lapsed, with no read of the settings since", out.do.kind, out.do.marked, now.Sub(m.held().lease))
	}
}

// TestProcessStoppingTogetherHandsTheKeyOutside: the copies of one
// process (one identity, one context) stop together, the leader among
// them. Its copies rank first, but they are leaving too: the key must go
// to the candidate of the other process at once, not to a copy that is
// winding down, nor wait out a refused or unanswered offer.
func TestProcessStoppingTogetherHandsTheKeyOutside(t *testing.T) {
	const rounds = 4
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	var took []time.Duration
	for i := range rounds {
		key := fmt.Sprintf("together-%d", i)
		kv := openBucket(t, connect(t, ts.url()))
		ctx, stopProcess := context.WithCancel(context.Background())
		done := make(chan error, 3)
		var copies []*Election
		for _, inst := range []string{"w0", "w1", "w2"} {
			if i%2 == 1 { // each copy on a connection of its own, as the demo's workers
				kv = openBucket(t, connect(t, ts.url()))
			}
			e := mustElection(t, "a", key, kv, append(rec.options("a"), WithInstance(inst), WithLogger(testLogger{t, fmt.Sprintf("r%d %s: ", i, inst)}))...)
			copies = append(copies, e)
			go func() { done <- e.Start(ctx) }()
		}
		rec.waitFor(t, 10*time.Second, "a copy of a to lead", func(evs []event) bool { return wins(evs, "a") == i+1 })
		other := mustElection(t, "b", key, openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithLogger(testLogger{t, fmt.Sprintf("r%d b: ", i)}))...)
		stopOther := runElection(t, other)
		leader := leaderKnowing(t, copies, 3)
		asked := time.Now()
		stopProcess()
		evs := rec.waitFor(t, 10*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == i+1 })
		took = append(took, evs[len(evs)-1].at.Sub(asked))
		for range copies {
			if err := <-done; err != nil {
				t.Fatalf("Start: %v", err)
			}
		}
		if to := leader.HandedOverTo(); to != "b" {
			t.Errorf("round %d: the leader handed over to %q, want b", i, to)
		}
		stopOther()
	}
	checkHistory(t, rec.snapshot())
	slices.Sort(took)
	t.Logf("%d stops of a whole process: from the stop to b's OnLeading p50 %v, max %v", rounds, took[len(took)/2], took[len(took)-1])
	if worst := took[len(took)-1]; worst > time.Second {
		t.Fatalf("b led %v after the process stopped, more than the second a graceful stop allows", worst)
	}
}

// TestStopOfferGoesOnPastARefusal: a stop's offer refused outright, by an
// answer or for want of a candidate to answer, goes on to the next best
// standby, without those that refused; an offer left unanswered does not,
// as its write may have landed; nor does an offer that is not a stop's.
func TestStopOfferGoesOnPastARefusal(t *testing.T) {
	t.Parallel()
	roll := []handOver{{to: "a", instance: "w1"}, {to: "b", instance: "x"}, {to: "c", instance: "y"}}
	successor := func(but ...handOver) handOver {
		for _, ho := range roll {
			if !slices.ContainsFunc(but, func(o handOver) bool { return o.to == ho.to && o.instance == ho.instance }) {
				return ho
			}
		}
		return handOver{}
	}
	cases := []struct {
		name    string
		orNext  bool
		answers map[string]error // by candidate offered; absent: takes it
		offered []string
		took    string
		err     bool
	}{
		{name: "taken at once", orNext: true, offered: []string{"a"}, took: "a"},
		{name: "refused, then taken", orNext: true, answers: map[string]error{"a": errors.New("the candidate is stopping")}, offered: []string{"a", "b"}, took: "b"},
		{name: "no responders, then refused, then taken", orNext: true,
			answers: map[string]error{"a": nats.ErrNoResponders, "b": errors.New("the candidate is stopping")}, offered: []string{"a", "b", "c"}, took: "c"},
		{name: "all refuse", orNext: true, answers: map[string]error{"a": errors.New("no"), "b": errors.New("no"), "c": errors.New("no")},
			offered: []string{"a", "b", "c"}, took: "c", err: true},
		{name: "unanswered", orNext: true, answers: map[string]error{"a": context.DeadlineExceeded}, offered: []string{"a"}, took: "a", err: true},
		{name: "a named hand-over", orNext: false, answers: map[string]error{"a": errors.New("no")}, offered: []string{"a"}, took: "a", err: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var offered []string
			d := &driver{key: "k", log: nopLogger{}, successor: successor}
			d.offer = func(ctx context.Context, to handOver, rev uint64, epoch time.Time) error {
				offered = append(offered, to.to)
				if err, ok := tc.answers[to.to]; ok {
					if errors.Is(err, context.DeadlineExceeded) {
						<-ctx.Done()
						return ctx.Err()
					}
					return err
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			took, err := d.offerOnward(ctx, action{kind: doOffer, expect: 7, handOver: handOver{to: "a", instance: "w1", within: time.Second, orNext: tc.orNext}})
			if !slices.Equal(offered, tc.offered) || took.to != tc.took || (err != nil) != tc.err {
				t.Fatalf("offered %v, took %q, err %v; want offered %v, took %q, an error %v", offered, took.to, err, tc.offered, tc.took, tc.err)
			}
			if tc.orNext && took.within != time.Second {
				t.Fatalf("the offer onward to %s lost the hand-over's window: %v", took.to, took.within)
			}
		})
	}
}

// TestStopOfferNamesTheSuccessorAgainAfterOnLost: the stop's successor is
// named as the stop begins, and again as the key is offered, after OnLost
// returned. Here the leader's copies stop while its OnLost runs: named at
// the stop, the best standby was a copy; at the offer, the copies are
// leaving, and the key goes to the candidate of the other process at
// once, not to a copy that no longer answers.
func TestStopOfferNamesTheSuccessorAgainAfterOnLost(t *testing.T) {
	const rounds = 3
	const onLost = 150 * time.Millisecond
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	for i := range rounds {
		key := fmt.Sprintf("again-%d", i)
		kv := openBucket(t, connect(t, ts.url()))
		var copies []*Election
		cancels := map[*Election]func(){}
		done := make(chan error, 3)
		for _, inst := range []string{"w0", "w1", "w2"} {
			var term *Term
			who := "a/" + inst
			e := mustElection(t, "a", key, kv, WithInstance(inst),
				OnLeading(func(t *Term) { term = t; rec.add(event{who: who, won: true, term: t}) }),
				OnLost(func() {
					rec.add(event{who: who, term: term, cause: term.Cause()})
					time.Sleep(onLost) // a slow OnLost: the offer waits for it
				}))
			ctx, cancel := context.WithCancel(context.Background())
			copies, cancels[e] = append(copies, e), cancel
			go func() { done <- e.Start(ctx) }()
		}
		rec.waitFor(t, 10*time.Second, "a copy of a to lead", func(evs []event) bool { return wins(evs, "") == 2*i+1 })
		stopOther := runElection(t, mustElection(t, "b", key, openBucket(t, connect(t, ts.url())), rec.options("b")...))
		leader := leaderKnowing(t, copies, 3)
		asked := time.Now()
		cancels[leader]()
		time.Sleep(onLost / 3) // the stop has begun; OnLost runs
		for e, cancel := range cancels {
			if e != leader {
				cancel()
			}
		}
		evs := rec.waitFor(t, 10*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == i+1 })
		for range copies {
			if err := <-done; err != nil {
				t.Fatalf("Start: %v", err)
			}
		}
		if to := leader.HandedOverTo(); to != "b" {
			t.Errorf("round %d: the leader handed over to %q, want b", i, to)
		}
		if took := evs[len(evs)-1].at.Sub(asked); took > onLost+500*time.Millisecond {
			t.Errorf("round %d: b led %v after the stop, more than OnLost (%v) and a hand-over", i, took, onLost)
		}
		stopOther()
	}
	checkHistory(t, rec.snapshot())
}

// TestStopOfferSkipsAStandbyHeardLeavingAfterTheTerm: a stopping leader
// hears its election's announcements on after its term ended, so a
// standby heard leaving meanwhile (the copies of a fleet stopping
// together) is not offered the key: where none is left the key is
// released at once, not after an offer's wait for an answer that cannot
// come. Here the leader's first offer goes to b, a candidate on a raw
// connection that answers it only once c, a standby of another process,
// has stopped and been heard leaving.
func TestStopOfferSkipsAStandbyHeardLeavingAfterTheTerm(t *testing.T) {
	t.Parallel()
	const key = "leaving-late"
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", key, kv, rec.options("a")...)
	aCtx, stopA := context.WithCancel(context.Background())
	aDone := make(chan error, 1)
	go func() { aDone <- a.Start(aCtx) }()
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })

	// b ranks before c (by identity), so a's stop offers it the key first.
	fake := connect(t, ts.url())
	b := standing.Candidate{Identity: "b", Instance: "raw", Healthy: true, Since: time.Now()}
	offersToB := make(chan *nats.Msg, 4)
	var offered []string // whom each offer on the election's subject named
	var offeredMu sync.Mutex
	for _, sub := range []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{standing.CandidatesSubject(bucketName, key), func(m *nats.Msg) { _ = m.Respond(b.Encode()) }},
		{standing.HandOverSubject(bucketName, key), func(m *nats.Msg) {
			req, err := standing.DecodeHandOverRequest(m.Data)
			if err != nil || req.Revision == 0 {
				return
			}
			offeredMu.Lock()
			offered = append(offered, req.To)
			offeredMu.Unlock()
			if req.To == "b" {
				offersToB <- m
			}
		}},
	} {
		if _, err := fake.Subscribe(sub.subject, sub.handle); err != nil {
			t.Fatal(err)
		}
	}
	c := mustElection(t, "c", key, openBucket(t, connect(t, ts.url())), rec.options("c")...)
	stopC := runElection(t, c)
	eventually(t, 10*time.Second, "a to know b and c", func() bool {
		_ = fake.Publish(standing.AnnounceSubject(bucketName, key), b.Encode())
		return len(rollOf(a)) == 2
	})

	stopA()
	var offer *nats.Msg
	select {
	case offer = <-offersToB:
	case <-time.After(10 * time.Second):
		t.Fatal("a's stop offered b nothing")
	}
	stopC() // c stops after a's term ended, and says it leaves
	eventually(t, 5*time.Second, "a, stopping, to hear c leave", func() bool {
		return !slices.Contains(rollOf(a), "c")
	})
	_ = offer.Respond(standing.HandOverAnswer{Leader: "a", Error: "the candidate is stopping"}.Encode())
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("a's Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a did not stop")
	}
	offeredMu.Lock()
	defer offeredMu.Unlock()
	if !slices.Equal(offered, []string{"b"}) {
		t.Fatalf("a's stop offered the key to %v, want b alone: c was heard leaving before b refused", offered)
	}
	ent, err := realStore(kv).Latest(context.Background(), key)
	if err != nil || ent == nil {
		t.Fatalf("reading the key: %v", err)
	}
	if e := ReadEntry(ent); e.State != KeyReleased || e.ReleasedBy != "a" {
		t.Fatalf("a's stop left the key %s, want released by a", e.Describe())
	}
}

// leaderKnowing returns the one of es that leads, once it knows standbys
// other candidates: its stop names its successor from them.
func leaderKnowing(t *testing.T, es []*Election, standbys int) *Election {
	t.Helper()
	var leader *Election
	eventually(t, 10*time.Second, fmt.Sprintf("a leader among the copies to know %d standbys", standbys), func() bool {
		for _, e := range es {
			if e.IsLeader() {
				leader = e
			}
		}
		return leader != nil && len(rollOf(leader)) == standbys
	})
	return leader
}

// TestCampaignStopWritesAReleaseOnlyWhenNoOneElseCanLead: a leader's release is
// marked; a holder still waiting out a removal removes the key unmarked, so
// the next leader waits as it would have.
func TestCampaignStopWritesAReleaseOnlyWhenNoOneElseCanLead(t *testing.T) {
	const ttl = 10 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	s := newSim(t, st, "a")
	s.run(time.Millisecond)
	if !s.leading() {
		t.Fatal("a does not lead an empty key")
	}
	s.stop()
	if got := st.latest(); got.State != KeyReleased || got.ReleasedBy != "a" {
		t.Fatalf("after a leader stopped the key shows %s, want released by a", got.Describe())
	}
	if won, lost := s.callbacks(); won != 1 || lost != 1 {
		t.Fatalf("won %d lost %d", won, lost)
	}

	// b takes a key someone removed, and stops before its term begins.
	st.put("x")
	st.remove(nil)
	b := newSim(t, st, "b")
	b.run(time.Second)
	if b.c.m.phase != winning {
		t.Fatalf("b is %s, want winning", b.c.m.phase)
	}
	b.stop()
	if got := st.latest(); got.State != KeyRemoved {
		t.Fatalf("a holder waiting out a removal left %s, want removed (no release mark)", got.Describe())
	}
	if won, _ := b.callbacks(); won != 0 {
		t.Fatal("b led")
	}
}

// stopAsWinningStore holds the answer to a candidate's first write that
// lands (at "write"), or its first read of the bucket's settings after it
// (at "read", the read a winner's term waits for), until resume closes.
type stopAsWinningStore struct {
	store
	at      string
	wrote   atomic.Bool
	held    atomic.Bool
	holding chan struct{} // closed as the answer is held
	resume  chan struct{}
}

func (s *stopAsWinningStore) hold(ctx context.Context) {
	if s.held.CompareAndSwap(false, true) {
		close(s.holding)
		select {
		case <-s.resume:
		case <-ctx.Done():
		}
	}
}

func (s *stopAsWinningStore) Write(ctx context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (uint64, error) {
	got, err := s.store.Write(ctx, key, value, rev, st)
	if err == nil {
		s.wrote.Store(true)
		if s.at == "write" {
			s.hold(ctx)
		}
	}
	return got, err
}

func (s *stopAsWinningStore) Status(ctx context.Context, maxAge time.Duration) (jetstream.KeyValueStatus, time.Duration, error) {
	if s.at == "read" && s.wrote.Load() {
		s.hold(ctx)
	}
	return s.store.Status(ctx, maxAge)
}

// TestNoTermBeginsOnceStopIsCalled: Stop called while a campaign's write is
// landing, or once it landed while its term waits for a read of the
// bucket's settings, begins no term: no OnWon, IsLeader stays false, and
// the key is released at once with the release mark (standbys need not
// wait a TTL), rather than left to expire.
func TestNoTermBeginsOnceStopIsCalled(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Minute))
	for _, at := range []string{"write", "read"} {
		held := &stopAsWinningStore{store: realStore(kv), at: at, holding: make(chan struct{}), resume: make(chan struct{})}
		var won, leading atomic.Int32
		key := "late_" + at
		e := mustElection(t, "a", key, kv, withStore(held),
			OnWon(func() { won.Add(1) }),
			OnLeading(func(*Term) { leading.Add(1) }))
		done := make(chan error, 1)
		go func() { done <- e.Start(context.Background()) }()
		select {
		case <-held.holding:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the candidate's %s was never answered", at, at)
		}
		e.Stop()
		close(held.resume)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: Start returned %v", at, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: Start did not return after Stop", at)
		}
		if n, m := won.Load(), leading.Load(); n != 0 || m != 0 {
			t.Fatalf("stopped as its %s was answered: OnWon called %d times and OnLeading %d after Stop", at, n, m)
		}
		if e.IsLeader() || e.Term() != nil {
			t.Fatalf("%s: the stopped candidate reports a term", at)
		}
		ent, err := realStore(kv).Latest(context.Background(), key)
		if err != nil || ent == nil {
			t.Fatalf("%s: the key has no message (%v): the campaign never wrote", at, err)
		}
		if got := ReadEntry(ent); got.State != KeyReleased || got.ReleasedBy != "a" {
			t.Fatalf("stopped as its %s was answered, the key shows %s, want released by a with the mark", at, got.Describe())
		}
	}
}
