package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/nostanding"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// countRecorder is a Recorder that keeps each reporter's latest
// count.
type countRecorder struct {
	nopRecorder
	mu     sync.Mutex
	counts map[string]standingCount // by reporter
}

func newCountRecorder() *countRecorder {
	return &countRecorder{counts: map[string]standingCount{}}
}

func (r *countRecorder) Standing(key, reporter string, healthy, unhealthy int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[reporter] = standingCount{healthy, unhealthy}
}

func (r *countRecorder) StandingWithdrawn(key, reporter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counts, reporter)
}

// count returns reporter's latest count and whether it counts.
func (r *countRecorder) count(reporter string) (standingCount, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.counts[reporter]
	return n, ok
}

// await waits until reporter counts want.
func (r *countRecorder) await(t *testing.T, within time.Duration, reporter string, want standingCount) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("%s to count %d healthy and %d unhealthy", reporter, want.healthy, want.unhealthy), func() bool {
		n, ok := r.count(reporter)
		return ok && n == want
	})
}

// TestCandidatesAreCounted: the leader's Recorder and an observer
// given ObserveStanding count the candidates standing, by health, from
// their announcements: joining, turning unhealthy, stopping (at once), and
// a process gone without a word (within the announcement expiry, not at
// once); a standby counts itself alone; a stopped reporter withdraws its
// count.
func TestCandidatesAreCounted(t *testing.T) {
	t.Parallel()
	const ttl = time.Second // announcements every 2s, expiry 5s
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newCountRecorder()
	var bSick atomic.Bool
	check := func(context.Context) error {
		if bSick.Load() {
			return errors.New("sick")
		}
		return nil
	}

	a := mustElection(t, "a", "counted", kv, WithInstance("x"), WithRecorder(rec))
	stopA := runElection(t, a)
	eventually(t, 5*time.Second, "a to lead", a.IsLeader)
	rec.await(t, 5*time.Second, "a/x", standingCount{1, 0})
	stopB := runElection(t, mustElection(t, "b", "counted", openBucket(t, connect(t, ts.url())), WithInstance("x"), WithRecorder(rec), WithHealthCheck(check, 50*time.Millisecond)))
	cConn := connect(t, ts.url())
	runElectionAllowing(t, mustElection(t, "c", "counted", openBucket(t, cConn), WithInstance("x"), WithRecorder(rec)), nats.ErrConnectionClosed)
	rec.await(t, 5*time.Second, "a/x", standingCount{3, 0})
	// Standbys hear no announcements: each counts itself alone, so the
	// most any reporter counts is the election's count.
	rec.await(t, 5*time.Second, "b/x", standingCount{1, 0})
	rec.await(t, 5*time.Second, "c/x", standingCount{1, 0})

	obsConn := connect(t, ts.url())
	obs, err := NewObserver("counted", jsFor(openBucket(t, obsConn)), ObserveStanding(obsConn), WithRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	if obs.Candidates() == nil {
		t.Fatal("an observer given ObserveStanding lists nil candidates")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- obs.Run(ctx) }()
	observer := fmt.Sprintf("observer %p", obs)
	rec.await(t, 5*time.Second, observer, standingCount{3, 0}) // it asked as it started

	bSick.Store(true)
	rec.await(t, 5*time.Second, "a/x", standingCount{2, 1})
	rec.await(t, 5*time.Second, "b/x", standingCount{0, 1})
	rec.await(t, 5*time.Second, observer, standingCount{2, 1})
	cs := obs.Candidates()
	if len(cs) != 3 || cs[0].Identity != "a" || cs[1].Identity != "b" || cs[1].Healthy || cs[2].Identity != "c" {
		t.Fatalf("the observer lists %+v, want a, b (unhealthy), c", cs)
	}

	// c's process dies: its connection closes without a leaving word. It
	// is still counted at first, and no longer once its announcements
	// have expired.
	cConn.Close()
	gone := time.Now()
	time.Sleep(ttl / 2)
	if n, _ := rec.count("a/x"); n != (standingCount{2, 1}) {
		t.Fatalf("a counts %+v half a second after c's process died; want it to wait for the expiry (%v)", n, standing.AnnouncementExpiry(ttl))
	}
	rec.await(t, standing.AnnouncementExpiry(ttl)+2*time.Second, "a/x", standingCount{1, 1})
	rec.await(t, 2*time.Second, observer, standingCount{1, 1})
	t.Logf("c's death counted after %v (expiry %v)", time.Since(gone).Round(time.Millisecond), standing.AnnouncementExpiry(ttl))

	// b stops: it says so, and is no longer counted at once, well before
	// any expiry. Its own count is withdrawn.
	stopB()
	stopped := time.Now()
	rec.await(t, 5*time.Second, "a/x", standingCount{1, 0})
	if took := time.Since(stopped); took >= standing.AnnouncementExpiry(ttl) {
		t.Errorf("b's leaving counted after %v, as late as an expiry", took)
	}
	if _, ok := rec.count("b/x"); ok {
		t.Error("b, stopped, still reports a count")
	}
	rec.await(t, 2*time.Second, observer, standingCount{1, 0})

	stopA()
	if _, ok := rec.count("a/x"); ok {
		t.Error("a, stopped, still reports a count")
	}
	rec.await(t, 5*time.Second, observer, standingCount{0, 0})
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("observer Run: %v", err)
	}
	if _, ok := rec.count(observer); ok {
		t.Error("the observer, stopped, still reports a count")
	}
}

// TestNoStandingSwitchesWhoIsStandingOff: the benchmarks' switch
// (internal/nostanding) makes a candidate that campaigns but neither
// answers who is standing nor is counted.
func TestNoStandingSwitchesWhoIsStandingOff(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	rec := newRecorder()
	e := mustElection(t, "quiet", "unannounced", kv, rec.options("quiet")...)
	done := make(chan error, 1)
	go func() { done <- e.Start(nostanding.Context(context.Background())) }()
	t.Cleanup(func() {
		e.Stop()
		<-done
	})
	rec.waitFor(t, 5*time.Second, "quiet to lead", func(evs []event) bool { return wins(evs, "quiet") == 1 })
	got, err := standing.Standing(context.Background(), connect(t, ts.url()), bucketName, "unannounced", 300*time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("a candidate started without who is standing answers: %+v, %v", got, err)
	}
}

// TestAnnouncementsOfAProcessComeTogether: candidates of one identity
// announce at the same instants, whenever each started, within one
// interval; other identities at other instants.
func TestAnnouncementsOfAProcessComeTogether(t *testing.T) {
	t.Parallel()
	every := standing.AnnouncementInterval(30 * time.Second)
	start := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	first := nextAnnouncement(start, every, "p1")
	for _, late := range []time.Duration{time.Millisecond, 7 * time.Second, every / 2} {
		now := start.Add(late)
		next := nextAnnouncement(now, every, "p1")
		if !next.After(now) || next.Sub(now) > every {
			t.Fatalf("next announcement %v after %v: not within one interval (%v)", next, now, every)
		}
		if d := next.Sub(first); d%every != 0 {
			t.Errorf("a candidate of p1 started %v later announces %v off p1's instants", late, d%every)
		}
	}
	if nextAnnouncement(start, every, "p2").Equal(first) && nextAnnouncement(start, every, "p3").Equal(first) {
		t.Error("p1, p2 and p3 announce at the same instants")
	}
}
