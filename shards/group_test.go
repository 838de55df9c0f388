package shards_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/shards"
)

var abcd = []string{"a", "b", "c", "d"}

// TestFourMembersSpreadSixtyFourShardsEvenly: four members of a 64-shard
// group hold 16 each, and each member's Held agrees with its callbacks.
func TestFourMembersSpreadSixtyFourShardsEvenly(t *testing.T) {
	f := newFleet(t, startBroker(t), "ingest", 64)
	var ms []*member
	for _, id := range abcd {
		ms = append(ms, f.start(id))
	}
	f.await("16 each", f.spread(abcd, 16, 16))
	f.heldAgree(ms...)
	f.check()
}

// TestStoppedMemberHandsEachShardOverAndRejoinMovesEachOnce: a member that
// stops hands each of its 16 shards over by name, spread 21/21/22 over the
// others, each without a gap beyond one hand-over; when it starts again it
// gets 16 back, by hand-overs, with no shard moving twice.
func TestStoppedMemberHandsEachShardOverAndRejoinMovesEachOnce(t *testing.T) {
	f := newFleet(t, startBroker(t), "ingest", 64)
	ms := map[string]*member{}
	for _, id := range abcd {
		ms[id] = f.start(id)
	}
	f.await("16 each", f.spread(abcd, 16, 16))
	f.resetMoves()

	if err := ms["d"].stop(t); err != nil {
		t.Fatalf("Start returned %v", err)
	}
	f.await("21 to 22 each over three", f.spread(abcd[:3], 21, 22))
	f.checkMoves("stop", 16, map[shards.MoveCause]int{shards.MoveLeave: 16})

	f.resetMoves()
	ms["d"] = f.start("d")
	f.await("16 each again", f.spread(abcd, 16, 16))
	f.checkMoves("rejoin", 16, map[shards.MoveCause]int{shards.MoveRebalance: 16})
	f.check()
}

// checkMoves checks that want shards moved since resetMoves, each once,
// each handed over within one hand-over, and the recorder's causes.
func (f *fleet) checkMoves(what string, want int, causes map[shards.MoveCause]int) {
	f.t.Helper()
	f.mu.Lock()
	moved := 0
	for s, n := range f.moves {
		if n > 1 {
			f.t.Errorf("%s: shard %d moved %d times", what, s, n)
		}
		moved += n
	}
	gaps := append([]time.Duration(nil), f.gaps...)
	declined := append([]string(nil), f.declined...)
	f.mu.Unlock()
	if moved != want {
		f.t.Errorf("%s: %d shards moved, want %d", what, moved, want)
	}
	// Each move is an offer taken up: one synced write after the holder's
	// OnRevoked, milliseconds. An offer not taken up would have moved the
	// shard by a release instead, as the holder's log says; the time bound
	// is generous for a loaded machine running the race detector, and
	// below the TTL that an expiry would cost.
	for _, d := range declined {
		f.t.Errorf("%s: a shard moved without a hand-over: %s", what, d)
	}
	var worst time.Duration
	for _, g := range gaps {
		worst = max(worst, g)
	}
	if worst > 1500*time.Millisecond {
		f.t.Errorf("%s: a shard was without a holder for %v", what, worst)
	}
	f.t.Logf("%s: %d shards moved, longest gap %v", what, moved, worst)
	got := f.rec.snapshot()
	for c, n := range causes {
		if got[c] != n {
			f.t.Errorf("%s: %d moves of cause %s, want %d (all: %v)", what, got[c], c, n, got)
		}
	}
	if got[shards.MoveTakeover] != causes[shards.MoveTakeover] {
		f.t.Errorf("%s: %d takeovers, want %d", what, got[shards.MoveTakeover], causes[shards.MoveTakeover])
	}
}

// TestCrashedMembersShardsAreSpreadOverSurvivors: the shards of a member
// whose connection dies are taken about a TTL later, spread over the
// survivors: no survivor ever holds more than its share.
func TestCrashedMembersShardsAreSpreadOverSurvivors(t *testing.T) {
	f := newFleet(t, startBroker(t), "ingest", 64)
	ms := map[string]*member{}
	for _, id := range abcd {
		ms[id] = f.start(id)
	}
	f.await("16 each", f.spread(abcd, 16, 16))
	f.resetMoves()

	crashed := time.Now()
	ms["d"].nc.Close() // its elections can no longer renew: their keys expire
	if err := <-ms["d"].done; err == nil {
		t.Errorf("Start returned nil after the connection closed")
	}
	ms["d"].cancel()
	ms["d"].cancel = nil
	worst := 0
	f.await("21 to 22 each over three", func(c map[string]int) bool {
		for _, id := range abcd[:3] {
			worst = max(worst, c[id])
		}
		return f.spread(abcd[:3], 21, 22)(c)
	})
	took := time.Since(crashed)
	t.Logf("survivors held all 64 shards %v after the crash", took)
	if worst > 22 {
		t.Errorf("a survivor held %d shards, more than its share", worst)
	}
	if took > 4*testTTL {
		t.Errorf("took %v to retake the crashed member's shards, want about a TTL (%v)", took, testTTL)
	}
	if got := f.rec.snapshot()[shards.MoveTakeover]; got != 16 {
		t.Errorf("%d takeovers, want 16", got)
	}
	f.check()
}

// TestUnhealthyMemberHandsOverAndTakesNone: a member whose health check
// fails hands its shards over to the healthy members and is given none.
func TestUnhealthyMemberHandsOverAndTakesNone(t *testing.T) {
	f := newFleet(t, startBroker(t), "jobs", 30)
	var sick atomic.Bool
	check := func(context.Context) error {
		if sick.Load() {
			return errUnhealthy
		}
		return nil
	}
	ids := []string{"a", "b", "c"}
	f.start("a")
	f.start("b")
	c := f.start("c", shards.WithHealthCheck(check, 50*time.Millisecond))
	f.await("10 each", f.spread(ids, 10, 10))
	f.resetMoves()

	sick.Store(true)
	f.await("15 each over the healthy", f.spread(ids[:2], 15, 15))
	f.checkMoves("unhealthy", 10, map[shards.MoveCause]int{shards.MoveUnhealthy: 10})
	if held := c.g.Held(); len(held) != 0 {
		t.Errorf("the unhealthy member holds %v", held)
	}

	f.resetMoves()
	sick.Store(false)
	f.await("10 each again", f.spread(ids, 10, 10))
	f.checkMoves("healthy again", 10, map[shards.MoveCause]int{shards.MoveRebalance: 10})
	f.check()
}

// TestQuietGroupMakesNoMoves: once spread, a group whose members neither
// join nor leave moves no shard over several TTLs of renewals and
// announcements.
func TestQuietGroupMakesNoMoves(t *testing.T) {
	// A TTL of 4s leaves renewals room on a loaded machine: a term lost
	// to a stalled renewal would move its shard, and that is not what
	// this test is about.
	const ttl = 4 * time.Second
	f := newFleet(t, brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = ttl }), "quiet", 64)
	for _, id := range abcd {
		f.start(id)
	}
	f.await("16 each", f.spread(abcd, 16, 16))
	f.resetMoves()
	// Absence of moves can only be watched for a while: two TTLs cover
	// six renewals of every shard and eight announcements of every member.
	time.Sleep(2 * ttl)
	f.checkMoves("quiet", 0, nil)
	f.check()
}

// TestWeightsSpreadByShare: a member of weight 3 holds three times the
// shards of one of weight 1.
func TestWeightsSpreadByShare(t *testing.T) {
	f := newFleet(t, startBroker(t), "weighted", 40)
	f.start("big", shards.WithWeight(3))
	f.start("small")
	f.await("30 and 10", func(c map[string]int) bool { return c["big"] == 30 && c["small"] == 10 })
	f.check()
}

// TestMembersOnOneConnection: members sharing a connection (and so one
// group subscription) spread like members on their own.
func TestMembersOnOneConnection(t *testing.T) {
	f := newFleet(t, startBroker(t), "shared", 12)
	nc, js := f.connect()
	for _, id := range []string{"a", "b", "c"} {
		f.startOn(nc, js, id)
	}
	f.await("4 each", f.spread([]string{"a", "b", "c"}, 4, 4))
	f.check()
}

// TestCopiesUnderOneIdentityShareTheShards: members under one identity
// (the copies of a program on one host) are distinct members: they spread
// with the others, the roll lists each as identity/instance, and one that
// stops hands its shards over by name to the others, its twin included.
func TestCopiesUnderOneIdentityShareTheShards(t *testing.T) {
	const group = "twins"
	f := newFleet(t, startBroker(t), group, 6)
	first := f.start("a")
	f.start("c")
	f.await("3 each", f.spread([]string{"a", "c"}, 3, 3))
	second := f.startAs("a (second)", "a")
	f.await("2 each", f.spread([]string{"a", "a (second)", "c"}, 2, 2))
	if first.g.Member() == second.g.Member() || !strings.HasPrefix(first.g.Member(), "a/") || !strings.HasPrefix(second.g.Member(), "a/") {
		t.Fatalf("members %q and %q, want two names a/INSTANCE", first.g.Member(), second.g.Member())
	}

	nc, _ := f.connect()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	roll, err := shards.Roll(ctx, nc, bucket.Name, group, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range roll {
		names = append(names, a.Member())
		if len(a.Held) != 2 {
			t.Errorf("%s holds %d shards, want 2", a.Member(), len(a.Held))
		}
	}
	if want := []string{min(first.g.Member(), second.g.Member()), max(first.g.Member(), second.g.Member())}; len(roll) != 3 || names[0] != want[0] || names[1] != want[1] || roll[2].Identity != "c" {
		t.Errorf("roll %v, want %v and c", names, want)
	}

	first.stop(t)
	f.await("3 each again", f.spread([]string{"a (second)", "c"}, 3, 3))
	f.heldAgree(second)
	f.check()
}

func TestNewGroupValidates(t *testing.T) {
	f := newFleet(t, startBroker(t), "v", 1)
	_, js := f.connect()
	for _, tc := range []struct {
		name     string
		identity string
		group    string
		n        int
		opts     []shards.Option
		want     error
		mentions string
	}{
		{"no shards", "a", "g", 0, nil, shards.ErrInvalidShardCount, "0 shards"},
		{"too many", "a", "g", shards.MaxShards + 1, nil, shards.ErrInvalidShardCount, strconv.Itoa(shards.MaxShards + 1)},
		{"empty group", "a", "", 4, nil, shards.ErrInvalidGroup, "empty"},
		{"wildcard group", "a", "in*", 4, nil, shards.ErrInvalidGroup, "in*"},
		{"space in group", "a", "my group", 4, nil, shards.ErrInvalidGroup, "my group"},
		{"empty identity", "", "g", 4, nil, shards.ErrInvalidIdentity, `""`},
		{"weight", "a", "g", 4, []shards.Option{shards.WithWeight(0)}, shards.ErrInvalidOption, "WithWeight(0)"},
		{"min hold", "a", "g", 4, []shards.Option{shards.WithMinHold(-time.Second)}, shards.ErrInvalidOption, "WithMinHold"},
		{"health", "a", "g", 4, []shards.Option{shards.WithHealthCheck(nil, time.Second)}, shards.ErrInvalidOption, "nil check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shards.NewGroup(tc.identity, tc.group, tc.n, js, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("NewGroup: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mentions) {
				t.Errorf("%q does not mention %q", err, tc.mentions)
			}
		})
	}
	if _, err := shards.NewGroup("a", "g", 1, nil); !errors.Is(err, shards.ErrInvalidOption) {
		t.Errorf("nil JetStream: %v", err)
	}
}

// TestMinHoldDelaysRebalancing: a member given WithMinHold keeps a shard
// at least that long before it hands it to a member that joins.
func TestMinHoldDelaysRebalancing(t *testing.T) {
	const hold = 1500 * time.Millisecond
	f := newFleet(t, startBroker(t), "held", 4)
	a := f.start("a", shards.WithMinHold(hold))
	f.await("a holds all", f.spread([]string{"a"}, 4, 4))
	var earliest time.Time
	for _, s := range a.g.Held() {
		if term := a.g.Term(s); term != nil && (earliest.IsZero() || term.Started().Before(earliest)) {
			earliest = term.Started()
		}
	}
	f.start("b")
	f.await("2 each", f.spread([]string{"a", "b"}, 2, 2))
	// Every term of a began at earliest or later, and each hand-over
	// waited for its term's minimum hold.
	if since := time.Since(earliest); since < hold {
		t.Errorf("b got its shards %v after a's first term began, before the minimum hold of %v", since, hold)
	}
	f.check()
}

// TestHealthCheckIgnoringItsContextDoesNotHangStart: a health check that
// never returns, whatever its context says, counts as failing once its
// interval is up; the member still joins (and, being the only member,
// holds every shard: an unhealthy holder is better than none), and Start
// returns when its context ends.
func TestHealthCheckIgnoringItsContextDoesNotHangStart(t *testing.T) {
	f := newFleet(t, startBroker(t), "stuck", 4)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // after the member's stop: ends the check for goleak
	log := newLogRecorder(t, "a")
	a := f.start("a", shards.WithLogger(log), shards.WithHealthCheck(func(context.Context) error {
		<-release
		return nil
	}, 100*time.Millisecond))
	log.await("unhealthy", "did not return within 100ms")
	f.await("a holds all", f.spread([]string{"a"}, 4, 4))
	if err := a.stop(t); err != nil {
		t.Errorf("Start returned %v", err)
	}
	f.check()
}

// TestHealthCheckReturningLateIsNotTakenAsTheVerdict: a health check that
// hangs past its interval and then returns gives a verdict of when it
// started, not of now: the member drops it and checks afresh. Here the
// first check hangs, then says healthy, while every later one fails: the
// member never counts itself healthy again.
func TestHealthCheckReturningLateIsNotTakenAsTheVerdict(t *testing.T) {
	f := newFleet(t, startBroker(t), "late", 4)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	third := make(chan struct{})
	var calls atomic.Int32
	log := newFullLogRecorder(t, "a")
	f.start("a", shards.WithLogger(log), shards.WithHealthCheck(func(context.Context) error {
		switch n := calls.Add(1); {
		case n == 1:
			<-release // hangs whatever its context says, then passes
			return nil
		case n == 3:
			close(third)
		}
		return errUnhealthy
	}, 100*time.Millisecond))
	t.Cleanup(unblock) // before the member's stop
	log.await("unhealthy", "did not return within 100ms")
	f.await("a holds all", f.spread([]string{"a"}, 4, 4))

	unblock()
	// The third check starts once the rounds that took the first check's
	// late result and the second's are over.
	select {
	case <-third:
	case <-time.After(wait):
		t.Fatalf("no third health check within %v", wait)
	}
	if n := log.count("is healthy again"); n != 0 {
		t.Errorf("a took its first health check's late pass for a verdict: healthy again %d times", n)
	}
	f.check()
}
