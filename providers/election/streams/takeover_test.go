package streams

import (
	"context"
	"testing"
	"time"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/internal/keymsg"
)

// TestCampaignTakeoverWaitsByWhatTheKeyShows: after a holder's release the next
// candidate leads at once, however long after the release it starts; after
// any other removal (delete, purge, an empty value) it waits one TTL from
// when it saw it.
func TestCampaignTakeoverWaitsByWhatTheKeyShows(t *testing.T) {
	const ttl = 10 * time.Second
	cases := []struct {
		name  string
		set   func(st *simStore)
		start time.Duration // how long after the change the candidate starts
		wait  time.Duration // how long it must then wait before leading
	}{
		{"release seen at once", func(st *simStore) { st.remove(releasePayload("old")) }, 0, 0},
		{"release seen late", func(st *simStore) { st.remove(releasePayload("old")) }, 9 * time.Second, 0},
		{"plain delete", func(st *simStore) { st.remove(nil) }, 0, ttl},
		{"purge", func(st *simStore) { st.purge() }, 0, ttl},
		{"empty value", func(st *simStore) { st.put("") }, 0, ttl},
		{"payload that is not a release", func(st *simStore) { st.remove([]byte("hello")) }, 0, ttl},
		{"expired", func(st *simStore) { st.put("old"); st.clk.Advance(ttl) }, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(simStart)
			st := newSimStore(clk, ttl)
			st.put("old")
			tc.set(st)
			clk.Advance(tc.start)
			s := newSim(t, st, "new")
			began := clk.Now()
			s.run(tc.wait - time.Millisecond)
			if tc.wait > 0 && s.leading() {
				t.Fatalf("led %v after seeing %s, want to wait %v", clk.Now().Sub(began), tc.name, tc.wait)
			}
			if s.c.m.phase != winning && tc.wait > 0 {
				t.Fatalf("phase %s, want winning (the key taken, the term waiting)", s.c.m.phase)
			}
			s.run(2 * time.Millisecond)
			if !s.leading() {
				t.Fatalf("not leading %v after starting (phase %s, view %s)", clk.Now().Sub(began), s.c.m.phase, s.c.m.view.describe())
			}
		})
	}
}

// TestCampaignDeposedLeaderKeepsItsSitOut: a leader whose renewal is refused
// because the key was removed sits out the takeover, even though its view
// still shows its own value when it learns of it.
func TestCampaignDeposedLeaderKeepsItsSitOut(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.refuseWatches(errRefused) // the renewal, not the watch, tells of the removal
	s := newSim(t, st, "a")
	s.run(10 * time.Millisecond)
	if !s.leading() {
		t.Fatal("a does not lead")
	}
	st.remove(nil) // an operator's stand-down
	s.run(ttl / 2)
	if s.leading() || s.c.m.phase != candidate {
		t.Fatalf("a still %s after its renewal was refused", s.c.m.phase)
	}
	if !s.c.m.sitOut.until.After(clk.Now()) {
		t.Fatal("the deposed leader's sit-out was cleared")
	}
	if got := st.latest(); got.State != KeyRemoved {
		t.Fatalf("a took the key back during its sit-out: %s", got.Describe())
	}
}

// TestCampaignStandbyThatMissedARenewalTakesOverAtTheRealExpiry: a standby whose
// watch missed the leader's last renewal predicts the expiry a renewal
// early; its failed campaign makes it read the key, and it takes over when
// the key really expires, not a growing backoff later.
func TestCampaignStandbyThatMissedARenewalTakesOverAtTheRealExpiry(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	rev := st.put("crashed")
	s := newSim(t, st, "b")
	s.run(ttl / 3)
	st.missNext()
	rev2, err := st.Write(context.Background(), "k", []byte("crashed"), rev, keymsg.Stamp{}) // the crashed leader's last renewal, unseen
	if err != nil {
		t.Fatal(err)
	}
	expiry := clk.Now().Add(ttl)
	s.run(ttl + 100*time.Millisecond)
	got := st.latest()
	if got.Leader != "b" {
		t.Fatalf("b does not lead 100ms after the key expired: %s", got.Describe())
	}
	if took := got.Written.Sub(expiry); took < 0 || took > 50*time.Millisecond {
		t.Fatalf("b took the key %v after it expired (revision %d unseen), want within 50ms", took, rev2)
	}
}

// TestCampaignStandbyTakesALapsedLeaseWithoutWaitingForTheBroker: when the
// broker expires a crashed leader's key late, a standby that saw the last
// renewal takes the key over that revision a TTL after it saw it, once it
// has read the TTL since, and not before.
func TestCampaignStandbyTakesALapsedLeaseWithoutWaitingForTheBroker(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(400 * time.Millisecond)
	rev := st.put("crashed")
	s := newSim(t, st, "b")
	s.run(ttl / 3)
	seen := clk.Now()
	if _, err := st.Write(context.Background(), "k", []byte("crashed"), rev, keymsg.Stamp{}); err != nil { // its last renewal
		t.Fatal(err)
	}
	s.run(ttl - 10*time.Millisecond)
	if got := st.latest(); got.Leader != "crashed" {
		t.Fatalf("b took the key before the lease could have lapsed: %s", got.Describe())
	}
	writes := st.count("write")
	s.run(110 * time.Millisecond)
	got := st.latest()
	if got.Leader != "b" {
		t.Fatalf("b does not lead 100ms after the lease lapsed (the broker expires the key 400ms late): %s", got.Describe())
	}
	if n := st.count("write") - writes; n != 1 {
		t.Fatalf("b wrote %d times to take the lapsed lease, want once (a fleet's standbys take thousands at once)", n)
	}
	if at := got.Written.Sub(seen.Add(ttl)); at < 0 || at > 60*time.Millisecond {
		t.Fatalf("b took the key %v after the lease lapsed, want within 60ms", at)
	}
}

// TestCampaignStaleReadsDoNotSpin: a standby's takeover over a lapsed lease
// fails because the leader renewed unseen, and the reads that follow are
// answered for a while by a replica that lags (an older revision, which is
// dropped): the campaign pauses between them rather than reading again at
// once, and once the answers are current it follows the renewal it missed
// and takes over when that lease lapses.
func TestCampaignStaleReadsDoNotSpin(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(time.Hour) // only a compare-and-swap over the revision frees the key
	st.put("old")
	stale := st.latestMsg()
	st.put("old")
	s := newSim(t, st, "b") // b sees revision 2
	s.run(time.Second)
	st.missNext()
	st.readStale(stale)
	st.put("old") // revision 3, unseen: b's takeover over revision 2 fails
	reads := st.count("latest")
	s.run(ttl)
	if n := st.count("latest") - reads; n > 100 {
		t.Fatalf("%d reads while the replica lagged: the campaign re-reads without pausing", n)
	}
	if s.leading() {
		t.Fatal("b leads over a renewal it never saw")
	}
	st.readStale(nil)
	caughtUp := clk.Now()
	s.run(ttl + ttl/4)
	if !s.leading() {
		t.Fatalf("b not leading %v after the reads caught up (phase %s, view %s)", clk.Now().Sub(caughtUp), s.c.m.phase, s.c.m.view.describe())
	}
}

// TestCampaignLeaderCutOffPastItsDeadlineDoesNotSpin: a leader whose renewals
// fail past its deadline stands down and waits for its retries without
// spinning (sim.run fails on a spin), and never leads without a renewal.
func TestCampaignLeaderCutOffPastItsDeadlineDoesNotSpin(t *testing.T) {
	clk := clocktest.New(simStart)
	st := newSimStore(clk, 3*time.Second)
	s := newSim(t, st, "a")
	s.run(10 * time.Millisecond)
	if !s.leading() {
		t.Fatal("a does not lead")
	}
	st.failWrites(context.DeadlineExceeded)
	s.run(10 * time.Second)
	if s.leading() {
		t.Fatal("a leads without renewing")
	}
	if won, lost := s.callbacks(); won != 1 || lost != 1 {
		t.Fatalf("won %d lost %d", won, lost)
	}
}
