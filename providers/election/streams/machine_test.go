package streams

import (
	"errors"
	"testing"
	"time"
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
	return newMachine(cfg, tm, nopLogger{}), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
}

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
	m, t0 := newTestMachine(t)
	born := t0.Add(-time.Hour)
	now := t0
	out := m.step(input{kind: inStart, now: now, born: born})
	// refuse the watch so that it does not get in the way
	for i := 0; i < 50; i++ {
		switch out.do.kind {
		case doWatch:
			out = m.step(input{kind: inWatchMade, now: now, sent: now, err: errTest})
		case doRead:
			out = m.step(input{kind: inRead, now: now, sent: now})
		case doWrite:
			out = m.step(input{kind: inWrite, now: now, sent: now, rev: 10, expect: out.do.expect})
		case doReadTTL:
			out = m.step(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
		case doNothing:
			if m.leading {
				i = 100
				break
			}
			now = out.wake
			out = m.step(input{kind: inTick, now: now})
		}
	}
	if !m.leading {
		t.Fatalf("not leading: phase %v", m.phase)
	}
	t.Logf("leading, token %d, lease %v", m.token, m.hold.lease.Sub(t0))
	// paused for 10 s: the bucket is deleted and made again meanwhile
	now = now.Add(10 * time.Second)
	out = m.step(input{kind: inTick, now: now})
	t.Logf("after pause: notes %v, action %v, leading %v phase %v ttlRead %v", noteKinds(out.notes), out.do.kind, m.leading, m.phase, m.hold.ttlRead)
	for out.do.kind == doWatch {
		out = m.step(input{kind: inWatchMade, now: now, sent: now, err: errTest})
	}
	if out.do.kind != doWrite || !out.do.renewal {
		t.Fatalf("expected a renewal, got %v", out.do.kind)
	}
	// the new bucket's key happens to be at revision 10: the CAS succeeds
	out = m.step(input{kind: inWrite, now: now.Add(time.Millisecond), sent: now, rev: 11, expect: 10})
	t.Logf("after renewal: notes %v, action %v, leading %v", noteKinds(out.notes), out.do.kind, m.leading)
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
	const ttl = 4 * time.Second
	tm, err := observerTimings(ttl)
	if err != nil {
		t.Fatal(err)
	}
	m := newMachine(machineConfig{key: "k", timings: observerTimings, random: func(int64) int64 { return 0 }}, tm, nopLogger{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := m.step(input{kind: inStart, now: now, born: now.Add(-time.Hour)})
	var reads []time.Time
	held := &Entry{Key: "k", State: KeyHeld, Leader: "l", Revision: 7, Written: now.Add(3 * time.Second)}
	for end := now.Add(3 * ttl); now.Before(end); {
		switch out.do.kind {
		case doWatch:
			out = m.step(input{kind: inWatchMade, now: now, sent: now, err: errTest})
		case doReadTTL:
			out = m.step(input{kind: inTTL, now: now, sent: now, ttl: ttl, born: now.Add(-time.Hour)})
		case doRead:
			reads = append(reads, now)
			in := input{kind: inRead, now: now, sent: now}
			if !now.Before(held.Written) {
				in.entry = held // a leader took the key 3 s in
			}
			out = m.step(in)
		case doNothing:
			if !out.wake.After(now) {
				t.Fatalf("woken at %v for nothing at %v: a spin", out.wake, now)
			}
			now = out.wake
			out = m.step(input{kind: inTick, now: now})
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
