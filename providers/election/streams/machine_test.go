package streams

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// newTestMachine returns a candidate's machine with the default timings at
// TTL 3 s, and an instant to start it at.
func newTestMachine(t *testing.T) (*machine, time.Time) {
	e := &Election{opts: defaultOptions()}
	cfg := machineConfig{identity: "a", key: "k", writes: true, releaseOnStop: true, timings: e.timings, random: func(n int64) int64 { return 0 }}
	tm, err := e.timings(3 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return newMachine(cfg, tm), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
}

// feed steps m with in, its error classified as the driver does.
func (m *machine) feed(in input) output { return m.step(classified(in)) }

// noteKinds lists the kinds of notes, for logs.
func noteKinds(ns []note) []noteKind {
	var k []noteKind
	for _, n := range ns {
		k = append(k, n.kind)
	}
	return k
}

// TestMachinePausedLeaderReadsSettingsBeforeANewTerm: a leader paused past
// its lease keeps the key by a renewal that lands (in a bucket made again
// meanwhile, its revision can match another candidate's): no new term
// begins before it has read the bucket's settings again.
func TestMachinePausedLeaderReadsSettingsBeforeANewTerm(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	now := leadAtRevision(t, m, t0, 10) // the watch refused, so that it does not get in the way
	t.Logf("leading, token %d, lease %v", m.term, m.held().lease.Sub(t0))
	// paused for 10 s: the bucket is deleted and made again meanwhile
	now = now.Add(10 * time.Second)
	out := m.feed(input{kind: inTick, now: now})
	t.Logf("after pause: notes %v, action %v, leading %v phase %v ttlRead %v", noteKinds(out.notes), out.do.kind, m.termRuns(), m.phase, m.held().ttlRead)
	for out.do.kind == doWatch {
		out = m.feed(input{kind: inWatchMade, now: now, sent: now, err: errTest})
	}
	if out.do.kind != doWrite || !out.do.renewal {
		t.Fatalf("expected a renewal, got %v", out.do.kind)
	}
	// the new bucket's key happens to be at revision 10: the CAS succeeds
	out = m.feed(input{kind: inWrite, now: now.Add(time.Millisecond), sent: now, rev: 11, expect: 10})
	t.Logf("after renewal: notes %v, action %v, leading %v", noteKinds(out.notes), out.do.kind, m.termRuns())
	for _, n := range out.notes {
		if n.kind == noteBegan {
			t.Errorf("a new term began (token %d) without reading the bucket's settings after the lease lapsed", n.token)
		}
	}
}

var errTest = errors.New("test: refused")

// TestMachineObserverWithoutAWatchReadsEveryHalfTTL: an observer whose
// watch the broker refuses reads the key every half TTL, so a leader that
// takes the key is reported within half a TTL, not never.
func TestMachineObserverWithoutAWatchReadsEveryHalfTTL(t *testing.T) {
	t.Parallel()
	const ttl = 4 * time.Second
	tm, err := observerTimings(ttl)
	if err != nil {
		t.Fatal(err)
	}
	m := newMachine(machineConfig{key: "k", timings: observerTimings, random: func(int64) int64 { return 0 }}, tm)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := m.feed(input{kind: inStart, now: now, born: now.Add(-time.Hour)})
	var reads []time.Time
	held := &Entry{Key: "k", State: KeyHeld, Leader: "l", Revision: 7, Written: now.Add(3 * time.Second)}
	for end := now.Add(3 * ttl); now.Before(end); {
		switch out.do.kind {
		case doWatch:
			out = m.feed(input{kind: inWatchMade, now: now, sent: now, err: errTest})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: ttl, born: now.Add(-time.Hour)})
		case doRead:
			reads = append(reads, now)
			in := input{kind: inRead, now: now, sent: now}
			if !now.Before(held.Written) {
				in.entry = held // a leader took the key 3 s in
			}
			out = m.feed(in)
		case doNothing:
			if !out.wake.After(now) {
				t.Fatalf("woken at %v for nothing at %v: a spin", out.wake, now)
			}
			now = out.wake
			out = m.feed(input{kind: inTick, now: now})
		default:
			t.Fatalf("an observer asked for action %d", out.do.kind)
		}
	}
	if len(reads) < 5 {
		t.Fatalf("read the key %d times in %v without a watch, want one every half TTL (%v)", len(reads), 3*ttl, ttl/2)
	}
	for i := 1; i < len(reads); i++ {
		if gap := reads[i].Sub(reads[i-1]); gap > ttl/2 {
			t.Fatalf("reads %v apart without a watch, want at most half the TTL %v", gap, ttl/2)
		}
	}
	if m.view.State != KeyHeld || m.view.Leader != "l" {
		t.Fatalf("the observer's view is %s, want held by l", m.view.describe())
	}
}

// wrongLastSequence is the broker's answer to a campaign whose key is at
// revision rev.
func wrongLastSequence(rev uint64) error {
	apiErr := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: fmt.Sprintf("wrong last sequence: %d", rev)}
	return fmt.Errorf("%w: %w", apiErr, jetstream.ErrKeyRevisionMismatch)
}

// startWatching starts m, answers its reads of the settings, and makes its
// watch; it returns the first action due after that, and the instant.
func startWatching(t *testing.T, m *machine, now time.Time) (output, time.Time) {
	t.Helper()
	out := m.feed(input{kind: inStart, now: now, born: now.Add(-time.Hour)})
	for range 10 {
		switch out.do.kind {
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: now.Add(-time.Hour)})
		case doWatch:
			return m.feed(input{kind: inWatchMade, now: now, sent: now}), now
		default:
			t.Fatalf("starting: action %v before the watch", out.do.kind)
		}
	}
	t.Fatal("no watch made")
	return out, now
}

// TestMachineStartingCampaignWaitsForItsWatchNotARead: a campaign starting
// takes the key's state from its new watch's initial values, not from a
// read of its own (thousands of elections starting at once each save
// one), and reads only once the watch is late by initialWait.
func TestMachineStartingCampaignWaitsForItsWatchNotARead(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	if out.do.kind == doRead {
		t.Fatal("read the key with the watch's initial values on their way")
	}
	if want := now.Add(initialWait(m.tm)); out.wake.After(want) {
		t.Fatalf("wakes at %v, want by %v to read if the watch is late", out.wake.Sub(now), want.Sub(now))
	}
	out = m.feed(input{kind: inWatchInitialDone, now: now.Add(time.Millisecond)})
	if out.do.kind != doWrite || out.do.expect != 0 {
		t.Fatalf("after the watch said the key is absent: action %v expect %d, want a campaign on no message", out.do.kind, out.do.expect)
	}

	// A watch that stays silent: the campaign reads the key after initialWait.
	m, t0 = newTestMachine(t)
	out, now = startWatching(t, m, t0)
	for out.do.kind == doNothing && out.wake.Before(now.Add(time.Second)) {
		now = out.wake
		out = m.feed(input{kind: inTick, now: now})
	}
	if out.do.kind != doRead || now.Sub(t0) < initialWait(m.tm) {
		t.Fatalf("silent watch: action %v after %v, want a read after %v", out.do.kind, now.Sub(t0), initialWait(m.tm))
	}
}

// TestMachineWatchBeginningAbsentAfterALostCampaignIsNoRemoval: a
// campaign lost to another candidate's write, whose watch then begins with
// the key absent (its consumer was made before that write), reads the key
// at once and follows the winner; before, it took the key as removed under
// a live lease and, winning it later, waited a whole TTL to lead.
func TestMachineWatchBeginningAbsentAfterALostCampaignIsNoRemoval(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	for out.do.kind == doNothing {
		now = out.wake
		out = m.feed(input{kind: inTick, now: now})
	}
	if out.do.kind == doRead {
		out = m.feed(input{kind: inRead, now: now, sent: now}) // absent
	}
	if out.do.kind != doWrite {
		t.Fatalf("action %v, want a campaign", out.do.kind)
	}
	out = m.feed(input{kind: inWrite, now: now.Add(time.Millisecond), sent: now, expect: 0, err: wrongLastSequence(7)})
	now = now.Add(2 * time.Millisecond)
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	if m.view.State != KeyHeld || m.view.Revision != 7 {
		t.Fatalf("view %s at revision %d after the watch began empty, want held at revision 7", m.view.describe(), m.view.Revision)
	}
	for out.do.kind == doReadTTL { // the lost campaign also reads the TTL (perhaps raised)
		out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: t0.Add(-time.Hour)})
	}
	if out.do.kind != doRead {
		t.Fatalf("action %v, want a read of the key now", out.do.kind)
	}
	if m.view.State != KeyHeld {
		t.Fatalf("view %s, want still held", m.view.describe())
	}
	won := time.Now()
	out = m.feed(input{kind: inRead, now: now.Add(time.Millisecond), sent: now,
		entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: won}})
	if m.view.State != KeyHeld || m.view.Leader != "b" {
		t.Fatalf("view %s after the read, want held by b", m.view.describe())
	}
	if out.do.kind == doWrite {
		t.Fatalf("campaigns against b's live lease (expect %d)", out.do.expect)
	}
}

// TestMachineAbsenceConfirmedLateIsJudgedFromTheWatch: a watch that begins
// with the key absent while the view holds it makes the candidate read the
// key; when that read fails and a later one, past the key's predicted
// expiry, finds it absent, the absence is judged from when the watch said
// so: the key vanished under a live lease (a removal, whose holder may
// still count on its lease), not an expiry.
func TestMachineAbsenceConfirmedLateIsJudgedFromTheWatch(t *testing.T) {
	t.Parallel()
	m, t0 := newTestMachine(t)
	out, now := startWatching(t, m, t0)
	out = m.feed(input{kind: inWatchEntry, now: now, entry: &Entry{Key: "k", State: KeyHeld, Leader: "b", Revision: 7, Written: now}})
	out = m.feed(input{kind: inWatchInitialDone, now: now})
	// The watch is made again (a broker restart) and begins empty.
	out, now = remakeWatchEmpty(m, now.Add(500*time.Millisecond))
	if out.do.kind != doRead {
		t.Fatalf("action %v, want a read of the key", out.do.kind)
	}
	out = m.feed(input{kind: inRead, now: now.Add(time.Millisecond), sent: now, err: errTest})
	// The next read succeeds only past the predicted expiry: absent.
	late := t0.Add(m.tm.ttl + time.Second)
	m.feed(input{kind: inRead, now: late, sent: late})
	if m.view.State != KeyRemoved {
		t.Fatalf("view %s after the late read, want removed (it vanished when the watch began empty)", m.view.describe())
	}
}

// remakeWatchEmpty ends m's watch at now, lets m make it again, and begins
// the new one empty; it returns m's action then and the time the watch was
// remade.
func remakeWatchEmpty(m *machine, now time.Time) (output, time.Time) {
	out := m.feed(input{kind: inWatchEnded, now: now, err: errTest})
	for range 20 {
		if out.do.kind == doWatch {
			break
		}
		now = later(now, out.wake)
		out = m.feed(input{kind: inTick, now: now})
	}
	m.feed(input{kind: inWatchMade, now: now, sent: now})
	return m.feed(input{kind: inWatchInitialDone, now: now}), now
}
