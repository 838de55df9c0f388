package streams

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// These tests drive one campaign step by step on a fake clock and an
// simkv bucket (simstore_test.go): each decision of the campaign is
// checked at the instant it is made. The real-NATS tests check the same
// behaviours end to end.

var simStart = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestSimPhaseMovesAreTheOnlyOnes(t *testing.T) {
	all := []phase{candidate, winning, leading, doomed}
	allowed := map[[2]phase]bool{
		{candidate, winning}: true,
		{winning, leading}:   true, {winning, doomed}: true, {winning, candidate}: true,
		{leading, winning}: true, {leading, doomed}: true, {leading, candidate}: true,
		{doomed, candidate}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := from.canMove(to); got != allowed[[2]phase{from, to}] {
				t.Errorf("%s -> %s allowed %v, want %v", from, to, got, !got)
			}
		}
	}
	if candidate.holds() || !winning.holds() || !leading.holds() || !doomed.holds() {
		t.Error("holds() is wrong")
	}
}

// TestSimTakeoverWaitsByWhatTheKeyShows: after a holder's release the next
// candidate leads at once, however long after the release it starts; after
// any other removal (delete, purge, an empty value) it waits one TTL from
// when it saw it.
func TestSimTakeoverWaitsByWhatTheKeyShows(t *testing.T) {
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

// TestSimStopWritesAReleaseOnlyWhenNoOneElseCanLead: a leader's release is
// marked; a holder still waiting out a removal removes the key unmarked, so
// the next leader waits as it would have.
func TestSimStopWritesAReleaseOnlyWhenNoOneElseCanLead(t *testing.T) {
	const ttl = 10 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	s := newSim(t, st, "a")
	s.run(time.Millisecond)
	if !s.leading() {
		t.Fatal("a does not lead an empty key")
	}
	s.stop()
	if got := st.latest(); got.State != KeyReleased || got.ReleasedBy != "a" {
		t.Fatalf("after a leader stopped the key shows %s, want released by a", got.Describe())
	}
	if won, lost := s.callbacks(); won != 1 || lost != 1 {
		t.Fatalf("won %d lost %d", won, lost)
	}

	// b takes a key someone removed, and stops before its term begins.
	st.put("x")
	st.remove(nil)
	b := newSim(t, st, "b")
	b.run(time.Second)
	if b.c.m.phase != winning {
		t.Fatalf("b is %s, want winning", b.c.m.phase)
	}
	b.stop()
	if got := st.latest(); got.State != KeyRemoved {
		t.Fatalf("a holder waiting out a removal left %s, want removed (no release mark)", got.Describe())
	}
	if won, _ := b.callbacks(); won != 0 {
		t.Fatal("b led")
	}
}

// TestSimTermUsesTheTTLReadAfterWinning: a standby that knew a TTL of 4s
// and wins after it was lowered to 1.5s bases its term on 1.5s.
func TestSimTermUsesTheTTLReadAfterWinning(t *testing.T) {
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

// TestSimLeaderAdoptsATTLChangeWithinOneTTL: a leader reads the TTL every
// TTL, shortens its lease when it is lowered, and Healthy follows the new
// renew interval when it is raised.
func TestSimLeaderAdoptsATTLChangeWithinOneTTL(t *testing.T) {
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

// TestSimUnusableTTLGivesTheKeyUp: a TTL below bucket.MinTTL makes the leader stand
// down and release the key, with no further terms until it is usable again.
func TestSimUnusableTTLGivesTheKeyUp(t *testing.T) {
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

// TestSimCandidateWithoutAWatchCampaignsOnItsTimer: a refused watch does not
// stop a candidate: it reads the key, campaigns when the holder's key
// expires, retries the watch with backoff, logs the cause once, and never
// spins (sim.run fails on a spin).
func TestSimCandidateWithoutAWatchCampaignsOnItsTimer(t *testing.T) {
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

// TestSimStuckWatchIsMadeAgain: a watch that delivers nothing in its initial
// phase is replaced within a bounded time; meanwhile the candidate leads.
func TestSimStuckWatchIsMadeAgain(t *testing.T) {
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

// TestSimDeposedLeaderKeepsItsSitOut: a leader whose renewal is refused
// because the key was removed sits out the takeover, even though its view
// still shows its own value when it learns of it.
func TestSimDeposedLeaderKeepsItsSitOut(t *testing.T) {
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

// TestSimHolderIgnoresAnOldWatchEntry: a restarted watch that shows an older
// revision of the key, or the holder's own write, changes nothing.
func TestSimHolderIgnoresAnOldWatchEntry(t *testing.T) {
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

// TestSimLeaderCutOffPastItsDeadlineDoesNotSpin: a leader whose renewals
// fail past its deadline stands down and waits for its retries without
// spinning (sim.run fails on a spin), and never leads without a renewal.
func TestSimLeaderCutOffPastItsDeadlineDoesNotSpin(t *testing.T) {
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

// TestSimWinAfterALargeTTLDropRenewsInTime: a standby that knew 6s and wins
// under 1.5s renews by the new interval, so its term does not lapse.
func TestSimWinAfterALargeTTLDropRenewsInTime(t *testing.T) {
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

// TestSimStandbyThatMissedARenewalTakesOverAtTheRealExpiry: a standby whose
// watch missed the leader's last renewal predicts the expiry a renewal
// early; its failed campaign makes it read the key, and it takes over when
// the key really expires, not a growing backoff later.
func TestSimStandbyThatMissedARenewalTakesOverAtTheRealExpiry(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	rev := st.put("crashed")
	s := newSim(t, st, "b")
	s.run(ttl / 3)
	st.missNext()
	rev2, err := st.Write(context.Background(), "k", []byte("crashed"), rev, transport.Stamp{}) // the crashed leader's last renewal, unseen
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

// TestSimStandbyTakesALapsedLeaseWithoutWaitingForTheBroker: when the
// broker expires a crashed leader's key late, a standby that saw the last
// renewal takes the key over that revision a TTL after it saw it, once it
// has read the TTL since, and not before.
func TestSimStandbyTakesALapsedLeaseWithoutWaitingForTheBroker(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(400 * time.Millisecond)
	rev := st.put("crashed")
	s := newSim(t, st, "b")
	s.run(ttl / 3)
	seen := clk.Now()
	if _, err := st.Write(context.Background(), "k", []byte("crashed"), rev, transport.Stamp{}); err != nil { // its last renewal
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

// TestSimLapsedLeaseWaitsForARaisedTTL: a standby that knew a TTL lower than
// the one the leader counts on waits by the TTL it reads before taking a
// lapsed lease over.
func TestSimLapsedLeaseWaitsForARaisedTTL(t *testing.T) {
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

// TestSimRecreatedBucketsRevisionsDoNotCutALeaseShort: after the bucket is
// recreated with revisions starting again at 1 (as `nats kv add` makes it),
// a standby follows the new leader's revisions, though they are below the
// old ones, and never takes its lease over when a renewal reaches a
// revision number the standby saw the old leader hold.
func TestSimRecreatedBucketsRevisionsDoNotCutALeaseShort(t *testing.T) {
	const ttl = 3 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.expireLate(time.Hour) // only a compare-and-swap over the revision frees it
	for range 4 {
		st.put("old")
	}
	s := newSim(t, st, "b")
	s.run(100 * time.Millisecond) // b sees old at revision 4

	st.recreate() // the bucket is deleted and made again
	s.run(ttl / 3)
	for i := range 3 * 3 {
		st.put("new") // revisions 1, 2, …: renewals every TTL/3
		s.run(ttl / 3)
		if got := st.latest(); got.Leader != "new" {
			t.Fatalf("renewal %d (revision %d): b took the key from the new bucket's leader: %s", i+1, i+1, got.Describe())
		}
	}
}

// TestSimKeyVanishingUnderALiveLeaseIsARemoval: the key a standby knows
// held vanishes without a marker long before it could expire (the bucket's
// stream deleted and made again, as `nats kv rm` and `nats kv add` do), and
// the standby's new watch finds it absent. The holder may have renewed
// since and still counts on its lease, so the standby takes the key but
// begins its term only a TTL after it saw the key gone, as after a forced
// stand-down; before, it led at once beside the old leader.
func TestSimKeyVanishingUnderALiveLeaseIsARemoval(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.put("old") // the holder's latest renewal
	s := newSim(t, st, "b")
	s.run(time.Second) // b follows the key: held by old

	st.vanish()                   // the stream is deleted and made again: no marker
	st.endWatches()               // the watch ends with its stream
	s.run(500 * time.Millisecond) // b watches again and finds the key absent
	if s.c.m.view.State != KeyRemoved && !s.c.m.phase.holds() {
		t.Fatalf("b's view after the key vanished: %s, phase %s; want it taken as removed", s.c.m.view.describe(), s.c.m.phase)
	}
	gone := clk.Now()
	s.run(ttl - time.Second)
	if s.leading() {
		t.Fatalf("b led %v after the key vanished under old's lease, want it to wait a TTL", clk.Now().Sub(gone))
	}
	if got := st.latest(); got.Leader != "b" {
		t.Fatalf("the key is %s, want b to have taken it while it waits", got.Describe())
	}
	s.run(2 * time.Second)
	if !s.leading() {
		t.Fatalf("b not leading %v after the key vanished (phase %s)", clk.Now().Sub(gone), s.c.m.phase)
	}
}

// TestSimInferredRemovalOutlivesAFailedCampaign: after the key vanished
// under a live lease, the standby's campaign fails (the new stream does
// not answer yet) and its next watch finds the key absent again: the
// removal it inferred, and when it saw it, stand, so its term still waits
// a TTL from then.
func TestSimInferredRemovalOutlivesAFailedCampaign(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.put("old")
	s := newSim(t, st, "b")
	s.run(time.Second)

	st.vanish()
	st.failWrites(nats.ErrNoResponders) // the new stream does not answer yet
	st.endWatches()
	s.run(300 * time.Millisecond)
	gone := clk.Now()
	st.endWatches() // the watch ends once more, and finds the key absent again
	s.run(time.Second)
	st.failWrites(nil)
	s.run(ttl - 3*time.Second)
	if s.leading() {
		t.Fatalf("b led %v after the key vanished under old's lease, want it to wait a TTL", clk.Now().Sub(gone))
	}
	s.run(3 * time.Second)
	if !s.leading() {
		t.Fatalf("b not leading %v after the key vanished (phase %s, view %s)", clk.Now().Sub(gone), s.c.m.phase, s.c.m.view.describe())
	}
}

// TestSimDeposedLeaderFollowsARecreatedBucket: a leads in a bucket whose
// revisions are high (as a Conclave broker makes them); the bucket is
// deleted and made again with revisions from 1, and n, started afterwards,
// takes the key. a is deposed at its next renewal; once n releases the
// key, a leads.
func TestSimDeposedLeaderFollowsARecreatedBucket(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.skipRevisions(1_000_000) // the old bucket's revisions
	s := newSim(t, st, "a")
	s.run(time.Second)
	if !s.leading() {
		t.Fatal("a does not lead")
	}
	st.recreate()
	st.put("n")
	for range 6 { // n renews every 3s; a is deposed at its next renewal and sits out
		s.run(3 * time.Second)
		if s.leading() && st.latest().Leader == "n" {
			t.Fatalf("a still leads %v after the bucket was made again under it", clk.Now().Sub(simStart))
		}
		st.put("n")
	}
	s.run(time.Second)
	st.remove(releasePayload("n"))
	released := clk.Now()
	s.run(3 * time.Second)
	if !s.leading() {
		t.Fatalf("a not leading %v after n released (phase %s, view %s, seen revision %d)", clk.Now().Sub(released), s.c.m.phase, s.c.m.view.describe(), s.c.m.seenRev)
	}
}

// TestSimLoserOfARecreatedBucketRaceFollowsIt: b sees the key vanish from
// a bucket made again (high old revisions, new ones from 1), and its
// campaign fails; another standby takes the key in the new bucket, renews
// it and releases it. b follows the new leader and leads after its
// release.
func TestSimLoserOfARecreatedBucketRaceFollowsIt(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.skipRevisions(1_000_000)
	st.put("old")
	s := newSim(t, st, "b")
	s.run(time.Second)

	st.recreate()
	st.failWrites(nats.ErrNoResponders) // the new stream does not answer b yet
	st.endWatches()
	s.run(200 * time.Millisecond) // b finds the key absent: a removal; its campaign fails
	st.failWrites(nil)
	st.put("other") // the other standby takes the new bucket's key, revision 1
	for range 10 {  // and renews it
		s.run(3 * time.Second)
		if s.leading() {
			t.Fatalf("b leads while other holds the new bucket's key (%s)", st.latest().Describe())
		}
		st.put("other")
	}
	st.remove(releasePayload("other"))
	s.run(2 * time.Second)
	if !s.leading() {
		t.Fatalf("b not leading 2s after the release (phase %s, view %s, seen revision %d)", s.c.m.phase, s.c.m.view.describe(), s.c.m.seenRev)
	}
}

// TestSimStandbyWithoutAWatchWaitsOutARecreatedBucket: a standby without a
// watch reads the key at its predicted expiry, after the bucket was deleted
// and made again under a leader whose renewals it did not see, finds it
// absent and takes it. The settings read every term makes first shows the
// new bucket, so it gives that hold up and campaigns again, and leads only
// once the old leader's lease has surely ended.
func TestSimStandbyWithoutAWatchWaitsOutARecreatedBucket(t *testing.T) {
	const ttl = 9 * time.Second
	clk := clocktest.New(simStart)
	st := newSimStore(clk, ttl)
	st.refuseWatches(errRefused)
	st.put("old")
	s := newSim(t, st, "b")
	s.run(3500 * time.Millisecond)
	st.put("old") // renewals b does not see
	s.run(3 * time.Second)
	st.put("old")
	lastRenewal := clk.Now()
	s.run(time.Second)
	st.recreate()
	oldLease := lastRenewal.Add(ttl - ttl/10)
	for clk.Now().Before(oldLease) {
		s.run(100 * time.Millisecond)
		if s.leading() {
			t.Fatalf("b leads %v after the bucket was made again, while old's lease runs %v more", clk.Now().Sub(lastRenewal), oldLease.Sub(clk.Now()))
		}
	}
	s.run(2 * ttl)
	if !s.leading() {
		t.Fatalf("b not leading %v after the bucket was made again (phase %s, view %s)", clk.Now().Sub(lastRenewal), s.c.m.phase, s.c.m.view.describe())
	}
}

// TestSimStaleReadsDoNotSpin: a standby's takeover over a lapsed lease
// fails because the leader renewed unseen, and the reads that follow are
// answered for a while by a replica that lags (an older revision, which is
// dropped): the campaign pauses between them rather than reading again at
// once, and once the answers are current it follows the renewal it missed
// and takes over when that lease lapses.
func TestSimStaleReadsDoNotSpin(t *testing.T) {
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
