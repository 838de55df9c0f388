package streams

import "time"

// The election's safety rules, side by side. The lease machine
// (machine.go) applies them and nothing else decides; the candidate and
// the observer both run the machine.
//
// Rule 1, earlierHoldersGone: when every earlier holder has surely stopped.
// Rule 2, mayTake: when a candidate may write, and over which revision.
// Rule 3, termBegins and leaseEnd: when a term begins and when it ends.
// The comparator, isNews, decides whether a message tells anything new.

// Rule 1: every earlier holder has surely stopped counting on the key we
// took, at or after the returned instant. It is known only once the
// bucket's TTL has been read since we took the key, so that no term rests
// on a TTL older than itself.
//
//   - Released: its holder marked it free as it stopped: at once.
//   - Handed over: its holder offered us the key after its term ended, and
//     only when it could have marked a release (the holder checks this in
//     due before it offers): at once, as after a release.
//   - Absent (expired, or held and predicted expired): the broker expired
//     the previous holder's message, which it does only after that
//     holder's lease ended; Grace adds time for holders on slow clocks.
//   - Removed (a marker without a release mark, an empty value, a key that
//     vanished under a live lease, a recreated bucket): the holder that was
//     removed may not have noticed, and counts on its lease for up to a TTL
//     from when we learned of the removal, by the higher of the TTL we knew
//     then and the one read since.
func (m *machine) earlierHoldersGone() (time.Time, bool) {
	h := m.held()
	if !h.ttlRead {
		return time.Time{}, false
	}
	switch h.from {
	case KeyReleased:
		return h.wonAt, true
	case KeyRemoved:
		return later(h.fromSeenAt.Add(max(h.fromTTL, m.tm.ttl)), h.wonAt.Add(m.cfg.grace)), true
	default:
		return h.wonAt.Add(m.cfg.grace), true
	}
}

// Rule 2: a candidate may write to take the key from the returned instant,
// expecting the returned revision, when its view is trustworthy (see
// viewFresh), the bucket's TTL can hold elections, its health check (if
// any) passes, and it is not sitting out a stand-down it was forced into or
// a hand-over to another candidate.
//
//   - Absent: expect no message (revision 0).
//   - Released or removed: expect the marker's revision.
//   - Held: by the broker's expiry, from the predicted expiry, expecting no
//     message (the broker must have removed it); or over the holder's
//     revision once its lease has surely ended (lapseAt): the broker's
//     expiry can run hundreds of milliseconds late.
//
// A compare-and-swap that finds another revision fails: the view was old.
// Besides, a candidate offered the key by its holder writes over the
// holder's revision at once (due, askTakeOver): the holder's term has ended
// and it never leads on that revision again, so of the taker's write and
// the holder's next one, one lands.
func (m *machine) mayTake(now time.Time) (at time.Time, expect uint64, ok bool) {
	if !m.cfg.writes || m.ttlUnusable != nil || m.unhealthy != nil || m.nextCampaign.IsZero() {
		return time.Time{}, 0, false
	}
	v := m.view
	switch v.State {
	case KeyReleased, KeyRemoved:
		expect = v.Revision
	case KeyHeld:
		if lapse, ok := m.lapseAt(); ok && !now.Before(lapse) {
			expect = v.Revision
		}
	}
	return later(m.nextCampaign, m.sitOut.until), expect, true
}

// lapseAt returns when the lease of the holder the view shows has surely
// ended, and whether that can be told yet. The holder counts on its lease
// until it sent the write plus the TTL less a margin; we learned of the
// write after it was sent, so a TTL after we learned of it the lease is
// over, provided the TTL is the one the holder used: the longer of the TTL
// we knew then and one read since. Until such a read, only the broker's
// expiry frees the key.
func (m *machine) lapseAt() (time.Time, bool) {
	v := m.view
	if v.State != KeyHeld || v.Revision == 0 || v.ttl <= 0 || !m.ttlReadAt.After(v.seenAt) {
		return time.Time{}, false
	}
	return v.seenAt.Add(max(v.ttl, m.tm.ttl)), true
}

// Rule 3: a term begins when our write holds the key, earlier holders are
// gone (rule 1) and the lease has not ended; it ends at leaseEnd, when a
// write shows the key is not ours, when we stop, or when the broker cannot
// be used any more. A term's token is the revision of the write that took
// the key.
func (m *machine) termBegins(now time.Time) (time.Time, bool) {
	if m.phase != winning {
		return time.Time{}, false
	}
	h := m.held()
	if h.token == 0 && h.namesTerm {
		return time.Time{}, false // a later term of the hold: see hold.namesTerm
	}
	at, ok := m.earlierHoldersGone()
	if !ok || !at.Before(h.lease) || !now.Before(h.lease) {
		return time.Time{}, false
	}
	return at, true
}

// leaseEnd is the deadline of any term resting on a write sent at sent:
// the broker keeps the write a TTL from when it stored it, which is after
// it was sent; the margin covers clock rates and a TTL lowered unseen.
func leaseEnd(sent time.Time, tm timings) time.Time { return sent.Add(tm.ttl - tm.margin) }

// position orders messages of a bucket: the bucket's epoch (its stream's
// creation time, which changes when it is made again), then the revision,
// then the broker's write time.
type position struct {
	epoch    time.Time
	revision uint64
	written  time.Time
}

// isNews reports whether a message at p tells something the holder of
// known does not know: a later epoch, a later revision in the same epoch,
// or a revision at or below the known one written after it (a bucket made
// again whose creation time has not been read yet). A message at the known
// revision is news only if it is another message (see sameMessage).
func isNews(known, p position) bool {
	switch {
	case p.revision == 0:
		return true // the key has no message: the caller judges absence
	case !p.epoch.IsZero() && !known.epoch.IsZero() && !p.epoch.Equal(known.epoch):
		return p.epoch.After(known.epoch)
	case p.revision > known.revision:
		return true
	}
	return !p.written.IsZero() && !known.written.IsZero() && p.written.After(known.written)
}
