package streams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/internal/keymsg"
)

// lostAckStore is a real bucket's store whose writes can lose their
// acknowledgement: the write is stored, and the caller is told it timed
// out, as when a broker crashes between storing and answering.
type lostAckStore struct {
	store
	mu     sync.Mutex
	lose   func(value []byte, expect uint64) bool
	lost   []uint64
	before func()        // called before each write is sent, if set
	late   time.Duration // how long after the write a lost answer's error comes
	// answer, if set, holds each lost answer's error back until it is
	// closed (after late).
	answer chan struct{}
	// drop, if set, says which writes are never sent, their answer lost.
	drop    func(value []byte, expect uint64) bool
	dropped atomic.Int64
}

func (f *lostAckStore) Write(ctx context.Context, key string, value []byte, expect uint64, st keymsg.Stamp) (uint64, error) {
	if f.before != nil {
		f.before()
	}
	if f.drop != nil && f.drop(value, expect) {
		f.dropped.Add(1)
		return 0, context.DeadlineExceeded
	}
	rev, err := f.store.Write(ctx, key, value, expect, st)
	f.mu.Lock()
	lost := err == nil && f.lose != nil && f.lose(value, expect)
	if lost {
		f.lost = append(f.lost, rev)
	}
	f.mu.Unlock()
	if lost {
		time.Sleep(f.late) // the lost answer's error comes late; not under mu, which lostRevisions takes
		if f.answer != nil {
			<-f.answer
		}
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

func (f *lostAckStore) setLose(fn func(value []byte, expect uint64) bool) {
	f.mu.Lock()
	f.lose = fn
	f.mu.Unlock()
}

func (f *lostAckStore) lostRevisions() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.lost...)
}

func TestForcedStandDownMovesLeadershipSafely(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	a := mustElection(t, "a", "forced", kv, append(rec.options("a"), WithLogger(testLogger{t, "a: "}))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "forced", kv, rec.options("b")...)
	runElection(t, b)
	time.Sleep(100 * time.Millisecond) // b is watching

	deleted := time.Now()
	if err := kv.Delete(context.Background(), "forced"); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitFor(t, 2*time.Second, "a to stand down", func(evs []event) bool { return len(evs) >= 2 })
	if evs[1].who != "a" || evs[1].won || evs[1].cause != CauseDeposed {
		t.Fatalf("after delete: %s", describe(evs))
	}
	if took := evs[1].at.Sub(deleted); took > 500*time.Millisecond {
		t.Fatalf("a stood down %v after the delete, want at once", took)
	}
	evs = rec.waitFor(t, 5*time.Second, "b to take over", func(evs []event) bool { return wins(evs, "b") == 1 })
	// b must not lead before a TTL has passed since the removal: a leader
	// that did not see the delete would count on its deadline until then.
	if gap := evs[2].at.Sub(deleted); gap < ttl {
		t.Fatalf("b led %v after the delete, before a TTL (%v) had passed", gap, ttl)
	}
	if wins(evs, "a") != 1 {
		t.Fatalf("a won again instead of sitting out: %s", describe(evs))
	}
	checkHistory(t, evs)
}

func TestForcedStandDownOfALoneLeaderReturnsToIt(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "alone", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	if err := kv.Delete(context.Background(), "alone"); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitFor(t, 5*time.Second, "a to lead again", func(evs []event) bool { return wins(evs, "a") == 2 })
	if gap := evs[2].at.Sub(evs[1].at); gap < ttl/2 || gap > ttl+time.Second {
		t.Fatalf("a led again %v after being deposed, want about a TTL (%v)", gap, ttl)
	}
	checkHistory(t, evs)
}

func TestLeaderWhoseConnectionClosesIsReplacedAfterExpiry(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	ncA := connect(t, ts.url())
	a := mustElection(t, "a", "crash", openBucket(t, ncA), rec.options("a")...)
	doneA := make(chan error, 1)
	go func() { doneA <- a.Start(context.Background()) }()
	t.Cleanup(a.Stop)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "crash", kv, rec.options("b")...))
	time.Sleep(100 * time.Millisecond)

	crashed := time.Now()
	ncA.Close() // a can no longer reach the broker: its key will expire
	select {
	case err := <-doneA:
		if !errors.Is(err, nats.ErrConnectionClosed) || !strings.Contains(err.Error(), "connection to the broker was closed") {
			t.Fatalf("Start = %v, want an error wrapping nats.ErrConnectionClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not end after its connection closed")
	}
	if a.IsLeader() {
		t.Fatal("a still claims to lead")
	}
	evs := rec.waitFor(t, 5*time.Second, "b to take over", func(evs []event) bool { return wins(evs, "b") == 1 })
	var lostA, wonB event
	for _, e := range evs {
		if e.who == "a" && !e.won {
			lostA = e
		}
		if e.who == "b" && e.won {
			wonB = e
		}
	}
	if lostA.seq == 0 || lostA.cause != CauseClosed {
		t.Fatalf("a did not stand down when its connection closed: %s", describe(evs))
	}
	if failover := wonB.at.Sub(crashed); failover > ttl+time.Second {
		t.Fatalf("failover took %v, want under TTL + 1s", failover)
	}
	checkHistory(t, evs)
}

func TestLeaderStandsDownAtDeadlineByTheClockAlone(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(10*time.Second))
	fake := clocktest.New(time.Now())
	rec := newRecorder()
	e := mustElection(t, "a", "paused", kv, append(rec.options("a"), WithClock(fake), WithLogger(testLogger{t, "a: "}))...)
	runElection(t, e)
	evs := rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	term := evs[0].term
	until := term.ValidUntil()
	if want := fake.Now().Add(9 * time.Second); until.After(want) || until.Before(want.Add(-time.Second)) {
		t.Fatalf("valid until %v, want about TTL - margin (%v) after winning", until, want)
	}

	// Just short of the deadline it still leads; at the deadline it does not,
	// at once, before the election's goroutine has had any chance to run:
	// as after a process pause.
	fake.Advance(until.Sub(fake.Now()) - time.Millisecond)
	if !e.IsLeader() || !term.Valid() {
		t.Fatal("not leader before the deadline")
	}
	fake.Advance(time.Millisecond)
	if e.IsLeader() || term.Valid() || e.State() == LeaderState {
		t.Fatal("still leader at the deadline")
	}
	if err := term.Context().Err(); err == nil {
		t.Fatal("term context not cancelled at the deadline")
	}
	select {
	case <-term.Context().Done():
	default:
		t.Fatal("term context Done not closed once Err reported the end")
	}
	if term.Cause() != CauseDeadline {
		t.Fatalf("cause %v", term.Cause())
	}
	// The election then reports the loss, and, since the key is still its
	// own on the broker, a renewal starts a new term with a newer token.
	// The clock moves on meanwhile, as it does after a pause: a renewal
	// sent in the last millisecond may time out and land, and what the
	// election does then (read the key, wait its backoff) takes its time.
	ticking := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-ticking:
				return
			case <-time.After(10 * time.Millisecond):
				fake.Advance(50 * time.Millisecond)
			}
		}
	}()
	evs = rec.waitFor(t, 5*time.Second, "a to lead again", func(evs []event) bool { return len(evs) >= 3 })
	close(ticking)
	<-ticked
	if evs[1].won || evs[1].cause != CauseDeadline || !evs[2].won || evs[2].term.Token() <= term.Token() {
		t.Fatalf("after the deadline: %s", describe(evs))
	}
	checkHistory(t, evs)
}

func TestBrokerOutageShorterThanTheLeaseKeepsTheLeader(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(5*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "blip", kv, rec.options("a")...))
	runElection(t, mustElection(t, "b", "blip", kv, rec.options("b")...))
	rec.waitFor(t, 5*time.Second, "a win", func(evs []event) bool { return wins(evs, "") == 1 })
	first := leader(rec.snapshot())

	ts.restart()
	_, rev, _ := value(t, kv, "blip")
	eventually(t, 10*time.Second, "renewals after the restart", func() bool { _, r, _ := value(t, kv, "blip"); return r > rev+1 })
	if evs := rec.snapshot(); len(evs) != 1 || leader(evs) != first {
		t.Fatalf("a broker restart within the lease changed leadership: %s", describe(evs))
	}
}

func TestLeaderCutOffFromTheBrokerStandsDownAtItsDeadline(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	e := mustElection(t, "a", "down", kv, rec.options("a")...)
	runElection(t, e)
	evs := rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	ts.stop()
	stopped := time.Now()
	evs = rec.waitFor(t, 3*time.Second, "a to stand down", func(evs []event) bool { return len(evs) == 2 })
	if evs[1].cause != CauseDeadline || evs[1].at.Sub(stopped) > ttl+200*time.Millisecond {
		t.Fatalf("stood down %v after the broker stopped: %s", evs[1].at.Sub(stopped), describe(evs))
	}
	if !evs[0].term.ValidUntil().Before(stopped.Add(ttl)) {
		t.Fatal("the term outlived the key")
	}
	// It campaigns again once the broker is back.
	ts.start()
	rec.waitFor(t, 10*time.Second, "a to lead again", func(evs []event) bool { return wins(evs, "a") == 2 })
	checkHistory(t, rec.snapshot())
}

func TestAmbiguousRenewalNeverMakesASecondLeader(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	faulty := &lostAckStore{store: realStore(kv)}
	rec := newRecorder()
	// Same identity on both: the worst case, where a stored value names
	// either candidate.
	a := mustElection(t, "host", "ambiguous", kv, append(rec.options("a"), withStore(faulty), WithLogger(testLogger{t, "a: "}))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "host", "ambiguous", kv, rec.options("b")...))
	time.Sleep(100 * time.Millisecond)

	var faultAt atomic.Int64
	faulty.setLose(func(value []byte, expect uint64) bool {
		if len(value) > 0 && expect != 0 && faultAt.Load() == 0 {
			faultAt.Store(time.Now().UnixNano())
			return true // lose the ack of the next renewal
		}
		return false
	})
	evs := rec.waitFor(t, 10*time.Second, "someone to lead after a", func(evs []event) bool { return len(evs) >= 3 })
	if len(faulty.lostRevisions()) != 1 {
		t.Fatalf("lost %v", faulty.lostRevisions())
	}
	lost := evs[1]
	if lost.who != "a" || lost.cause != CauseDeadline {
		t.Fatalf("a should lead until its deadline: %s", describe(evs))
	}
	// a stood down at its deadline, not at the first refused renewal: a
	// healthy leader keeps leading while its deadline holds.
	fault := time.Unix(0, faultAt.Load())
	if held := lost.term.ValidUntil().Sub(fault); held < ttl-ttl/10-ttl/3-100*time.Millisecond {
		t.Fatalf("a stood down %v after the lost ack, before its deadline", held)
	}
	checkHistory(t, evs)
}

// TestAmbiguousCampaignIsTakenUpByItsWriterAlone: a campaign write that
// was stored but whose answer was lost is taken up by the candidate that
// wrote it as soon as it sees the write in the key (by the number the
// write carries), not left to expire with nobody leading, and its lease
// counts from when the write was sent, not from when its answer failed. A
// copy of the same identity and instance, whose own campaign's outcome is
// in doubt too, does not take it for its own.
func TestAmbiguousCampaignIsTakenUpByItsWriterAlone(t *testing.T) {
	t.Parallel()
	const ttl = 6 * time.Second // renewals every 2s: none before the term begins
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	// b, the copy: none of its campaign writes is sent, and each answer
	// is lost, so it always has one in doubt.
	copyStore := &lostAckStore{store: realStore(kv), drop: func(value []byte, _ uint64) bool { return len(value) > 0 }}
	var copySent atomic.Int64
	copyStore.before = func() { copySent.CompareAndSwap(0, time.Now().UnixNano()) }
	rec := newRecorder()
	runElection(t, mustElection(t, "host", "amb_create", kv, append(rec.options("b"), withStore(copyStore), WithInstance("one"))...))
	eventually(t, 5*time.Second, "b's campaign in doubt", func() bool { return copyStore.dropped.Load() >= 1 })

	// a: its first campaign write is stored, and its answer fails 1.2s
	// later, past the safety margin (600ms at this TTL).
	faulty := &lostAckStore{store: realStore(kv), late: 1200 * time.Millisecond}
	var once atomic.Bool
	var sent atomic.Int64
	faulty.setLose(func(value []byte, expect uint64) bool { return len(value) > 0 && once.CompareAndSwap(false, true) })
	faulty.before = func() {
		if !once.Load() {
			sent.Store(time.Now().UnixNano())
		}
	}
	var firstUntil atomic.Int64 // the deadline of a's term as it began
	var a *Election
	a = mustElection(t, "host", "amb_create", kv, append(rec.options("a"), withStore(faulty), WithInstance("one"),
		OnWon(func() {
			if term := a.Term(); term != nil {
				firstUntil.CompareAndSwap(0, term.ValidUntil().UnixNano())
			}
		}))...)
	runElection(t, a)
	eventually(t, 5*time.Second, "the lost campaign", func() bool { return len(faulty.lostRevisions()) == 1 })
	stored := time.Unix(0, sent.Load())
	evs := rec.waitFor(t, 5*time.Second, "a leader", func(evs []event) bool { return wins(evs, "") >= 1 })
	first := evs[0]
	if first.who != "a" {
		t.Fatalf("%s leads on a's stored campaign write: %s", first.who, describe(evs))
	}
	if gap := first.at.Sub(stored); gap > ttl/2 {
		t.Fatalf("a led %v after its campaign write: it must take the write up as it sees it, not wait for it to expire", gap)
	}
	if until, limit := time.Unix(0, firstUntil.Load()), stored.Add(ttl); firstUntil.Load() == 0 || until.After(limit) {
		t.Fatalf("a's term runs until %v past a TTL from when its write was sent: its lease must count from then", until.Sub(limit))
	}
	if got, want := first.term.Token(), faulty.lostRevisions()[0]; got != want {
		t.Fatalf("a's term has token %d, want its stored write's revision %d", got, want)
	}
	time.Sleep(ttl / 2) // a renews; b, its copy, keeps campaigning in vain
	evs = rec.snapshot()
	if wins(evs, "b") != 0 || wins(evs, "a") != 1 {
		t.Fatalf("leadership moved while a renewed: %s", describe(evs))
	}
	if doubtEnds := time.Unix(0, copySent.Load()).Add(ttl - ttl/10); !stored.Before(doubtEnds) {
		t.Fatalf("a's write was stored after b's own write in doubt could be taken up (by %v): the test shows nothing", doubtEnds)
	}
	checkHistory(t, evs)
}

// TestAStopLooksForItsWriteInDoubt: a candidate stopped while the answer
// to its stored campaign write is lost reads the key once before it
// finishes, finds its write, and releases it with the mark: the key is
// not left in its name, leaderless, for up to a TTL, and standbys may
// take over at once. No term begins (no OnWon after Stop).
func TestAStopLooksForItsWriteInDoubt(t *testing.T) {
	t.Parallel()
	const ttl = 6 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	faulty := &lostAckStore{store: realStore(kv), answer: make(chan struct{})}
	var once atomic.Bool
	faulty.setLose(func(value []byte, _ uint64) bool { return len(value) > 0 && once.CompareAndSwap(false, true) })
	rec := newRecorder()
	a := mustElection(t, "a", "stop_doubt", kv, append(rec.options("a"), withStore(faulty))...)
	stopped := runElection(t, a)
	eventually(t, 5*time.Second, "a's stored campaign write", func() bool { return len(faulty.lostRevisions()) == 1 })
	if v, rev, ok := value(t, kv, "stop_doubt"); !ok || v != "a" || rev != faulty.lostRevisions()[0] {
		t.Fatalf("the key is %q at %d (%v), want a's write at %d", v, rev, ok, faulty.lostRevisions()[0])
	}
	a.Stop()             // while the write's answer is held back...
	close(faulty.answer) // ...then lost
	stopped()
	ent, err := realStore(kv).Latest(context.Background(), "stop_doubt")
	if err != nil || ent == nil {
		t.Fatalf("reading the key: %v", err)
	}
	if got := ReadEntry(ent); got.State != KeyReleased || got.ReleasedBy != "a" {
		t.Fatalf("a stopped and left the key %s; want released by a with the mark", got.Describe())
	}
	if evs := rec.snapshot(); wins(evs, "") != 0 {
		t.Fatalf("a term began: %s", describe(evs))
	}
}

func TestStartRetriesWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	ts.stop()
	rec := newRecorder()
	var logs strings.Builder
	var mu sync.Mutex
	e := mustElection(t, "a", "late", kv, append(rec.options("a"), WithRequestTimeout(200*time.Millisecond), WithLogger(funcLogger(func(s string) {
		mu.Lock()
		logs.WriteString(s + "\n")
		mu.Unlock()
	})))...)
	runElection(t, e)
	time.Sleep(time.Second)
	if e.State() != CandidateState {
		t.Fatalf("state %v while waiting for the broker", e.State())
	}
	ts.start()
	rec.waitFor(t, 15*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "cannot read bucket CHORIA_LEADER_ELECTION (the connection to the broker is down; it reconnects)") {
		t.Fatalf("no log line says why it waited:\n%s", logs.String())
	}
}

func TestGraceDelaysWinningAfterAnExpiry(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Second, 700 * time.Millisecond
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	stopA := runElection(t, mustElection(t, "a", "grace", kv, append(rec.options("a"), WithReleaseOnStop(false))...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "grace", kv, append(rec.options("b"), WithGrace(grace))...)
	runElection(t, b)
	time.Sleep(100 * time.Millisecond)
	stopA()
	var took time.Time
	eventually(t, 5*time.Second, "b to take the key", func() bool {
		v, _, ok := value(t, kv, "grace")
		if ok && v == "b" {
			took = time.Now()
			return true
		}
		return false
	})
	evs := rec.waitFor(t, 5*time.Second, "b to win", func(evs []event) bool { return wins(evs, "b") == 1 })
	if waited := evs[len(evs)-1].at.Sub(took); waited < grace-100*time.Millisecond {
		t.Fatalf("b won %v after taking the key, want the %v grace", waited, grace)
	}
}

// choriaCandidate campaigns the way Choria's own candidates do: Create to
// win, Update on its last revision to renew, no local deadline.
func choriaCandidate(ctx context.Context, kv jetstream.KeyValue, key, identity string, every time.Duration, leading *atomic.Bool) {
	var last uint64
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if leading.Load() {
			rev, err := kv.Update(ctx, key, []byte(identity), last)
			if err != nil {
				leading.Store(false)
			} else {
				last = rev
			}
		} else if rev, err := kv.Create(ctx, key, []byte(identity)); err == nil {
			last = rev
			leading.Store(true)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func TestInteroperatesWithChoriaStyleCandidates(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))

	// A Choria-style leader holds the key: ours must wait.
	ctx, cancel := context.WithCancel(context.Background())
	var choriaLeads atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		choriaCandidate(ctx, kv, "mixed", "choria.example.net", 200*time.Millisecond, &choriaLeads)
	}()
	eventually(t, 5*time.Second, "the Choria-style candidate to lead", choriaLeads.Load)
	rec := newRecorder()
	ours := mustElection(t, "conclave.example.net", "mixed", kv, rec.options("ours")...)
	stopOurs := runElection(t, ours)
	time.Sleep(2 * ttl)
	if wins(rec.snapshot(), "") != 0 || !choriaLeads.Load() {
		t.Fatalf("ours won while a Choria-style leader renewed: %s", describe(rec.snapshot()))
	}
	// It stops renewing: ours takes over after the key expires.
	cancel()
	<-done
	rec.waitFor(t, 3*time.Second, "ours to win", func(evs []event) bool { return wins(evs, "ours") == 1 })

	// Choria-style candidates cannot create the key while ours leads...
	if _, err := kv.Create(context.Background(), "mixed", []byte("choria.example.net")); err == nil {
		t.Fatal("Create succeeded while our candidate led")
	}
	// ...and can right after ours stops: the release removes the key.
	stopOurs()
	if _, err := kv.Create(context.Background(), "mixed", []byte("choria.example.net")); err != nil {
		t.Fatalf("Create after our leader stopped: %v", err)
	}
}

type funcLogger func(string)

func (f funcLogger) Debugf(format string, a ...any) { f("DEBUG " + sprintf(format, a...)) }
func (f funcLogger) Infof(format string, a ...any)  { f("INFO " + sprintf(format, a...)) }
func (f funcLogger) Warnf(format string, a ...any)  { f("WARN " + sprintf(format, a...)) }
func (f funcLogger) Errorf(format string, a ...any) { f("ERROR " + sprintf(format, a...)) }

// changeTTL changes the election bucket's TTL as an operator (or a broker
// with a new configuration) would.
func changeTTL(t *testing.T, kv jetstream.KeyValue, nc *nats.Conn, ttl time.Duration) {
	t.Helper()
	js, _ := jetstream.New(nc)
	if err := setBucketTTL(context.Background(), js, ttl); err != nil {
		t.Fatalf("update TTL: %v", err)
	}
	st, err := kv.Status(context.Background())
	if err != nil || st.TTL() != ttl {
		t.Fatalf("TTL is %v (%v) after the update", st.TTL(), err)
	}
}

func TestLeaderAdoptsALoweredTTL(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(2*time.Second))
	rec := newRecorder()
	var mu sync.Mutex
	var logs strings.Builder
	e := mustElection(t, "a", "shrink", kv, append(rec.options("a"), WithLogger(funcLogger(func(s string) {
		mu.Lock()
		logs.WriteString(s + "\n")
		mu.Unlock()
	})))...)
	runElection(t, e)
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	changeTTL(t, kv, nc, time.Second)
	eventually(t, (ttlChecksEvery+1)*2*time.Second, "the leader to notice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "bucket TTL changed from 2s to 1s")
	})
	// From now on its deadline is within the new TTL of its last write.
	for i := 0; i < 20; i++ {
		if term := e.Term(); term != nil && term.Valid() {
			if left := time.Until(term.ValidUntil()); left > time.Second {
				t.Fatalf("leader counts on %v more with a 1s TTL", left)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkHistory(t, rec.snapshot())
}

func TestForcedTakeoverWaitsByARaisedTTL(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "grow", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "grow", kv, rec.options("b")...))
	changeTTL(t, kv, nc, 3*time.Second)
	time.Sleep(1500 * time.Millisecond) // a renews under the new TTL
	deleted := time.Now()
	if err := kv.Delete(context.Background(), "grow"); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitFor(t, 10*time.Second, "b to win", func(evs []event) bool { return wins(evs, "b") == 1 })
	if waited := evs[len(evs)-1].term.Started().Sub(deleted); waited < 3*time.Second {
		t.Fatalf("b led %v after the delete: a deposed leader may count on the raised 3s TTL", waited)
	}
	checkHistory(t, evs)
}

// countingStore counts the writes a candidate makes.
type countingStore struct {
	store
	updates atomic.Int64
}

func (c *countingStore) Write(ctx context.Context, key string, value []byte, expect uint64, st keymsg.Stamp) (uint64, error) {
	c.updates.Add(1)
	return c.store.Write(ctx, key, value, expect, st)
}

// TestStandbysStayQuietAfterABrokerRestart checks that a standby whose watch
// died with the broker refreshes its view and waits for the leader's next
// predicted expiry, instead of campaigning over and over against a live leader.
func TestStandbysStayQuietAfterABrokerRestart(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "quiet", kv, append(rec.options("a"), WithLogger(testLogger{t, "a: "}))...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	other := openBucket(t, connect(t, ts.url()))
	// The shared watch outlives a restart (its consumer is made again):
	// the tap ends the standby's as the restart begins.
	tap := newTap(other, 0)
	standby := &countingStore{store: tap}
	runElection(t, mustElection(t, "b", "quiet", other, append(rec.options("b"), withStore(standby), WithLogger(testLogger{t, "b: "}))...))
	eventually(t, 5*time.Second, "b's watch", func() bool { return tap.watchCount() == 1 })
	time.Sleep(200 * time.Millisecond)

	tap.cutWatches()
	ts.restart()
	_, rev, _ := value(t, kv, "quiet")
	eventually(t, 10*time.Second, "a to renew after the restart", func() bool { _, r, _ := value(t, kv, "quiet"); return r > rev })
	time.Sleep(2 * ttl) // the standby's view goes stale, and must recover
	before := standby.updates.Load()
	time.Sleep(5 * ttl)
	if n := standby.updates.Load() - before; n > 5 {
		t.Fatalf("the standby made %d campaign writes in %v against a live leader", n, 5*ttl)
	}
	if n := tap.watchCount(); n < 2 {
		t.Fatalf("the standby's watch was made %d times: it ended with the restart, and must be made again", n)
	}
	if evs := rec.snapshot(); leader(evs) != "a" || len(evs) != 1 {
		t.Fatalf("leadership changed: %s", describe(evs))
	}
	// And it still reacts to a forced stand-down.
	if err := kv.Delete(context.Background(), "quiet"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 5*time.Second, "b to take over", func(evs []event) bool { return wins(evs, "b") == 1 })
}

// linkStore is a real bucket's store behind a link that can drop writes
// (nothing is stored, the caller times out) or lose answers (stored, the
// caller times out), as a flapping network does.
type linkStore struct {
	store
	mode atomic.Int32 // 0 up, 1 dropping, 2 losing answers
}

const (
	linkUp = iota
	linkDropping
	linkLosingAnswers
)

func (l *linkStore) Write(ctx context.Context, key string, value []byte, expect uint64, st keymsg.Stamp) (uint64, error) {
	switch l.mode.Load() {
	case linkDropping:
		return 0, context.DeadlineExceeded
	case linkLosingAnswers:
		_, _ = l.store.Write(ctx, key, value, expect, st)
		return 0, context.DeadlineExceeded
	}
	return l.store.Write(ctx, key, value, expect, st)
}

// TestLeaderWhoseRenewalsVanishIsReplacedPromptly: a leader whose renewals
// are lost stands down at its deadline, and a standby leads within a TTL and a
// second of that, even though the old leader's later writes land without an
// answer: a write on its last revision can only land while that revision
// lives, so it cannot keep the key from others for long.
func TestLeaderWhoseRenewalsVanishIsReplacedPromptly(t *testing.T) {
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	link := &linkStore{store: realStore(kv)}
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "flap", kv, append(rec.options("a"), withStore(link), WithLogger(testLogger{t, "a: "}))...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "flap", kv, rec.options("b")...))
	time.Sleep(100 * time.Millisecond)

	link.mode.Store(linkDropping) // a's renewals vanish: it must stand down at its deadline
	evs := rec.waitFor(t, 5*time.Second, "a to stand down", func(evs []event) bool { return len(evs) >= 2 })
	if evs[1].who != "a" || evs[1].cause != CauseDeadline {
		t.Fatalf("events: %s", describe(evs))
	}
	time.Sleep(ttl)                    // still dropping: a retries, backing off
	link.mode.Store(linkLosingAnswers) // from now on a's writes land, but it never hears back
	stoodDown := evs[1].term.ValidUntil()
	evs = rec.waitFor(t, 3*ttl, "b to take over", func(evs []event) bool { return wins(evs, "b") == 1 })
	if gap := evs[len(evs)-1].term.Started().Sub(stoodDown); gap > ttl+time.Second {
		t.Fatalf("no leader for %v after a stood down", gap)
	}
	checkHistory(t, evs)
}
