package streams

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// keyView is a candidate's knowledge of the election key: the meaning of its
// latest message (see ReadEntry) and when this candidate learned of it.
type keyView struct {
	known bool // false until the key has been read or watched once
	Entry
	// seenAt is when this candidate learned of the message, on its clock.
	seenAt time.Time
	// expiresBy is, while the key is held, the earliest the broker may
	// have expired the value, as far as this candidate can tell.
	expiresBy time.Time
	// readAt is when a read or the watch last showed this message current.
	readAt time.Time
	// confirmed is true when a watch delivered the view, false when it was
	// read (a read can be stale on a replicated bucket).
	confirmed bool
	// ttl is the bucket's TTL as this candidate knew it when it learned of
	// the message.
	ttl time.Duration
}

// viewOf reads ent as seen at now. written says whether the message was
// written while we watched (its age is then ~0); otherwise its age is
// estimated from the broker's timestamp and clamped to [0, ttl]: a wrong
// guess only moves a safety-net campaign, never a deadline.
func viewOf(ent jetstream.KeyValueEntry, now time.Time, ttl time.Duration, live bool) keyView {
	v := keyView{known: true, Entry: ReadEntry(ent), seenAt: now, readAt: now, ttl: ttl}
	if v.State == KeyHeld {
		age := time.Duration(0)
		if !live {
			age = clamp(now.Sub(v.Written), 0, ttl)
		}
		v.expiresBy = now.Add(ttl - age)
	}
	return v
}

// free reports whether a campaign may try to take the key now: it is
// absent, released or removed, or held past its predicted expiry.
func (v keyView) free(now time.Time) bool {
	return v.State != KeyHeld || !now.Before(v.expiresBy)
}

// expect is the revision a campaign must find to take the key: the marker
// it replaces, or 0 when the key should have no message.
func (v keyView) expect() uint64 {
	switch v.State {
	case KeyReleased, KeyRemoved:
		return v.Revision
	}
	return 0 // absent, or held but predicted expired: it must now be gone
}

func (v keyView) describe() string {
	if !v.known {
		return "unknown"
	}
	if v.State == KeyAbsent {
		return "absent or expired"
	}
	return v.Describe()
}
