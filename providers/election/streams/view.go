package streams

import "time"

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
	// live is true when a watch delivered the message as it was written,
	// so that nothing can have happened between it and the one before.
	live bool
}

// viewOf reads e as seen at now. live says whether the message was
// written while we watched (its age is then ~0); otherwise its age is
// estimated from the broker's timestamp and clamped to [0, ttl]: a wrong
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
