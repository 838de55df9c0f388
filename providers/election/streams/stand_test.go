package streams

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// standAt is a stand of candidate "a" (instance a-1) with a minimum term
// of 10s and a health check every 2s, whose draws are always their
// largest; and what it reads of itself.
func standAt(t *testing.T) (*stand, standNow) {
	t.Helper()
	st := newStand("a", "a-1", 10*time.Second, 2*time.Second, func(n int64) int64 { return n - 1 })
	return st, standNow{self: standing.Candidate{Identity: "a", Instance: "a-1"}, ttl: 5 * time.Second}
}

var standT0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// TestStandAnnouncesAtOnceThenOnItsSchedule: an opened stand announces at
// once, then on the announcement schedule, and checks health after the
// interval; it asks nothing while it leads no term.
func TestStandAnnouncesAtOnceThenOnItsSchedule(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.open(standT0)
	out := st.step(standT0, in)
	if !out.announce || out.check || out.ask != noDuty || out.move != nil {
		t.Fatalf("first step = %+v, want an announcement alone", out)
	}
	next := nextAnnouncement(standT0, standing.AnnouncementInterval(in.ttl), "a")
	want := standT0.Add(2 * time.Second)
	if next.Before(want) {
		want = next
	}
	if !out.wake.Equal(want) {
		t.Fatalf("wake at %v, want the earlier of the health check's %v and the next announcement's %v", out.wake.Sub(standT0), 2*time.Second, next.Sub(standT0))
	}
	if out := st.step(next.Add(-time.Millisecond), in); out.announce {
		t.Fatal("announced again before the schedule")
	}
	if out := st.step(next, in); !out.announce {
		t.Fatal("no announcement at its scheduled instant")
	}
}

// TestStandOneDutyThatWaitsAtATime: while the health check is out, a due
// question waits, and the stand does not ask to be woken for it (which
// would spin the scheduler); once the check is told, the question goes.
func TestStandOneDutyThatWaitsAtATime(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.open(standT0)
	st.step(standT0, in)
	st.follow(standT0, 7, standT0, false) // a term: a question due within 5s
	now := standT0.Add(6 * time.Second)
	out := st.step(now, in)
	if !out.check || out.ask != noDuty {
		t.Fatalf("step = %+v, want the health check first", out)
	}
	out = st.step(now.Add(time.Millisecond), in)
	if out.check || out.ask != noDuty || out.move != nil {
		t.Fatalf("step while the check is out = %+v, want nothing that waits", out)
	}
	if !out.wake.IsZero() && !out.wake.After(now) {
		t.Fatalf("while the check is out it asks to wake at %v, not after now: it would spin", out.wake.Sub(now))
	}
	st.checked(now.Add(time.Millisecond), nil)
	if out := st.step(now.Add(time.Millisecond), in); out.ask != dutyAsk {
		t.Fatalf("after the check, step = %+v, want the new term's question", out)
	}
}

// TestStandFollowsItsTerm: a new term asks who stands within half the
// minimum term and hears a roll of its own; what a past term heard is
// dropped; a term that ends drops its roll, unless the candidate leaves.
func TestStandFollowsItsTerm(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.open(standT0)
	st.step(standT0, in)
	b := standing.Candidate{Identity: "b", Instance: "b-1", Healthy: true}
	st.hear(standT0, 0, b)
	if len(st.roll.list()) != 0 {
		t.Fatal("a standby took in an announcement")
	}
	st.follow(standT0, 7, standT0, false)
	if got, want := st.due[dutyAsk], standT0.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("question due %v after the term began, want %v (half the minimum term)", got.Sub(standT0), want.Sub(standT0))
	}
	st.hear(standT0, 6, b)
	st.hear(standT0, 7, standing.Candidate{Identity: "a", Instance: "a-1", Healthy: true})
	if len(st.roll.list()) != 0 {
		t.Fatalf("roll %v: took in a past term's word, or its own", st.roll.list())
	}
	st.hear(standT0, 7, b)
	if len(st.roll.list()) != 1 {
		t.Fatal("the running term did not hear b")
	}
	c := standing.Candidate{Identity: "c", Instance: "c-1", Healthy: true}
	st.hear(standT0, 7, c)
	st.follow(standT0.Add(time.Second), 0, time.Time{}, true)
	if len(st.roll.list()) != 2 {
		t.Fatal("a leaving candidate's ended term dropped the roll its stop offers the key by")
	}
	// Its stop's offer goes by that roll: a standby heard leaving since is
	// not offered the key.
	c.Leaving = true
	st.hear(standT0.Add(time.Second), 7, c)
	if got := st.roll.list(); len(got) != 1 || got[0].Instance != "b-1" {
		t.Fatalf("roll %v after c was heard leaving, want b alone", got)
	}
	st.follow(standT0.Add(2*time.Second), 9, standT0.Add(2*time.Second), false)
	if len(st.roll.list()) != 0 {
		t.Fatal("a new term kept the last one's roll")
	}
	st.follow(standT0.Add(3*time.Second), 0, time.Time{}, false)
	st.hear(standT0.Add(3*time.Second), 9, b)
	if len(st.roll.list()) != 0 {
		t.Fatal("a standby whose term ended, not leaving, took in an announcement")
	}
}

// TestStandMovesOnFreshAnswersAfterTheMinimumTerm: a higher priority
// candidate heard of moves the term only after the minimum term, and only
// once a question's fresh answers name it healthy.
func TestStandMovesOnFreshAnswersAfterTheMinimumTerm(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.healthEvery = 0 // no check in the way
	st.open(standT0)
	st.step(standT0, in)
	st.follow(standT0, 7, standT0, false)
	st.checked(standT0, nil)
	b := standing.Candidate{Identity: "b", Instance: "b-1", Healthy: true, Priority: 5}
	st.hear(standT0, 7, b)
	st.due[dutyAsk] = time.Time{} // the new term's question is another test's
	out := st.step(standT0.Add(time.Second), in)
	if out.ask != noDuty || out.move != nil {
		t.Fatalf("within the minimum term: %+v", out)
	}
	if due := st.due[dutyMove]; !due.Equal(standT0.Add(10 * time.Second)) {
		t.Fatalf("a move is due %v after the term began, want the minimum term's end", due.Sub(standT0))
	}
	if out.wake.After(standT0.Add(10 * time.Second)) {
		t.Fatalf("wake %v after the term began, past the minimum term's end", out.wake.Sub(standT0))
	}
	at := standT0.Add(10 * time.Second)
	out = st.step(at, in)
	if out.ask != dutyConfirm {
		t.Fatalf("after the minimum term: %+v, want a question first", out)
	}
	// b no longer answers: no move.
	st.answered(at, at, dutyConfirm, 7, nil, nil, in)
	if out := st.step(at, in); out.move != nil || out.ask != noDuty {
		t.Fatalf("moved on answers without b: %+v", out)
	}
	st.hear(at, 7, b)
	st.step(at, in)
	st.answered(at, at, dutyConfirm, 7, []standing.Candidate{b}, nil, in)
	out = st.step(at, in)
	if out.move == nil || out.move.to.Instance != "b-1" {
		t.Fatalf("step = %+v, want a move to b-1", out)
	}
	st.moved(at, 0)
}

// TestStandChecksHealthAndAnnouncesAChange: a change of health announces
// the candidate at once; no change waits for the schedule.
func TestStandChecksHealthAndAnnouncesAChange(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.open(standT0)
	st.step(standT0, in)
	at := standT0.Add(2 * time.Second)
	if out := st.step(at, in); !out.check {
		t.Fatal("no check at its interval")
	}
	if st.checked(at, nil) {
		t.Fatal("a passing check changed a healthy candidate")
	}
	if out := st.step(at, in); out.announce {
		t.Fatal("announced without a change")
	}
	at = at.Add(2 * time.Second)
	st.step(at, in)
	if !st.checked(at, errors.New("sick")) {
		t.Fatal("a failing check changed nothing")
	}
	if out := st.step(at, in); !out.announce || st.self(in).Healthy {
		t.Fatalf("step = %+v, healthy %v: want an announcement of ill health", out, st.self(in).Healthy)
	}
}

// TestStandSuccessorLeavesOutRefusalsAndTheUnhealthy: the stop's
// successor is the best healthy candidate on the roll, not one that
// refused, nor a copy of this process that is stopping.
func TestStandSuccessorLeavesOutRefusalsAndTheUnhealthy(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.follow(standT0, 7, standT0, false)
	st.hear(standT0, 7,
		standing.Candidate{Identity: "b", Instance: "b-1", Healthy: true, Priority: 3},
		standing.Candidate{Identity: "c", Instance: "c-1", Healthy: false, Priority: 9},
		standing.Candidate{Identity: "d", Instance: "d-1", Healthy: true, Priority: 1},
		standing.Candidate{Identity: "a", Instance: "a-2", Healthy: true, Priority: 2})
	if got := st.successor(in); got.instance != "b-1" {
		t.Fatalf("successor %+v, want b-1 (c-1 is unhealthy)", got)
	}
	if got := st.successor(in, handOver{to: "b", instance: "b-1"}); got.instance != "a-2" {
		t.Fatalf("successor past b-1's refusal %+v, want a-2", got)
	}
	in.copies = []copyState{{copyName: copyName{"a", "a-2"}, leaving: true, healthy: true}}
	if got := st.successor(in, handOver{to: "b", instance: "b-1"}); got.instance != "d-1" {
		t.Fatalf("successor with copy a-2 stopping %+v, want d-1", got)
	}
}

// TestStandFailuresWaitBeforeTheNextTry: a move's question that could not
// be sent, and a move the target refused, are not tried again at once (a
// connection that refuses every request at once would spin the steward).
func TestStandFailuresWaitBeforeTheNextTry(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.healthEvery = 0
	st.open(standT0)
	st.step(standT0, in)
	st.follow(standT0, 7, standT0, false)
	st.due[dutyAsk] = time.Time{}
	st.hear(standT0, 7, standing.Candidate{Identity: "b", Instance: "b-1", Healthy: true, Priority: 5})
	at := standT0.Add(10 * time.Second)
	if out := st.step(at, in); out.ask != dutyConfirm {
		t.Fatalf("step = %+v, want a move's question", out)
	}
	st.answered(at, at, dutyConfirm, 7, nil, errors.New("nats: connection draining"), in)
	if out := st.step(at, in); out.ask != noDuty {
		t.Fatalf("after a question that could not be sent, step = %+v: asks again at once", out)
	}
	if out := st.step(at.Add(askRetry), in); out.ask != dutyConfirm {
		t.Fatalf("step %v later = %+v, want the question again", askRetry, out)
	}
	st.answered(at, at, dutyConfirm, 7, []standing.Candidate{{Identity: "b", Instance: "b-1", Healthy: true, Priority: 5}}, nil, in)
	out := st.step(at.Add(askRetry), in)
	if out.move == nil {
		t.Fatalf("step = %+v, want a move", out)
	}
	st.moved(at.Add(askRetry), 5*time.Second) // refused: as the steward says after a refusal, a TTL
	if out := st.step(at.Add(askRetry), in); out.ask != noDuty || out.move != nil {
		t.Fatalf("after a refused move, step = %+v: tries again at once", out)
	}
}

// TestStandKeepsANewerWordOverAnOlderAnswer: an answer sent before a
// candidate announced a change of health, and heard after it, does not
// undo the announcement.
func TestStandKeepsANewerWordOverAnOlderAnswer(t *testing.T) {
	t.Parallel()
	st, in := standAt(t)
	st.follow(standT0, 7, standT0, false)
	asked := standT0.Add(time.Second)
	st.out = dutyAsk
	st.hear(asked.Add(100*time.Millisecond), 7, standing.Candidate{Identity: "b", Instance: "b-1", Healthy: false})
	st.answered(asked.Add(250*time.Millisecond), asked, dutyAsk, 7, []standing.Candidate{{Identity: "b", Instance: "b-1", Healthy: true}}, nil, in)
	if roll := st.roll.list(); len(roll) != 1 || roll[0].Healthy {
		t.Fatalf("roll %+v: the older answer undid b's newer word that it is unhealthy", roll)
	}
}

// TestAfterAMoveTheStandWaitsByHowItEnded: a move that went through
// leaves the next decision to what changes; one asked too soon is looked
// at again within half a TTL; one refused, or whose term ended meanwhile,
// a TTL on.
func TestAfterAMoveTheStandWaitsByHowItEnded(t *testing.T) {
	t.Parallel()
	const ttl = 4 * time.Second
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{nil, 0},
		{fmt.Errorf("hand over: %w: in 2s", ErrHandOverTooSoon), ttl / 2},
		{fmt.Errorf("hand over: %w", ErrNotLeader), ttl},
		{fmt.Errorf("%w: b is stopping", ErrHandOverRefused), ttl},
		{errors.New("the offer was not taken up"), ttl},
	} {
		if got := afterMove(tc.err, ttl); got != tc.want {
			t.Errorf("after a move that ended with %v: wait %v, want %v", tc.err, got, tc.want)
		}
	}
}
