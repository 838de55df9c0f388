package streams

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/clock/clocktest"
)

// TestCampaignCandidateWithoutAWatchCampaignsOnItsTimer: a refused watch does not
// stop a candidate: it reads the key, campaigns when the holder's key
// expires, retries the watch with backoff, logs the cause once, and never
// spins (sim.run fails on a spin).
func TestCampaignCandidateWithoutAWatchCampaignsOnItsTimer(t *testing.T) {
	const ttl = 4 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.refuseWatches(errRefused)
	st.put("crashed")
	s := newSim(t, st, "b")
	s.run(ttl + ttl/4 + 100*time.Millisecond) // expiry, plus at most one standby backoff step
	if !s.leading() {
		t.Fatalf("candidate without a watch does not lead after the holder's key expired (phase %s, view %s)", s.c.m.phase, s.c.m.view.describe())
	}
	if n := s.log.count("WARN", "cannot watch"); n != 1 {
		t.Fatalf("logged the watch failure %d times, want once", n)
	}
	tries := st.count("watch")
	if tries < 3 {
		t.Fatalf("watch tried %d times, want retries", tries)
	}
	s.run(time.Minute)
	if perSecond := float64(st.count("watch")-tries) / 60; perSecond > 1 {
		t.Fatalf("%.1f watch tries a second: no backoff", perSecond)
	}
	st.refuseWatches(nil)
	s.run(10 * time.Second)
	if !s.c.m.watch.working() {
		t.Fatal("watch not made once the broker accepts it")
	}
	if n := s.log.count("INFO", "watching the key again"); n != 1 {
		t.Fatalf("logged the recovery %d times, want once", n)
	}
}

// TestCampaignStuckWatchIsMadeAgain: a watch that delivers nothing in its initial
// phase is replaced within a bounded time; meanwhile the candidate leads.
func TestCampaignStuckWatchIsMadeAgain(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 5*time.Second)
	st.stickWatches(true)
	s := newSim(t, st, "a")
	s.run(initialWait(s.c.m.tm) + 10*time.Millisecond) // it waits that long for the watch, then reads
	if !s.leading() {
		t.Fatal("a candidate whose watch is stuck does not lead an empty key")
	}
	first := st.count("watch")
	s.run(initTimeout(s.c.m.tm) + 250*time.Millisecond)
	if st.count("watch") <= first {
		t.Fatalf("stuck watch not made again within %v", initTimeout(s.c.m.tm))
	}
	st.stickWatches(false)
	s.run(10 * time.Second)
	if !s.c.m.watch.working() {
		t.Fatal("no working watch once the broker delivers")
	}
}

// TestCampaignHolderIgnoresAnOldWatchEntry: a restarted watch that shows an older
// revision of the key, or the holder's own write, changes nothing.
func TestCampaignHolderIgnoresAnOldWatchEntry(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 3*time.Second)
	s := newSim(t, st, "a")
	s.run(2 * time.Second)
	if !s.leading() {
		t.Fatal("a does not lead")
	}
	var out output
	s.c.m.out = &out
	s.c.m.restartWatch(clk.Now())
	s.c.m.out = nil
	s.c.apply(out.notes)
	s.run(2 * time.Second)
	if won, lost := s.callbacks(); won != 1 || lost != 0 {
		t.Fatalf("won %d lost %d after a watch restart", won, lost)
	}
}
