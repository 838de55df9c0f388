package streams

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leadingMachine returns a machine (with offers as given) that leads the
// key it took from absent, and the instant.
func leadingMachine(t *testing.T, offers bool) (*machine, output, time.Time) {
	t.Helper()
	m, t0 := newTestMachine(t)
	m.cfg.offers = offers
	born := t0.Add(-time.Hour)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	for i := 0; i < 100 && !m.termRuns(); i++ {
		switch out.do.kind {
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now})
		case doWrite:
			out = m.feed(input{kind: inWrite, now: now, sent: now, rev: m.held().rev + 1, expect: out.do.expect})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
		default:
			now = now.Add(m.tm.ttl / 20)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	if !m.termRuns() {
		t.Fatal("the machine did not come to lead")
	}
	return m, out, now
}

// offering returns a leading machine asked to hand over to c, which has
// ended its term and offers c the key, with the offer and the instant.
func offering(t *testing.T) (*machine, output, time.Time) {
	t.Helper()
	m, _, now := leadingMachine(t, true)
	out := m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	if out.do.kind != doOffer || out.do.handOver.to != "c" {
		t.Fatalf("action %v to %q, want an offer to c", out.do.kind, out.do.handOver.to)
	}
	return m, out, now
}

// handOverNote returns the outcome of a hand-over out notes, if any.
func handOverNote(out output, kind noteKind) (err error, ok bool) {
	for _, n := range out.notes {
		if n.kind == kind {
			return n.err, true
		}
	}
	return nil, false
}

// TestMachineLeaderOffersTheKeyAfterItsTerm: a leader asked to hand over
// ends its term, then offers the key over its own revision to the named
// candidate, within the hand-over's window and its lease; taken up, it is
// a candidate again and the hand-over is done, with no release written.
func TestMachineLeaderOffersTheKeyAfterItsTerm(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, true)
	rev := m.held().rev
	out := m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	if m.termRuns() || !slices.Contains(noteKinds(out.notes), noteEnded) {
		t.Fatalf("the term goes on (notes %v): it must end before the offer", noteKinds(out.notes))
	}
	if out.do.kind != doOffer || out.do.expect != rev || out.do.handOver.to != "c" {
		t.Fatalf("action %v expect %d to %q; want an offer of revision %d to c", out.do.kind, out.do.expect, out.do.handOver.to, rev)
	}
	if within := m.handOver.within; out.do.timeout <= 0 || out.do.timeout > within || !now.Add(out.do.timeout).Before(m.held().lease.Add(time.Nanosecond)) {
		t.Fatalf("offer timeout %v: want within the window %v and the lease", out.do.timeout, within)
	}
	now = now.Add(2 * time.Millisecond)
	out = m.feed(input{kind: inOffer, now: now, sent: now.Add(-2 * time.Millisecond)})
	if err, ok := handOverNote(out, noteHandOver); !ok || err != nil {
		t.Fatalf("hand-over outcome %v (noted %v), want done", err, ok)
	}
	if m.phase != candidate || out.do.kind == doRelease || out.do.kind == doWrite {
		t.Fatalf("phase %v, action %v: want a candidate that neither releases nor writes", m.phase, out.do.kind)
	}
}

// TestMachineOfferNotTakenUpReleasesToTheNamed: an offer the named
// candidate does not take up (it runs no steward, is Choria's, or is
// gone) falls back to the release that names it.
func TestMachineOfferNotTakenUpReleasesToTheNamed(t *testing.T) {
	t.Parallel()
	m, out, now := offering(t)
	rev := m.held().rev
	now = now.Add(out.do.timeout)
	out = m.feed(input{kind: inOffer, now: now, sent: now.Add(-out.do.timeout), err: context.DeadlineExceeded})
	if _, ok := handOverNote(out, noteHandOver); ok {
		t.Fatal("the hand-over was answered before the release")
	}
	if out.do.kind != doRelease || !out.do.marked || out.do.handOver.to != "c" || out.do.expect != rev {
		t.Fatalf("action %v marked %v to %q expect %d; want the release of revision %d naming c", out.do.kind, out.do.marked, out.do.handOver.to, out.do.expect, rev)
	}
}

// TestMachineWithoutOffersReleasesToTheNamed: a driver that cannot offer
// (no connection to send on) gets the named release at once.
func TestMachineWithoutOffersReleasesToTheNamed(t *testing.T) {
	t.Parallel()
	m, _, now := leadingMachine(t, false)
	out := m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	if out.do.kind != doRelease || out.do.handOver.to != "c" {
		t.Fatalf("action %v to %q, want the release naming c", out.do.kind, out.do.handOver.to)
	}
}

// TestMachineOfferedKeyIsTakenAndLedAtOnce: a standby offered the key
// writes over the offering leader's revision while that leader's write
// still holds it, and its term begins as soon as the bucket's TTL has been
// read since, as after a marked release: no wait for the lease to lapse.
func TestMachineOfferedKeyIsTakenAndLedAtOnce(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	m.cfg.grace = time.Second // a takeover of a lapsed lease would wait it
	born := t0.Add(-time.Hour)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now, Operation: jetstream.KeyValuePut}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	now = now.Add(10 * time.Millisecond)
	out = m.feed(input{kind: inOffered, now: now, from: "b", expect: 7, born: born})
	if out.do.kind != doWrite || out.do.expect != 7 || out.do.renewal {
		t.Fatalf("action %v expect %d renewal %v; want a campaign write over b's revision 7", out.do.kind, out.do.expect, out.do.renewal)
	}
	out = m.feed(input{kind: inWrite, now: now, sent: now, rev: 8, expect: 7})
	if err, ok := handOverNote(out, noteTakeOver); !ok || err != nil {
		t.Fatalf("take-over answer %v (noted %v), want taken", err, ok)
	}
	if out.do.kind != doReadTTL {
		t.Fatalf("action %v, want the TTL read a term rests on", out.do.kind)
	}
	out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: m.tm.ttl, born: born})
	if !m.termRuns() || !slices.Contains(noteKinds(out.notes), noteBegan) {
		t.Fatalf("leading %v (notes %v): the term must begin at once, as after a release", m.termRuns(), noteKinds(out.notes))
	}
	if m.term != 8 {
		t.Fatalf("token %d, want the revision of the write that took the key, 8", m.term)
	}
}

// TestMachineRefusesAnOfferItCannotTakeUp: an offer is answered with why
// not, and no write, when the view shows it stale or another's, or the
// candidate is unhealthy or already holds the key.
func TestMachineRefusesAnOfferItCannotTakeUp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(m *machine, now time.Time)
		from  string
		rev   uint64
		born  time.Time
	}{
		{"stale", nil, "b", 5, time.Time{}},
		{"another's revision", nil, "x", 7, time.Time{}},
		{"another bucket", nil, "b", 7, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"no revision", nil, "b", 0, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, t0 := newTestMachine(t)
			out, now := startWatching(t, m, t0)
			out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now, Operation: jetstream.KeyValuePut}})
			out = m.feed(input{kind: inWatchInitialDone, now: now})
			if tc.setup != nil {
				tc.setup(m, now)
			}
			out = m.feed(input{kind: inOffered, now: now, from: tc.from, expect: tc.rev, born: tc.born})
			err, ok := handOverNote(out, noteTakeOver)
			if !ok || err == nil {
				t.Fatalf("answer %v (noted %v), want a refusal", err, ok)
			}
			if out.do.kind == doWrite {
				t.Fatalf("refused (%v), yet writes over %d", err, out.do.expect)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestMachineRefusedOfferIsReportedAsRefused: the named candidate refuses
// the offer at once (its view shows the key moved on: the leader's own
// renewal of unknown outcome was stored), and the fallback release fails
// on the revision: the hand-over's error says the candidate refused, not
// that it did not answer and may have taken the key.
func TestMachineRefusedOfferIsReportedAsRefused(t *testing.T) {
	t.Parallel()
	m, out, now := offering(t)
	rev := m.held().rev
	now = now.Add(time.Millisecond)
	out = m.feed(input{kind: inOffer, now: now, sent: now, err: errors.New("the key moved on to revision 99 since")})
	if out.do.kind != doRelease {
		t.Fatalf("action %v, want the fallback release", out.do.kind)
	}
	now = now.Add(time.Millisecond)
	out = m.feed(input{kind: inRelease, now: now, sent: now, err: wrongLastSequence(99), expect: rev})
	err, ok := handOverNote(out, noteHandOver)
	if !ok || err == nil {
		t.Fatalf("hand-over outcome %v (noted %v), want an error", err, ok)
	}
	if !strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), "may have taken") {
		t.Fatalf("a refused offer reported as %q", err)
	}
}

// TestMachineTakesUpAnOfferWhileUnhealthy: a candidate whose health check
// failed after the leader chose it still takes up the offer of the key, and
// its write says the term begins as it lands: the leader's term has ended,
// and a leader that turned unhealthy beats none.
func TestMachineTakesUpAnOfferWhileUnhealthy(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now, Operation: jetstream.KeyValuePut}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	m.feed(input{kind: inHealth, now: now, unhealthy: errCheckFails})
	out = m.feed(input{kind: inOffered, now: now, from: "b", expect: 7})
	if out.do.kind != doWrite || out.do.expect != 7 || !out.do.term.begins {
		t.Fatalf("action %v expect %d mark %+v; want a write over b's revision 7 that says its term begins", out.do.kind, out.do.expect, out.do.term)
	}
}
