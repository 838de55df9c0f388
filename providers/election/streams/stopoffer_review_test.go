package streams

import (
	"testing"
	"time"
)

// TestMachineStopAfterGiveUpReleaseStillHandsOver: a leader whose bucket's
// TTL became unusable gives the key up (a release while running); once the
// TTL is usable again it campaigns, wins and leads. When it then stops, it
// must offer the key to its successor (or at least release it), not leave
// it to expire: the giving-up release was not the release after stopping.
func TestMachineStopAfterGiveUpReleaseStillHandsOver(t *testing.T) {
	m, _, now := leadingMachine(t, true)
	born := now.Add(-time.Hour)
	now = now.Add(time.Millisecond)
	out := m.feed(input{kind: inTTL, now: now, sent: now, ttl: 500 * time.Millisecond, born: born})
	if out.do.kind != doRelease || m.leading {
		t.Fatalf("action %v leading %v after the TTL became unusable; want the giving-up release", out.do.kind, m.leading)
	}
	out = m.feed(input{kind: inRelease, now: now, sent: now, marked: out.do.marked})
	if m.phase != candidate {
		t.Fatalf("phase %v after the giving-up release", m.phase)
	}
	rev := m.seenRev + 1 // the release's marker
	now = now.Add(time.Millisecond)
	out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
	for i := 0; i < 200 && !m.leading; i++ {
		switch out.do.kind {
		case doRead:
			out = m.feed(input{kind: inRead, now: now, sent: now})
		case doWrite:
			rev++
			out = m.feed(input{kind: inWrite, now: now, sent: now, rev: rev, expect: out.do.expect})
		case doReadTTL:
			out = m.feed(input{kind: inTTL, now: now, sent: now, ttl: 3 * time.Second, born: born})
		case doWatch:
			out = m.feed(input{kind: inWatchMade, now: now, sent: now})
		default:
			now = now.Add(m.tm.ttl / 20)
			out = m.feed(input{kind: inTick, now: now})
		}
	}
	if !m.leading {
		t.Fatal("the machine did not come to lead again")
	}
	out = m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind != doOffer && out.do.kind != doRelease {
		t.Fatalf("stopping leader of revision %d: action %v, done %v (released %v): the key is left to expire", m.hold.rev, out.do.kind, out.done, m.released)
	}
}

// TestMachineStopOfferNotAfterTheLeaseLapsed: a leader paused past its
// lease (its timer and the stop fire together) must not offer the key as
// if its hold were fresh: a lapsed lease is to be followed by a read of the
// bucket's settings before anything rests on the hold (the bucket may have
// been made again, and its revision may be another candidate's), and the
// taker of an offer begins its term at once.
func TestMachineStopOfferNotAfterTheLeaseLapsed(t *testing.T) {
	m, _, now := leadingMachine(t, true)
	now = m.hold.lease.Add(time.Second) // paused past the lease; no tick came first
	out := m.feed(input{kind: inStop, now: now, handOver: handOver{to: "c"}})
	if out.do.kind == doOffer || (out.do.kind == doRelease && out.do.marked) {
		t.Fatalf("action %v marked %v, %v after the lease lapsed, with no read of the settings since", out.do.kind, out.do.marked, now.Sub(m.hold.lease))
	}
}

// TestMachineHandOverNotAfterTheLeaseLapsed: as on stop, a hand-over asked
// of a leader paused past its lease (before its timer came) neither
// offers the key nor releases it marked until the bucket's settings are
// read again: the hand-over is refused as too soon.
func TestMachineHandOverNotAfterTheLeaseLapsed(t *testing.T) {
	m, _, now := leadingMachine(t, true)
	now = m.hold.lease.Add(time.Second)
	out := m.feed(input{kind: inHandOver, now: now, handOver: handOver{to: "c"}})
	if out.do.kind == doOffer || (out.do.kind == doRelease && out.do.marked) {
		t.Fatalf("action %v marked %v, %v after the lease lapsed, with no read of the settings since", out.do.kind, out.do.marked, now.Sub(m.hold.lease))
	}
}
