package streams

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestWhoIsStanding: each running candidate answers who is standing with
// its identity, priority, health and leadership, best priority first; a
// stopped one no longer does.
func TestWhoIsStanding(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	failing := func(context.Context) error { return errors.New("disk full") }
	stopA := runElection(t, mustElection(t, "a", "standing", kv, append(rec.options("a"), WithPriority(5))...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "standing", openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithPriority(9), WithHealthCheck(failing, time.Second))...))
	runElection(t, mustElection(t, "c", "standing", openBucket(t, connect(t, ts.url())), rec.options("c")...))
	asker := connect(t, ts.url())
	var got []Candidate
	eventually(t, 5*time.Second, "three candidates standing", func() bool {
		var err error
		got, err = Standing(context.Background(), asker, bucketName, "standing", 0)
		return err == nil && len(got) == 3
	})
	want := []Candidate{{Identity: "b", Priority: 9}, {Identity: "a", Priority: 5, Healthy: true, Leader: true}, {Identity: "c", Healthy: true}}
	for i, w := range want {
		g := got[i]
		if g.Identity != w.Identity || g.Priority != w.Priority || g.Healthy != w.Healthy || g.Leader != w.Leader || g.Since.IsZero() {
			t.Fatalf("candidate %d: %+v, want %+v (and a start time)", i, g, w)
		}
	}
	stopA()
	eventually(t, 5*time.Second, "a no longer standing", func() bool {
		got, err := Standing(context.Background(), asker, bucketName, "standing", 0)
		return err == nil && len(got) == 2 && got[0].Identity == "b" && got[1].Identity == "c"
	})
}

// TestPreferredCandidateTakesOverOnceAndOnlyOnce: a candidate of a higher
// priority that joins takes the election over once the leader's minimum
// term has passed, and keeps it; candidates of equal priority do not take
// it from one another.
func TestPreferredCandidateTakesOverOnceAndOnlyOnce(t *testing.T) {
	const minTerm = 500 * time.Millisecond
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "preferred", kv, append(rec.options("a"), WithPriority(1), WithMinTerm(minTerm))...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "preferred", openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithPriority(1), WithMinTerm(minTerm))...))
	time.Sleep(3 * minTerm) // a span in which b, of equal priority, must not take over
	if evs := rec.snapshot(); wins(evs, "") != 1 {
		t.Fatalf("a candidate of equal priority took over: %s", describe(evs))
	}
	joined := time.Now()
	runElection(t, mustElection(t, "c", "preferred", openBucket(t, connect(t, ts.url())), append(rec.options("c"), WithPriority(7), WithMinTerm(minTerm))...))
	rec.waitFor(t, 5*time.Second, "c, preferred, to lead", func(evs []event) bool { return wins(evs, "c") == 1 })
	t.Logf("c led %v after joining", time.Since(joined).Round(time.Millisecond))
	time.Sleep(3 * minTerm) // a span in which leadership must stay with c
	evs := rec.snapshot()
	if wins(evs, "") != 2 || evs[len(evs)-1].who != "c" || !evs[len(evs)-1].won {
		t.Fatalf("want one move, to c, and no more: %s", describe(evs))
	}
	checkHistory(t, evs)
}

// TestUnhealthyLeaderHandsOverOnlyToAHealthyCandidate: a leader whose
// health check fails keeps leading while no healthy candidate stands, and
// hands over once one does; an unhealthy candidate does not campaign.
func TestUnhealthyLeaderHandsOverOnlyToAHealthyCandidate(t *testing.T) {
	const minTerm = 300 * time.Millisecond
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	var aSick, bSick atomic.Bool
	check := func(sick *atomic.Bool) func(context.Context) error {
		return func(context.Context) error {
			if sick.Load() {
				return errors.New("sick")
			}
			return nil
		}
	}
	opts := func(who string, sick *atomic.Bool) []Option {
		return append(rec.options(who), WithHealthCheck(check(sick), 50*time.Millisecond), WithMinTerm(minTerm))
	}
	runElection(t, mustElection(t, "a", "health", kv, opts("a", &aSick)...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	bSick.Store(true)
	b := mustElection(t, "b", "health", openBucket(t, connect(t, ts.url())), opts("b", &bSick)...)
	runElection(t, b)
	aSick.Store(true)
	time.Sleep(5 * minTerm) // a span in which a, unhealthy, keeps leading: b is unhealthy too
	if evs := rec.snapshot(); wins(evs, "") != 1 {
		t.Fatalf("leadership moved with no healthy candidate standing: %s", describe(evs))
	}
	bSick.Store(false)
	rec.waitFor(t, 5*time.Second, "b, healthy, to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	// a, unhealthy, does not campaign: b's release goes unanswered by a.
	b.Stop()
	time.Sleep(time.Second) // a span in which a must not lead
	if evs := rec.snapshot(); wins(evs, "a") != 1 {
		t.Fatalf("an unhealthy candidate campaigned: %s", describe(evs))
	}
	aSick.Store(false)
	rec.waitFor(t, 5*time.Second, "a, healthy again, to lead", func(evs []event) bool { return wins(evs, "a") == 2 })
	checkHistory(t, rec.snapshot())
}

// TestRequestHandOverReachesTheLeader: a hand-over asked over NATS, as
// `conclave election stand-down --to` does, lands on the named candidate;
// an election without a leader answers nothing.
func TestRequestHandOverReachesTheLeader(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "asked", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "asked", openBucket(t, connect(t, ts.url())), rec.options("b")...))
	runElection(t, mustElection(t, "c", "asked", openBucket(t, connect(t, ts.url())), rec.options("c")...))
	nc := connect(t, ts.url())
	leader, err := RequestHandOver(context.Background(), nc, bucketName, "asked", "c")
	if err != nil || leader != "a" {
		t.Fatalf("RequestHandOver = %q, %v; want a, nil", leader, err)
	}
	evs := rec.waitFor(t, 5*time.Second, "c to lead", func(evs []event) bool { return wins(evs, "") == 2 })
	if last := evs[len(evs)-1]; last.who != "c" {
		t.Fatalf("the hand-over landed on %s: %s", last.who, describe(evs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := RequestHandOver(ctx, nc, bucketName, "nobody-runs-this", "c"); !errors.Is(err, ErrNoLeaderAnswered) {
		t.Fatalf("RequestHandOver to an election without a leader = %v, want ErrNoLeaderAnswered", err)
	}
}
