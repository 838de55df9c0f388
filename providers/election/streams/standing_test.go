package streams

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
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

// subscribers returns how many subscriptions on ts's broker match subject.
func subscribers(t *testing.T, ts *testServer, subject string) int {
	t.Helper()
	ts.mu.Lock()
	srv := ts.srv
	ts.mu.Unlock()
	sz, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return sz.Total
}

// TestOnlyTheLeaderHearsAnnouncements: of five candidates, each on a
// connection of its own, all answer who is standing, and only the leader
// subscribes to the announcements and the hand-over requests, so that an
// announcement costs one delivery, not one per candidate; the next leader
// takes the subscriptions over as the first stops.
func TestOnlyTheLeaderHearsAnnouncements(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	stop := map[string]func(){}
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		stop[id] = runElection(t, mustElection(t, id, "heard", openBucketOrFirst(t, ts, kv, i), rec.options(id)...))
		if i == 0 {
			rec.waitFor(t, 5*time.Second, "c0 to lead", func(evs []event) bool { return wins(evs, "c0") == 1 })
		}
	}
	expect := func(when string, standing int) {
		t.Helper()
		eventually(t, 5*time.Second, fmt.Sprintf("%s: %d answering, one hearing announcements and hand-over requests", when, standing), func() bool {
			return subscribers(t, ts, CandidatesSubject(bucketName, "heard")) == standing &&
				subscribers(t, ts, AnnounceSubject(bucketName, "heard")) == 1 &&
				subscribers(t, ts, HandOverSubject(bucketName, "heard")) == 1
		})
		// And it stays so: standbys do not subscribe later.
		time.Sleep(300 * time.Millisecond)
		if n := subscribers(t, ts, AnnounceSubject(bucketName, "heard")); n != 1 {
			t.Fatalf("%s: %d subscriptions hear the announcements, want the leader's alone", when, n)
		}
	}
	expect("c0 leading", 5)
	stop["c0"]()
	rec.waitFor(t, 5*time.Second, "another to lead", func(evs []event) bool { return wins(evs, "") == 2 })
	expect("after c0 stopped", 4)
	checkHistory(t, rec.snapshot())
}

// openBucketOrFirst returns kv for the first candidate and the bucket on
// a connection of its own for the others.
func openBucketOrFirst(t *testing.T, ts *testServer, kv jetstream.KeyValue, i int) jetstream.KeyValue {
	t.Helper()
	if i == 0 {
		return kv
	}
	return openBucket(t, connect(t, ts.url()))
}

// TestANewLeaderLearnsWhoStandsAtOnce: a candidate that wins asks who is
// standing, rather than wait up to an announcement interval for the
// others' next announcements, so that a better-ranked candidate that
// stood through the previous term is handed the election within the
// new leader's minimum term, well within one interval (20s here).
func TestANewLeaderLearnsWhoStandsAtOnce(t *testing.T) {
	const ttl = 10 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	// a leads and never moves of itself: its minimum term outlasts the test.
	a := mustElection(t, "a", "relearn", kv, append(rec.options("a"), WithMinTerm(time.Hour))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	// b, of a short minimum term, and c, preferred, join; c's announcement
	// reaches a alone.
	runElection(t, mustElection(t, "b", "relearn", openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithMinTerm(200*time.Millisecond))...))
	runElection(t, mustElection(t, "c", "relearn", openBucket(t, connect(t, ts.url())), append(rec.options("c"), WithPriority(5))...))
	asker := connect(t, ts.url())
	eventually(t, 5*time.Second, "b and c to stand", func() bool {
		got, err := Standing(context.Background(), asker, bucketName, "relearn", 0)
		return err == nil && len(got) == 3
	})
	// a hands over to b by name; b, having asked who stands as it won,
	// hands over to c once its minimum term has passed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.HandOver(ctx, "b"); err != nil {
		t.Fatalf("a's hand-over to b: %v", err)
	}
	rec.waitFor(t, 5*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	bWon := time.Now()
	rec.waitFor(t, 3*time.Second, "c, preferred, to lead within 3s of b's win (an announcement interval is 20s)", func(evs []event) bool { return wins(evs, "c") == 1 })
	t.Logf("c led %v after b won", time.Since(bWon).Round(time.Millisecond))
	checkHistory(t, rec.snapshot())
}

// TestRequestHandOverWaitsForALeaderToTakeIt: a hand-over asked before any
// candidate leads (only a leader takes such requests) reaches the leader
// that wins within the request's deadline, rather than failing at once.
func TestRequestHandOverWaitsForALeaderToTakeIt(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	nc := connect(t, ts.url())
	type result struct {
		leader string
		err    error
	}
	asked := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader, err := RequestHandOver(ctx, nc, bucketName, "late", "elsewhere")
		asked <- result{leader, err}
	}()
	// The request has found nobody to take it before a starts.
	eventually(t, 5*time.Second, "the request to be under way", func() bool {
		return subscribers(t, ts, HandOverSubject(bucketName, "late")) == 0 && nc.Stats().OutMsgs > 0
	})
	runElection(t, mustElection(t, "a", "late", kv, rec.options("a")...))
	select {
	case r := <-asked:
		if r.err != nil || r.leader != "a" {
			t.Fatalf("RequestHandOver = %q, %v; want a to take it once it leads", r.leader, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("RequestHandOver did not return")
	}
	rec.waitFor(t, 5*time.Second, "a to hand over", func(evs []event) bool {
		return len(evs) >= 2 && evs[1].who == "a" && !evs[1].won && evs[1].cause == CauseHandedOver
	})
}
