package streams

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/nats-io/nats.go"
)

// TestLeadersLearnATTLChangeFromTheAdvisoryAndShareReads: the leaders of
// many elections in one process do not each read the bucket's settings once
// per TTL: the process sends a few reads a TTL for all of them. When an
// operator lowers the TTL, every leader adopts it within a moment, from the
// stream's update advisory, long before its routine read (due every half
// TTL) could tell it.
func TestLeadersLearnATTLChangeFromTheAdvisoryAndShareReads(t *testing.T) {
	const (
		n   = 40
		ttl = 10 * time.Second
	)
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	spy := connect(t, ts.url())
	var infos atomic.Int64
	sub, err := spy.Subscribe("$JS.API.STREAM.INFO.KV_"+bucketName, func(*nats.Msg) { infos.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	adopted := map[string]time.Time{}
	log := funcLogger(func(s string) {
		if key, ok := strings.CutPrefix(s, "WARN election "); ok && strings.Contains(key, ": bucket TTL changed from 10s to 9s") {
			mu.Lock()
			adopted[strings.SplitN(key, ":", 2)[0]] = time.Now()
			mu.Unlock()
		}
	})
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		runElection(t, mustElection(t, "a", fmt.Sprintf("svc%d", i), kv, append(recs[i].options("a"), WithLogger(log))...))
	}
	for i := range n {
		recs[i].waitFor(t, 10*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	}
	// Leading for a while: without sharing, each leader would read the
	// settings every half TTL.
	infos.Store(0)
	time.Sleep(ttl) // a span of time to count requests in, not a wait for an event
	if got := infos.Load(); got > 12 {
		t.Fatalf("%d leaders sent %d reads of the bucket's settings in one TTL, want a few for the process (at most 12)", n, got)
	} else {
		t.Logf("%d leaders sent %d reads of the bucket's settings in one TTL", n, got)
	}

	changed := time.Now()
	changeTTL(t, kv, nc, 9*time.Second)
	eventually(t, 2*time.Second, "every leader to adopt the lowered TTL", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(adopted) == n
	})
	mu.Lock()
	var slowest time.Duration
	for _, at := range adopted {
		slowest = max(slowest, at.Sub(changed))
	}
	mu.Unlock()
	t.Logf("every leader adopted the lowered TTL within %v", slowest.Round(time.Millisecond))
	for i := range n {
		checkHistory(t, recs[i].snapshot())
	}
}

// TestCampaignTermUsesTheTTLReadAfterWinning: a standby that knew a TTL of 4s
// and wins after it was lowered to 1.5s bases its term on 1.5s.
func TestCampaignTermUsesTheTTLReadAfterWinning(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 4*time.Second)
	st.put("other")
	s := newSim(t, st, "standby")
	s.run(time.Second)
	st.setTTL(1500 * time.Millisecond) // the other's key now expires 1.5s after its write: already gone
	s.run(5 * time.Second)
	if !s.leading() {
		t.Fatalf("standby does not lead (phase %s)", s.c.m.phase)
	}
	term := s.lastTerm()
	if got, max := term.ValidUntil().Sub(s.c.m.held().sent), 1500*time.Millisecond; got > max {
		t.Fatalf("term valid for %v after its last write was sent, want at most the new TTL %v", got, max)
	}
	if s.c.m.tm.ttl != 1500*time.Millisecond {
		t.Fatalf("campaign TTL %v, want the lowered 1.5s", s.c.m.tm.ttl)
	}
}

// TestCampaignLeaderAdoptsATTLChangeWithinOneTTL: a leader reads the TTL every
// TTL, shortens its lease when it is lowered, and Healthy follows the new
// renew interval when it is raised.
func TestCampaignLeaderAdoptsATTLChangeWithinOneTTL(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 3*time.Second)
	s := newSim(t, st, "a")
	s.run(time.Second)
	st.setTTL(1500 * time.Millisecond)
	s.run(3 * time.Second)
	if s.c.m.tm.ttl != 1500*time.Millisecond {
		t.Fatalf("leader still uses TTL %v one old TTL after the change", s.c.m.tm.ttl)
	}
	if !s.leading() {
		t.Fatal("leader lost its term over a lowered TTL")
	}
	if until := s.lastTerm().ValidUntil(); until.Sub(s.c.m.held().sent) > 1500*time.Millisecond {
		t.Fatalf("deadline %v after the last write, want at most the new TTL", until.Sub(s.c.m.held().sent))
	}

	st.setTTL(6 * time.Second)
	s.run(4 * time.Second)
	if s.c.m.tm.ttl != 6*time.Second {
		t.Fatalf("leader uses TTL %v after a raise to 6s", s.c.m.tm.ttl)
	}
	// Healthy allows the new renew interval (2s): poll it across renewals.
	for i := 0; i < 40; i++ {
		s.run(100 * time.Millisecond)
		if err := s.e.Healthy(100 * time.Millisecond); err != nil {
			t.Fatalf("healthy leader reported unhealthy after the TTL was raised: %v", err)
		}
	}
	if won, lost := s.callbacks(); won != 1 || lost != 0 {
		t.Fatalf("won %d lost %d across TTL changes, want one term", won, lost)
	}
}

// TestCampaignUnusableTTLGivesTheKeyUp: a TTL below bucket.MinTTL makes the leader stand
// down and release the key, with no further terms until it is usable again.
func TestCampaignUnusableTTLGivesTheKeyUp(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 3*time.Second)
	s := newSim(t, st, "a")
	s.run(time.Second)
	st.setTTL(500 * time.Millisecond)
	s.run(20 * time.Second)
	if won, lost := s.callbacks(); won != 1 || lost != 1 {
		t.Fatalf("won %d lost %d with an unusable TTL, want one term that ended", won, lost)
	}
	if s.c.m.phase != candidate {
		t.Fatalf("phase %s, want candidate", s.c.m.phase)
	}
	if got := st.latest(); got.State == KeyHeld {
		t.Fatalf("key %s: the leader kept renewing", got.Describe())
	}
	if n := s.log.count("ERROR", "cannot hold elections"); n != 1 {
		t.Fatalf("logged the unusable TTL %d times, want once", n)
	}
	st.setTTL(2 * time.Second)
	s.run(15 * time.Second)
	if !s.leading() {
		t.Fatal("does not lead again once the TTL is usable")
	}
}

// TestCampaignWinAfterALargeTTLDropRenewsInTime: a standby that knew 6s and wins
// under 1.5s renews by the new interval, so its term does not lapse.
func TestCampaignWinAfterALargeTTLDropRenewsInTime(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 6*time.Second)
	st.put("other")
	s := newSim(t, st, "b")
	s.run(time.Second)
	st.setTTL(1500 * time.Millisecond)
	s.run(10 * time.Second)
	if !s.leading() {
		t.Fatal("b does not lead")
	}
	if won, lost := s.callbacks(); won != 1 || lost != 0 {
		t.Fatalf("won %d lost %d: the term lapsed for want of a renewal", won, lost)
	}
}

// TestCampaignLapsedLeaseWaitsForARaisedTTL: a standby that knew a TTL lower than
// the one the leader counts on waits by the TTL it reads before taking a
// lapsed lease over.
func TestCampaignLapsedLeaseWaitsForARaisedTTL(t *testing.T) {
	const ttl, raised = 2 * time.Second, 5 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(time.Hour) // only a compare-and-swap over the revision frees it
	st.put("leader")
	s := newSim(t, st, "b")
	s.run(100 * time.Millisecond)
	st.setTTL(raised) // the leader read it; b has not
	s.run(ttl / 2)
	seen := clk.Now()
	st.put("leader") // a renewal counting on the raised TTL
	s.run(raised - 50*time.Millisecond)
	if got := st.latest(); got.Leader != "leader" {
		t.Fatalf("b took the key %v after the renewal, within the raised TTL %v: %s", clk.Now().Sub(seen), raised, got.Describe())
	}
	s.run(time.Second)
	if got := st.latest(); got.Leader != "b" {
		t.Fatalf("b does not lead once the raised TTL lapsed: %s", got.Describe())
	}
}
