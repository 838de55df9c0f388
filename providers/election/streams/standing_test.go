package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestWhoIsStanding: each running candidate answers who is standing with
// its identity, priority, health and leadership, best priority first; a
// stopped one no longer does.
func TestWhoIsStanding(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	failing := func(context.Context) error { return errors.New("disk full") }
	a := mustElection(t, "a", "standing", kv, append(rec.options("a"), WithPriority(5))...)
	stopA := runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "standing", openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithPriority(9), WithHealthCheck(failing, time.Second))...))
	runElection(t, mustElection(t, "c", "standing", openBucket(t, connect(t, ts.url())), rec.options("c")...))
	asker := connect(t, ts.url())
	var got []standing.Candidate
	eventually(t, 5*time.Second, "three candidates standing", func() bool {
		var err error
		got, err = standing.Standing(context.Background(), asker, bucketName, "standing", 0)
		return err == nil && len(got) == 3
	})
	want := []standing.Candidate{{Identity: "b", Priority: 9}, {Identity: "a", Priority: 5, Healthy: true, Leader: true}, {Identity: "c", Healthy: true}}
	for i, w := range want {
		g := got[i]
		if g.Identity != w.Identity || g.Priority != w.Priority || g.Healthy != w.Healthy || g.Leader != w.Leader || g.Since.IsZero() {
			t.Fatalf("candidate %d: %+v, want %+v (and a start time)", i, g, w)
		}
	}
	// The leader tells its term's token (stand-down --to reads it when
	// the write that began the term was overwritten unseen); others none.
	if term := a.Term(); term == nil || got[1].Token != term.Token() || got[0].Token != 0 || got[2].Token != 0 {
		t.Fatalf("tokens %d, %d, %d: want a's term's token %v and none for the others", got[0].Token, got[1].Token, got[2].Token, term)
	}
	stopA()
	eventually(t, 5*time.Second, "a no longer standing", func() bool {
		got, err := standing.Standing(context.Background(), asker, bucketName, "standing", 0)
		return err == nil && len(got) == 2 && got[0].Identity == "b" && got[1].Identity == "c"
	})
}

// TestPreferredCandidateTakesOverOnceAndOnlyOnce: a candidate of a higher
// priority that joins takes the election over once the leader's minimum
// term has passed, and keeps it; candidates of equal priority do not take
// it from one another.
func TestPreferredCandidateTakesOverOnceAndOnlyOnce(t *testing.T) {
	t.Parallel()
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

// TestUnhealthyAtStartDoesNotCampaign: a candidate whose first health
// check fails does not take a free key, though it would at once if it were
// healthy; once its check passes, it takes the key.
func TestUnhealthyAtStartDoesNotCampaign(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	var sick atomic.Bool
	sick.Store(true)
	check := func(context.Context) error {
		if sick.Load() {
			return errors.New("not ready")
		}
		return nil
	}
	e := mustElection(t, "n1", "sick-start", kv, append(rec.options("n1"), WithHealthCheck(check, 100*time.Millisecond))...)
	runElection(t, e)
	// It announces itself once it has read the free key, when a healthy
	// candidate writes to take it; a few health checks later it still
	// has not.
	waitStanding(t, connect(t, ts.url()), "sick-start", "n1")
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if e.IsLeader() || wins(rec.snapshot(), "n1") > 0 {
			t.Fatalf("n1 leads while its health check fails: %s", describe(rec.snapshot()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	sick.Store(false)
	rec.waitFor(t, 5*time.Second, "n1 to lead once healthy", func(evs []event) bool { return wins(evs, "n1") == 1 })
	checkHistory(t, rec.snapshot())
}

// TestUnhealthyLeaderHandsOverOnlyToAHealthyCandidate: a leader whose
// health check fails keeps leading while no healthy candidate stands, and
// hands over once one does; an unhealthy candidate does not campaign.
func TestUnhealthyLeaderHandsOverOnlyToAHealthyCandidate(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "asked", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "asked", openBucket(t, connect(t, ts.url())), rec.options("b")...))
	runElection(t, mustElection(t, "c", "asked", openBucket(t, connect(t, ts.url())), rec.options("c")...))
	nc := connect(t, ts.url())
	waitStanding(t, nc, "asked", "b", "c")
	leader, err := standing.RequestHandOver(context.Background(), nc, bucketName, "asked", "c")
	if err != nil || leader != "a" {
		t.Fatalf("RequestHandOver = %q, %v; want a, nil", leader, err)
	}
	evs := rec.waitFor(t, 5*time.Second, "c to lead", func(evs []event) bool { return wins(evs, "") == 2 })
	if last := evs[len(evs)-1]; last.who != "c" {
		t.Fatalf("the hand-over landed on %s: %s", last.who, describe(evs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := standing.RequestHandOver(ctx, nc, bucketName, "nobody-runs-this", "c"); !errors.Is(err, standing.ErrNoLeaderAnswered) {
		t.Fatalf("RequestHandOver to an election without a leader = %v, want standing.ErrNoLeaderAnswered", err)
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
// connection of its own, all answer who is standing and take hand-over
// requests (which carry nothing at rest), and only the leader subscribes
// to the announcements, so that an announcement costs one delivery, not
// one per candidate; the next leader takes the subscription over as the
// first stops.
func TestOnlyTheLeaderHearsAnnouncements(t *testing.T) {
	t.Parallel()
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
	expect := func(when string, count int) {
		t.Helper()
		eventually(t, 5*time.Second, fmt.Sprintf("%s: %d answering and taking hand-over requests, one hearing announcements", when, count), func() bool {
			return subscribers(t, ts, standing.CandidatesSubject(bucketName, "heard")) == count &&
				subscribers(t, ts, standing.HandOverSubject(bucketName, "heard")) == count &&
				subscribers(t, ts, standing.AnnounceSubject(bucketName, "heard")) == 1
		})
		// And it stays so: standbys do not subscribe later.
		time.Sleep(300 * time.Millisecond)
		if n := subscribers(t, ts, standing.AnnounceSubject(bucketName, "heard")); n != 1 {
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

// TestANewLeaderAsksWhoStands: a candidate that wins asks who is
// standing, within half its minimum term, rather than wait up to an
// announcement interval for the others' next announcements, so that a
// better-ranked candidate that stood through the previous term is handed
// the election within the new leader's minimum term, well within one
// interval (20s here).
func TestANewLeaderAsksWhoStands(t *testing.T) {
	t.Parallel()
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
		got, err := standing.Standing(context.Background(), asker, bucketName, "relearn", 0)
		return err == nil && len(got) == 3
	})
	// a hands over to b by name; b, having asked who stands, hands over to
	// c once its minimum term has passed.
	// A listener that counts the questions asked from now on, and answers
	// none of them.
	spy := connect(t, ts.url())
	var questions atomic.Int64
	if _, err := spy.Subscribe(standing.CandidatesSubject(bucketName, "relearn"), func(m *nats.Msg) {
		if m.Reply != "" {
			questions.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.HandOver(ctx, "b"); err != nil {
		t.Fatalf("a's hand-over to b: %v", err)
	}
	rec.waitFor(t, 5*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	bWon := time.Now()
	eventually(t, 2*time.Second, "b, the new leader, to ask who is standing", func() bool { return questions.Load() >= 1 })
	if evs := rec.snapshot(); wins(evs, "c") != 0 {
		t.Fatalf("the first question came after c led, so it was c's, not b's: %s", describe(evs))
	}
	rec.waitFor(t, 3*time.Second, "c, preferred, to lead within 3s of b's win (an announcement interval is 20s)", func(evs []event) bool { return wins(evs, "c") == 1 })
	t.Logf("c led %v after b won", time.Since(bWon).Round(time.Millisecond))
	checkHistory(t, rec.snapshot())
}

// TestRequestHandOverWaitsForALeaderToTakeIt: a hand-over asked while no
// candidate of the election runs (nobody subscribes to its hand-over
// subject) is asked again until one does and answers, within the
// request's deadline, rather than failing at once. The one that answers
// here is a plain subscriber standing in for a leader that starts late.
func TestRequestHandOverWaitsForALeaderToTakeIt(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	type result struct {
		leader string
		err    error
	}
	asked := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader, err := standing.RequestHandOver(ctx, nc, bucketName, "late", "elsewhere")
		asked <- result{leader, err}
	}()
	// The request has found nobody to take it at least once.
	eventually(t, 5*time.Second, "the request to be under way", func() bool { return nc.Stats().OutMsgs > 0 })
	time.Sleep(150 * time.Millisecond) // three of its 50ms retries, in which it must keep asking
	select {
	case r := <-asked:
		t.Fatalf("RequestHandOver returned %q, %v with nobody to take it, well before its deadline", r.leader, r.err)
	default:
	}
	late := connect(t, ts.url())
	if _, err := late.Subscribe(standing.HandOverSubject(bucketName, "late"), func(m *nats.Msg) {
		body, _ := json.Marshal(standing.HandOverAnswer{Leader: "late-leader"})
		_ = m.Respond(body)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-asked:
		if r.err != nil || r.leader != "late-leader" {
			t.Fatalf("RequestHandOver = %q, %v; want the late leader to take it", r.leader, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("RequestHandOver did not return")
	}
}

// TestHandOverRequestReachesALeaderWhoseStewardIsBusy: a candidate that
// wins while its steward's goroutine is inside a health check (one that
// takes its interval, as a check of a slow dependency does) takes a
// hand-over request at once: the hand-over subscription is held from the
// candidate's start, not made by the steward as the term begins.
func TestHandOverRequestReachesALeaderWhoseStewardIsBusy(t *testing.T) {
	t.Parallel()
	const key = "busy"
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", key, kv, append(rec.options("a"), WithMinTerm(time.Hour))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })

	var slow atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	check := func(ctx context.Context) error {
		if slow.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	b := mustElection(t, "b", key, openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithHealthCheck(check, 3*time.Second), WithMinTerm(time.Hour))...)
	runElection(t, b)
	t.Cleanup(func() { close(release) }) // runs before b's stop (LIFO)

	asker := connect(t, ts.url())
	eventually(t, 5*time.Second, "b to stand", func() bool {
		got, err := standing.Standing(context.Background(), asker, bucketName, key, 0)
		return err == nil && len(got) == 2
	})
	slow.Store(true)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("b's health check did not run")
	}
	// b's steward is inside its health check for up to 3s from here.
	hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.HandOver(hctx, "b"); err != nil {
		t.Fatalf("a's hand-over to b: %v", err)
	}
	rec.waitFor(t, 2*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	if !b.IsLeader() {
		t.Fatal("b won but does not lead")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	start := time.Now()
	from, err := standing.RequestHandOver(rctx, asker, bucketName, key, "a")
	if err != nil {
		t.Fatalf("b leads (IsLeader %v), but RequestHandOver to a = %q, %v after %v; subscriptions on the hand-over subject: %d",
			b.IsLeader(), from, err, time.Since(start).Round(time.Millisecond), subscribers(t, ts, standing.HandOverSubject(bucketName, key)))
	}
	if from != "b" {
		t.Fatalf("RequestHandOver answered by %q, want b", from)
	}
}

// warnings keeps an election's warnings.
type warnings struct {
	testLogger
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Warnf(f string, a ...any) {
	w.mu.Lock()
	w.lines = append(w.lines, fmt.Sprintf(f, a...))
	w.mu.Unlock()
	w.testLogger.Warnf(f, a...)
}

// saying returns the first warning holding s, if any.
func (w *warnings) saying(s string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l, s) {
			return l, true
		}
	}
	return "", false
}

// TestFailingCheckIsLoggedForWhatTheCandidateIs: a leader whose health
// check fails is told it leads on (and hands over once a healthy
// candidate stands), a standby that it does not campaign.
func TestFailingCheckIsLoggedForWhatTheCandidateIs(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	var sick atomic.Bool
	check := func(context.Context) error {
		if sick.Load() {
			return errors.New("disk full")
		}
		return nil
	}
	logs := map[string]*warnings{}
	var es []*Election
	for _, id := range []string{"a", "b"} {
		logs[id] = &warnings{testLogger: testLogger{t: t, prefix: id + " "}}
		e := mustElection(t, id, "health-words", kv, WithLogger(logs[id]), WithHealthCheck(check, 100*time.Millisecond))
		runElection(t, e)
		es = append(es, e)
	}
	eventually(t, 10*time.Second, "a leader", func() bool { return es[0].IsLeader() || es[1].IsLeader() })
	leader, standby := "a", "b"
	if es[1].IsLeader() {
		leader, standby = "b", "a"
	}
	sick.Store(true)
	eventually(t, 10*time.Second, "both to warn", func() bool {
		_, l := logs[leader].saying("unhealthy")
		_, s := logs[standby].saying("unhealthy")
		return l && s
	})
	if line, _ := logs[leader].saying("unhealthy"); !strings.Contains(line, "leads on") || strings.Contains(line, "not campaigning") {
		t.Errorf("the leader %s was told %q; want that it leads on", leader, line)
	}
	if line, _ := logs[standby].saying("unhealthy"); !strings.Contains(line, "not campaigning") {
		t.Errorf("the standby %s was told %q; want that it does not campaign", standby, line)
	}
}

// reportersRecorder keeps the reporters that told it their counts.
type reportersRecorder struct {
	nopRecorder
	mu        sync.Mutex
	reporters map[string]bool
}

func (r *reportersRecorder) Standing(_, reporter string, _, _ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reporters[reporter] = true
}

func (r *reportersRecorder) has(names ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if !r.reporters[n] {
			return false
		}
	}
	return true
}

// TestCopiesReportTheirCountsApart: copies of one identity sharing a
// recorder report who stands as identity/instance each, so that a
// standby's count of itself does not overwrite its leader's count of the
// election (metrics.Recorder keeps the largest count per election).
func TestCopiesReportTheirCountsApart(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := &reportersRecorder{reporters: map[string]bool{}}
	runElection(t, mustElection(t, "n", "apart", kv, WithInstance("a"), WithRecorder(rec)))
	runElection(t, mustElection(t, "n", "apart", openBucket(t, connect(t, ts.url())), WithInstance("b"), WithRecorder(rec)))
	eventually(t, 10*time.Second, "both copies to report", func() bool { return rec.has("n/a", "n/b") })
}
