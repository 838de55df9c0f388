package streams

import "time"

// keyView is a candidate's knowledge of the election key: the meaning of its
// latest message (see ReadEntry) and when this candidate learned of it.
type keyView struct {
	known bool // false until the key has been read or watched once
	Entry
	seenAt    time.Time // when we learned of the message, on our clock
	expiresBy time.Time // while held: the earliest the broker may have expired it, as we can tell
	readAt    time.Time // when a read or the watch last showed the message current
	// confirmed: a watch delivered the view, rather than a read (which can
	// be stale on a replicated bucket).
	confirmed bool
	ttl       time.Duration // the bucket's TTL as we knew it when we learned of the message
	// live: a watch delivered the message as it was written, so nothing
	// can have happened between it and the one before.
	live bool
}

// viewOf reads e as seen at now. A live message's age is ~0; otherwise it
// is estimated from the broker's timestamp, clamped to [0, ttl]: a wrong
// guess only moves a safety-net campaign, never a deadline.
func viewOf(e Entry, now time.Time, ttl time.Duration, live bool) keyView {
	v := keyView{known: true, Entry: e, seenAt: now, readAt: now, ttl: ttl, live: live}
	if v.State == KeyHeld {
		age := time.Duration(0)
		if !live {
			age = clamp(now.Sub(v.Written), 0, ttl)
		}
		v.expiresBy = now.Add(ttl - age)
	}
	return v
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

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
