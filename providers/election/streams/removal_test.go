package streams

import (
	"errors"
	"testing"
	"time"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMachineRemovalFoundByAWriteCountsFromItsConfirmation: a campaign
// expecting no message that takes a key its view shows held, well before
// the holder's write could expire, finds the key removed under a live lease
// (a stream purge). The holder's last write was stored before the removal,
// and the removal before our write was stored, which is at most when its
// success came back (done): so the holder may count on its lease until
// done + TTL - margin, and no term of ours may begin before that.
//
// The write's sent time is stamped before the transport's gate, where a
// request may wait up to three quarters of its timeout (0.15 TTL by
// default, more than the margin, 0.1 TTL): judging the removal from sent
// lets a term begin while the removed holder still leads, if it renewed
// while our write waited at the gate and then could not reach the broker.
func TestMachineRemovalFoundByAWriteCountsFromItsConfirmation(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	// The watch shows b holding the key, freshly written.
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	if m.view.State != KeyHeld {
		t.Fatalf("view %s, want held by b", m.view.describe())
	}
	// Half a TTL later the candidate's health check passes again: it
	// campaigns at once, expecting no message (the broker's expiry path).
	now = now.Add(m.tm.ttl / 2)
	m.feed(input{kind: inHealth, now: now, unhealthy: errCheckFails})
	out = m.feed(input{kind: inHealth, now: now})
	for out.do.kind == doReadTTL {
		out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: t0.Add(-time.Hour)})
	}
	if out.do.kind != doWrite || out.do.expect != 0 {
		t.Fatalf("action %v expect %d, want a campaign expecting no message", out.do.kind, out.do.expect)
	}
	// The write waits at the gate (up to 3/4 of its timeout), meanwhile b
	// renews, the stream is purged, and our write lands on the empty key.
	sent := now
	done := sent.Add(m.tm.request * 3 / 4)
	out = m.feed(input{kind: inWrite, now: done, sent: sent, rev: 9, expect: 0})
	if m.phase != winning || m.held().from != KeyRemoved {
		t.Fatalf("phase %s, taken from %s: want winning a removed key", m.phase, m.held().from)
	}
	// Read the TTL since winning (rule 1 needs it).
	for i := 0; i < 10 && !m.held().ttlRead; i++ {
		if out.do.kind == doReadTTL {
			out = m.feed(input{kind: inTTL, now: done, sent: done, ttl: m.tm.ttl, born: t0.Add(-time.Hour)})
			continue
		}
		out = m.feed(input{kind: inTick, now: done})
	}
	at, ok := m.earlierHoldersGone()
	if !ok {
		t.Fatal("earlier holders' end unknown after the TTL read")
	}
	// b renewed at most just before our write was stored (<= done).
	if latest := done.Add(m.tm.ttl - m.tm.margin); at.Before(latest) {
		t.Fatalf("a term may begin %v after our write was confirmed, but b, removed under a lease it renewed while our write waited, may lead until %v after it",
			at.Sub(done), latest.Sub(done))
	}
}

// TestMachineHandOverTooSoonKeepsTheTerm: a leader whose term began over a
// removed key may not name a successor while the deposed holder may still
// count on the key (rule 1), and a raised TTL lengthens that wait. A
// hand-over asked then is refused with ErrHandOverTooSoon and the term
// goes on, renewed as before; asked once the wait is over, it ends the
// term and releases the key naming the successor. (It used to end the
// term, find the release not allowed, and keep renewing the key with
// nobody leading: simulator seed 314015.)
func TestMachineHandOverTooSoonKeepsTheTerm(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	// The stream is purged under b's lease: the watch shows the key gone.
	now = now.Add(m.tm.ttl / 4)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyRemoved, Revision: 8, Written: now}})
	readTTL := func() {
		for i := 0; i < 10 && out.do.kind == doReadTTL; i++ {
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: t0.Add(-time.Hour)})
		}
	}
	readTTL()
	if out.do.kind != doWrite || out.do.expect != 8 {
		t.Fatalf("action %v expect %d, want a campaign over the removal marker", out.do.kind, out.do.expect)
	}
	out = m.feed(input{kind: inWrite, now: now, sent: now, rev: 9, expect: 8})
	readTTL()
	// tick moves a tenth of a TTL on, reading the TTL and renewing as
	// the machine asks.
	tick := func() {
		now = now.Add(m.tm.ttl / 10)
		out = m.feed(input{kind: inTick, now: now})
		readTTL()
		if out.do.kind == doWrite {
			out = m.feed(input{kind: inWrite, now: now, sent: now, rev: m.held().rev + 1, expect: m.held().rev})
		}
	}
	// The term begins once b has surely stood down.
	for i := 0; i < 50 && !m.termRuns(); i++ {
		tick()
	}
	if !m.termRuns() {
		t.Fatal("no term began over the removed key")
	}
	// The bucket's TTL is raised: b, had it learned of it, could count on
	// the key for longer.
	raised := 3 * m.tm.ttl
	out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: raised, born: t0.Add(-time.Hour)})
	at, ok := m.earlierHoldersGone()
	if !ok || !now.Before(at) {
		t.Fatalf("after the raise, earlier holders gone at %v (known %v), want after now", at.Sub(now), ok)
	}
	out = m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	var refused error
	for _, n := range out.notes {
		if n.kind == noteHandOver {
			refused = n.err
		}
		if n.kind == noteEnded {
			t.Fatalf("the term ended on a hand-over that could not be made: %+v", n)
		}
	}
	if !errors.Is(refused, ErrHandOverTooSoon) || !m.termRuns() {
		t.Fatalf("hand-over asked too soon: %v, leading %v; want ErrHandOverTooSoon and the term kept", refused, m.termRuns())
	}
	// Past the wait the hand-over is made: the term ends and the release
	// names c.
	for i := 0; i < 200 && now.Before(at); i++ {
		tick()
	}
	if !m.termRuns() {
		t.Fatal("the term did not go on until the wait was over")
	}
	out = m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	for i := 0; i < 5 && out.do.kind != doRelease; i++ {
		out = m.feed(input{kind: inTick, now: now})
	}
	if m.termRuns() || out.do.kind != doRelease || !out.do.marked || out.do.handOver.to != "c" {
		t.Fatalf("leading %v, action %v marked %v to %q: want the term ended and a release naming c", m.termRuns(), out.do.kind, out.do.marked, out.do.handOver.to)
	}
}

// TestMachineRemovalFoundByAFailedCampaignStillSitsOut: a candidate whose
// view shows the key held in its own name (a write it gave up, here one
// it found after a restart) campaigns over it once its lease has lapsed;
// the compare-and-swap fails on a later revision, which a read then shows
// is a forced removal. The removal was meant for the message in our name,
// so we sit the takeover out as a deposed leader does. (The failed
// campaign's view, which names no holder, used to hide that: simulator
// seed 1088174.)
func TestMachineRemovalFoundByAFailedCampaignStillSitsOut(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	born := t0.Add(-time.Hour)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "a", Revision: 1, Written: now, Operation: jetstream.KeyValuePut}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	out, now = loseCampaignOver(t, m, out, now, born, &Entry{Key: "k", State: KeyHeld, Leader: "a", Revision: 1, Written: t0, Operation: jetstream.KeyValuePut}, 2)
	removedAt := now
	out = m.feed(input{kind: inRead, now: now, sent: now, entry: &Entry{Key: "k", State: KeyRemoved, Revision: 2, Written: now, Operation: jetstream.KeyValuePurge}})
	if !m.sitOut.until.After(removedAt) {
		t.Fatalf("sit-out until %v: want past the removal at %v", m.sitOut.until.Sub(removedAt), removedAt)
	}
	// Nothing takes the key before the sit-out ends.
	for now.Before(m.sitOut.until.Add(-m.tm.ttl / 20)) {
		if out.do.kind == doWrite {
			t.Fatalf("campaign %v after the removal, within the sit-out of %v", now.Sub(removedAt), m.tm.ttl)
		}
		switch out.do.kind {
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now, entry: &Entry{Key: "k", State: KeyRemoved, Revision: 2, Written: removedAt, Operation: jetstream.KeyValuePurge}})
		default:
			now = now.Add(m.tm.ttl / 20)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
}

// TestMachineKeyGoneByItsOwnTTLIsNoRemoval: a message carrying its own TTL
// (the Nats-TTL header) shorter than the bucket's TTL, as a campaign
// written under a lowered TTL and stored late is after the TTL is put
// back, expires by that TTL. Gone past it, the key expired; only gone
// before it, or without a TTL of its own, the key was removed under a
// live lease. (A fault run's ttl-lower + restart-broker took such an
// expiry as a removal and left the election leaderless a TTL longer.)
func TestMachineKeyGoneByItsOwnTTLIsNoRemoval(t *testing.T) {
	t.Parallel()
	// The bucket's TTL is 3 s and the margin 300 ms: a key held by a
	// message without a TTL of its own expires 3 s after it was written,
	// and found gone before 2.7 s it was removed.
	for _, c := range []struct {
		name   string
		msgTTL time.Duration
		endAt  time.Duration // the watch ends this long after the write; it is remade empty a little later
		within [2]time.Duration
		want   KeyState
	}{
		{"expired by its own TTL", 2 * time.Second, 2 * time.Second, [2]time.Duration{1700 * time.Millisecond, 2700 * time.Millisecond}, KeyAbsent},
		{"gone before its own TTL", 2 * time.Second, time.Second, [2]time.Duration{0, 1700 * time.Millisecond}, KeyRemoved},
		{"no TTL of its own", 0, 2 * time.Second, [2]time.Duration{1700 * time.Millisecond, 2700 * time.Millisecond}, KeyRemoved},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, t0 := newTestMachine(t)
			out, now := startWatching(t, m, t0)
			written := now
			out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: written, TTL: c.msgTTL}})
			out = m.feed(input{kind: inWatchInitialDone, now: now})
			// The watch is made again and begins empty; the read it
			// prompts finds the key absent.
			out, now = remakeWatchEmpty(m, written.Add(c.endAt))
			gone := now.Sub(written)
			if gone < c.within[0] || gone >= c.within[1] {
				t.Fatalf("watch remade %v after the write, want within [%v, %v)", gone, c.within[0], c.within[1])
			}
			if out.do.kind == doRead {
				m.feed(input{kind: inRead, now: now.Add(time.Millisecond), sent: now})
			}
			if m.view.State != c.want {
				t.Fatalf("key found gone %v after b's write with its own TTL %v: view %s, want %s", gone, c.msgTTL, m.view.describe(), c.want)
			}
		})
	}
}

// TestMachineOwnTTLJudgedWithTheHoldersMargin: the bucket's TTL was raised
// from 5 s to 30 s; candidate a has read the raise, b has not, and b's last
// write carries its own TTL of 5 s. b counts on it until it sent it + 5 s
// less its margin, a tenth of 5 s: 4.5 s. The stream is purged 2.5 s after
// b's write and a's campaign, expecting no message, lands on the empty key.
// Judged by the message's own TTL (5 s) less a's margin (a tenth of 30 s,
// 3 s), the key was "expired" from 2 s on, and a's term would begin at once
// while b still leads for 2 s: two leaders. Found gone before b's lease
// could end, it was removed.
func TestMachineOwnTTLJudgedWithTheHoldersMargin(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	born := t0.Add(-time.Hour)
	now = now.Add(time.Millisecond)
	m.feed(input{kind: inTTL, now: now, sent: now, ttl: 30 * time.Second, born: born})
	if m.tm.ttl != 30*time.Second {
		t.Fatalf("TTL %v, want 30s", m.tm.ttl)
	}
	// b's write, with its own TTL of 5 s, as the watch delivers it.
	written := now
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: written, TTL: 5 * time.Second}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	if m.view.State != KeyHeld {
		t.Fatalf("view %s, want held by b", m.view.describe())
	}
	bLeaseEnd := written.Add(5*time.Second - 5*time.Second/10)
	// 2.5 s later a campaigns at once (its health check passes again).
	now = written.Add(2500 * time.Millisecond)
	m.feed(input{kind: inHealth, now: now, unhealthy: errCheckFails})
	out = m.feed(input{kind: inHealth, now: now})
	for out.do.kind == doReadTTL {
		out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
	}
	if out.do.kind != doWrite || out.do.expect != 0 {
		t.Fatalf("action %v expect %d, want a campaign expecting no message", out.do.kind, out.do.expect)
	}
	sent, done := now, now.Add(10*time.Millisecond)
	out = m.feed(input{kind: inWrite, now: done, sent: sent, rev: 9, expect: 0})
	if m.phase != winning {
		t.Fatalf("phase %s, want winning", m.phase)
	}
	for i := 0; i < 10 && !m.held().ttlRead; i++ {
		if out.do.kind == doReadTTL {
			out = m.feed(input{kind: inTTL, now: done, sent: done, ttl: m.tm.ttl, born: born})
			continue
		}
		out = m.feed(input{kind: inTick, now: done})
	}
	at, ok := m.earlierHoldersGone()
	if !ok {
		t.Fatal("earlier holders' end unknown after the TTL read")
	}
	if at.Before(bLeaseEnd) {
		t.Fatalf("taken from %s: a term may begin %v after b's write, but b may lead until %v after it", m.held().from, at.Sub(written), bLeaseEnd.Sub(written))
	}
}

// TestMachineCampaignsWhenTheMessagesOwnTTLEnds: a standby that knows the
// bucket's TTL (3 s) and sees the holder's message carry a shorter TTL of
// its own (1 s: written before the holder read a raise) campaigns, expecting
// no message, when that TTL ends and the broker expires the message, not
// 3 s after it; a message without one waits for the bucket's TTL.
func TestMachineCampaignsWhenTheMessagesOwnTTLEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		msgTTL, want time.Duration
	}{{time.Second, time.Second}, {0, 3 * time.Second}} {
		m, t0 := newTestMachine(t)
		out, now := startWatching(t, m, t0)
		written := now
		held := &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: written, TTL: c.msgTTL}
		m.feed(input{kind: inWatchEntry, now: now, entry: held})
		out = m.feed(input{kind: inWatchInitialDone, now: now})
		for range 50 {
			switch out.do.kind {
			case doReadTTL:
				out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: t0.Add(-time.Hour)})
				continue
			case doRead: // the key is as the watch showed it
				out = m.feed(input{kind: inRead, now: now, sent: now, entry: held})
				continue
			}
			if out.do.kind == doWrite || out.wake.IsZero() {
				break
			}
			now = later(now, out.wake)
			out = m.feed(input{kind: inTick, now: now})
		}
		// Without a TTL of its own, the lease has surely lapsed by then
		// too (lapseAt): the campaign may write over b's revision.
		if out.do.kind != doWrite || (c.msgTTL > 0 && out.do.expect != 0) {
			t.Fatalf("own TTL %v: action %v expect %d, want a campaign expecting no message", c.msgTTL, out.do.kind, out.do.expect)
		}
		if got := now.Sub(written); got != c.want {
			t.Fatalf("own TTL %v: campaigned %v after the holder's write, want %v", c.msgTTL, got, c.want)
		}
	}
}

// TestMachineHolderOfARemadeBucketForgetsItsRevision: a leader that learns
// the bucket was deleted and made again gives its hold up and takes the
// key as removed: its revision is the old bucket's, and in the new one the
// same revision can be another candidate's live write. It used to keep its
// view of its own write and, its sit-out over and that write long lapsed,
// campaign over the revision, taking another leader's key within its
// lease (simulator seed 1272535: two leaders at once).
func TestMachineHolderOfARemadeBucketForgetsItsRevision(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	now := leadAtRevision(t, m, t0, 2)
	// A read of the settings shows the bucket made again.
	now = now.Add(time.Second)
	remade := now.Add(-100 * time.Millisecond)
	out := m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: remade})
	if m.phase.holds() {
		t.Fatalf("still holds revision %d of the old bucket", m.held().rev)
	}
	if m.view.State == KeyHeld && m.view.Revision == 2 {
		t.Fatalf("view %s at revision 2: the old bucket's", m.view.describe())
	}
	// The new bucket's watch fails and reads find the key absent there;
	// whatever the machine writes must not expect revision 2.
	out, now = untilCampaign(t, m, out, now, remade)
	if out.do.expect == 2 {
		t.Fatalf("%v after the bucket was made again: a campaign over the old bucket's revision 2 (view %s)", now.Sub(remade), m.view.describe())
	}
}

// untilCampaign steps m from out at now until it writes, with its watch
// refused, reads finding the key absent and settings reads showing the
// bucket born at born, and returns the write and its time.
func untilCampaign(t *testing.T, m *machine, out output, now, born time.Time) (output, time.Time) {
	t.Helper()
	for range 200 {
		switch out.do.kind {
		case doWrite:
			return out, now
		case doWatch:
			out = m.feed(input{kind: inWatchMade, now: now, sent: now, err: errTest})
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
		default:
			if out.wake.IsZero() {
				t.Fatalf("nothing to do (view %s)", m.view.describe())
			}
			now = later(now, out.wake)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	t.Fatal("no campaign within 200 steps")
	return out, now
}

// leadAtRevision runs m, which refuses watches, from t0 until it leads by
// a campaign stored at revision rev of a bucket born an hour before t0,
// and returns the time.
func leadAtRevision(t *testing.T, m *machine, t0 time.Time, rev uint64) time.Time {
	t.Helper()
	born := t0.Add(-time.Hour)
	now := t0
	out := m.feed(input{kind: inStart, now: now, born: born})
	for i := 0; i < 50 && !m.termRuns(); i++ {
		switch out.do.kind {
		case doWatch:
			out = m.feed(input{kind: inWatchMade, now: now, sent: now, err: errTest})
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now})
		case doWrite:
			out = m.feed(input{kind: inWrite, now: now, sent: now, rev: rev, expect: out.do.expect})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
		default:
			now = later(now, out.wake)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	if !m.termRuns() || m.held().rev != rev {
		t.Fatalf("not leading at revision %d: phase %v, revision %d", rev, m.phase, m.held().rev)
	}
	return now
}

// TestMachineRemovalOfOurWriteInARemadeBucketStillSitsOut: a leader wrote
// to a bucket made again without knowing it was new, learns it was, and
// gives its hold up; then the first message it learns of the new bucket
// is a forced stand-down of that very write. The stand-down is meant for
// it: it sits out a TTL from then, though its view of the new bucket no
// longer names it (simulator seed 1261420, after the fix above).
func TestMachineRemovalOfOurWriteInARemadeBucketStillSitsOut(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	now := leadAtRevision(t, m, t0, 1) // revision 1: the new bucket's first message
	remade := now.Add(-10 * time.Millisecond)
	now = now.Add(10 * time.Millisecond)
	m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: remade})
	if m.phase.holds() {
		t.Fatal("still holds its write after learning the bucket was made again")
	}
	// The new watch's first message: our write at 1, deleted by force.
	now = now.Add(time.Second)
	m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyRemoved, Operation: jetstream.KeyValueDelete, Revision: 2, Written: now}})
	if want := now.Add(m.tm.ttl); m.sitOut.until.Before(want) {
		t.Fatalf("sits out until %v after the stand-down, want a TTL (%v)", m.sitOut.until.Sub(now), m.tm.ttl)
	}
}

// TestMachineHolderOfARemadeBucketSitsOutDespiteItsOwnLaterWrite: a leader
// whose renewal's outcome was unknown sees that renewal stored (its own
// name, a later revision) and then learns the bucket was made again. It
// gives its hold up as deposed and must sit a TTL out: its own write is no
// new leader, and the view that showed it is dropped for the placeholder.
func TestMachineHolderOfARemadeBucketSitsOutDespiteItsOwnLaterWrite(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	now := leadAtRevision(t, m, t0, 2)
	now = now.Add(100 * time.Millisecond)
	m.feed(input{kind: inWrite, now: now, sent: now.Add(-50 * time.Millisecond), expect: 2, err: errTest})
	if !m.held().inDoubt {
		t.Fatal("a renewal with an unknown outcome left the hold certain")
	}
	now = now.Add(10 * time.Millisecond)
	m.feed(input{kind: inWatchEntry, now: now, live: true, entry: &Entry{Key: "k", State: KeyHeld, Leader: "a", Revision: 3, Written: now}})
	if !m.phase.holds() {
		t.Fatal("gave its hold up on its own renewal landing late")
	}
	now = now.Add(100 * time.Millisecond)
	learned := now
	out := m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: now.Add(-50 * time.Millisecond)})
	if m.phase.holds() {
		t.Fatal("still holds after learning the bucket was made again")
	}
	if _, at := untilCampaign(t, m, out, now, learned.Add(-50*time.Millisecond)); at.Before(learned.Add(m.tm.ttl)) {
		t.Fatalf("campaigns %v after giving its hold up, within its sit-out (sitOut %+v)", at.Sub(learned), m.sitOut)
	}
}

// TestCampaignKeyVanishingUnderALiveLeaseIsARemoval: the key a standby knows
// held vanishes without a marker long before it could expire (the bucket's
// stream deleted and made again, as `nats kv rm` and `nats kv add` do), and
// the standby's new watch finds it absent. The holder may have renewed
// since and still counts on its lease, so the standby takes the key but
// begins its term only a TTL after it saw the key gone, as after a forced
// stand-down; before, it led at once beside the old leader.
func TestCampaignKeyVanishingUnderALiveLeaseIsARemoval(t *testing.T) {
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

// TestCampaignInferredRemovalOutlivesAFailedCampaign: after the key vanished
// under a live lease, the standby's campaign fails (the new stream does
// not answer yet) and its next watch finds the key absent again: the
// removal it inferred, and when it saw it, stand, so its term still waits
// a TTL from then.
func TestCampaignInferredRemovalOutlivesAFailedCampaign(t *testing.T) {
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

// TestMachineStaleReadAfterALostCampaignIsNoNewBucket: a standby whose
// watch missed renewals campaigns over the revision it knew (40), loses to
// revision 43, whose write time it does not know, then reads the key from
// a replica that lags: revision 41, written after 40. That is a stale
// answer, not a bucket made again: the view stays at 43, and the key then
// found absent vanished under 43's live lease, a removal, not an expiry
// (simulator seed 11076682 took it for a new bucket, judged rev 41 expired
// and led beside the leader of 43).
func TestMachineStaleReadAfterALostCampaignIsNoNewBucket(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	born := t0.Add(-time.Hour)
	out, now := startWatching(t, m, t0)
	written40 := now
	held := func(rev uint64, written time.Time) *Entry {
		return &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: rev, Written: written, Operation: jetstream.KeyValuePut}
	}
	out = m.feed(input{kind: inWatchEntry, now: now, entry: held(40, written40)})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	out, now = loseCampaignOver(t, m, out, now, born, held(40, written40), 43)
	lost := now
	stale := held(41, written40.Add(m.tm.ttl/2)) // between 40 and 43
	m.feed(input{kind: inRead, now: now, sent: now, entry: stale})
	if m.view.Revision != 43 || m.seenRev != 43 {
		t.Fatalf("after a lagging replica's revision 41: view %s at revision %d, highest seen %d; want 43 kept (no bucket made again)", m.view.describe(), m.view.Revision, m.seenRev)
	}
	// Absent within a TTL of learning of 43: it vanished under a lease.
	now = lost.Add(m.tm.ttl / 2)
	m.feed(input{kind: inRead, now: now, sent: now})
	if m.view.State != KeyRemoved {
		t.Fatalf("view %s once the key is absent half a TTL after revision 43, want removed (it vanished under a live lease)", m.view.describe())
	}
}

// TestMachineStaleReadAfterABrokerClockWentBackIsNoNewBucket: broker write
// times come from the stream leader's clock, which may be behind the last
// one's after a change of leader: revision 44 written before 43. A
// lagging replica's 43 is then still stale, not a new bucket's message.
func TestMachineStaleReadAfterABrokerClockWentBackIsNoNewBucket(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	_, now := startWatching(t, m, t0)
	held := func(rev uint64, written time.Time) *Entry {
		return &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: rev, Written: written, Operation: jetstream.KeyValuePut}
	}
	m.feed(input{kind: inWatchEntry, now: now, entry: held(43, now)})
	m.feed(input{kind: inWatchInitialDone, now: now})
	now = now.Add(100 * time.Millisecond)
	m.feed(input{kind: inWatchEntry, now: now, entry: held(44, t0.Add(-200*time.Millisecond))})
	m.feed(input{kind: inRead, now: now, sent: now, entry: held(43, t0)})
	if m.view.Revision != 44 || m.seenRev != 44 {
		t.Fatalf("after a lagging replica's revision 43: view %s at revision %d, highest seen %d; want 44 kept (no bucket made again)", m.view.describe(), m.view.Revision, m.seenRev)
	}
}

// loseCampaignOver steps m, a standby that knows held, with ticks and
// answers (reads show held) until it campaigns over held's lapsed
// revision, fails the campaign with a conflict naming revision conflict,
// and steps it on until it reads the key; it returns m's output then and
// the instant.
func loseCampaignOver(t *testing.T, m *machine, out output, now, born time.Time, held *Entry, conflict uint64) (output, time.Time) {
	t.Helper()
	rev := held.Revision
	for i := 0; i < 200 && !(out.do.kind == doWrite && out.do.expect == rev); i++ {
		switch out.do.kind {
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now, entry: held})
		default:
			now = now.Add(m.tm.ttl / 20)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	if out.do.kind != doWrite || out.do.expect != rev {
		t.Fatalf("action %v expect %d: want a campaign over the lapsed revision %d", out.do.kind, out.do.expect, rev)
	}
	out = m.feed(input{kind: inWrite, now: now, sent: now, expect: rev, err: wrongLastSequence(conflict)})
	for i := 0; i < 10 && out.do.kind != doRead; i++ {
		if out.do.kind == doReadTTL {
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
			continue
		}
		now = now.Add(10 * time.Millisecond)
		out = m.feed(input{kind: inTick, now: now})
	}
	if out.do.kind != doRead {
		t.Fatalf("action %v: want a read after the lost campaign", out.do.kind)
	}
	return out, now
}
