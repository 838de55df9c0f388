package streams

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/internal/errs"
)

// KeyState is what the latest message of an election key says about the
// election, as ReadEntry reads it.
type KeyState int

const (
	// KeyAbsent means the key has no message: never written, or expired.
	KeyAbsent KeyState = iota
	// KeyHeld means the value is a leader's identity.
	KeyHeld
	// KeyReleased means the leader stepped down and marked the key free:
	// the next candidate may lead at once.
	KeyReleased
	// KeyRemoved means someone other than the leader removed or blanked the
	// key (a marker without a release mark, or an empty value). The leader
	// may not have noticed, so the next leader waits a TTL before it acts.
	KeyRemoved
)

// String returns "absent", "held", "released" or "removed".
func (s KeyState) String() string {
	if s < KeyAbsent || s > KeyRemoved {
		s = KeyAbsent
	}
	return [...]string{"absent", "held", "released", "removed"}[s]
}

// releasePrefix starts the payload of a holder's release marker: a delete
// marker over the holder's own last write, naming the holder. nats.go's KV
// watcher hands the payload to watchers as the Value, while Get and Create
// see the key deleted, so Choria's candidates take a released key at once
// too. Markers of `nats kv del`, kv.Delete or kv.Purge carry no payload.
const releasePrefix = "released by "

// releasePayload is the payload of identity's release marker.
func releasePayload(identity string) []byte { return []byte(releasePrefix + identity) }

// A release that hands the election over to a named candidate adds two
// lines to the payload (identities hold no control characters):
//
//	released by <leader>
//	hand over to <candidate>
//	within <duration>
//
// The other Conclave candidates leave the key to the named one for the
// duration (see Election.HandOver); Choria's candidates see a release. A
// release to one copy of an identity names its instance in a header
// (keymsg.HandOverInstanceHeader), which earlier builds ignore.
const (
	handOverPrefix = "hand over to "
	withinPrefix   = "within "
)

// handOverPayload is the payload of identity's release marker handing the
// election over to to, which has within to take the key.
func handOverPayload(identity, to string, within time.Duration) []byte {
	return []byte(releasePrefix + identity + "\n" + handOverPrefix + to + "\n" + withinPrefix + within.String())
}

// readRelease reads a release marker's payload: who released, and whom it
// hands over to within what time, if anyone; ok is false when the payload
// is not a holder's release.
func readRelease(payload string) (by, to string, within time.Duration, ok bool) {
	lines := strings.Split(payload, "\n")
	by, ok = strings.CutPrefix(lines[0], releasePrefix)
	if !ok || errs.ValidateIdentity(by) != nil {
		return "", "", 0, false
	}
	switch len(lines) {
	case 1:
		return by, "", 0, true
	case 3:
		to, okTo := strings.CutPrefix(lines[1], handOverPrefix)
		d, okWithin := strings.CutPrefix(lines[2], withinPrefix)
		within, err := time.ParseDuration(d)
		if okTo && okWithin && err == nil && within > 0 && errs.ValidateIdentity(to) == nil {
			return by, to, within, true
		}
	}
	return "", "", 0, false
}

// Entry is one election key's latest message, read as an election.
type Entry struct {
	// Key is the election.
	Key string
	// State says what the message means.
	State KeyState
	// Leader is the leader's identity when State is KeyHeld.
	Leader string
	// ReleasedBy is the leader that stepped down, when State is KeyReleased.
	ReleasedBy string
	// HandOverTo is the candidate a released election was handed over to,
	// if any, and HandOverWithin how long it has to take the key before
	// the other candidates do.
	HandOverTo     string
	HandOverWithin time.Duration
	// HandOverInstance is the instance of HandOverTo the release names, or
	// "" when it names the identity alone (any of its copies).
	HandOverInstance string
	// Revision is the message's revision (stream sequence); 0 when absent.
	Revision uint64
	// Written is when the broker stored the message; zero when absent.
	Written time.Time
	// Operation is the KV operation of the message: put, delete or purge.
	Operation jetstream.KeyValueOp
	// TTL is the message's Nats-TTL header (whole seconds), which
	// Conclave's candidates write where the bucket allows it; 0 when it has
	// none or the read cannot tell (nats.go's KV API hides headers). The
	// broker expires the message at the earlier of this and the bucket's
	// TTL: raising the bucket's TTL does not extend it.
	TTL time.Duration
	// Instance is the candidate instance that wrote the message (see
	// Election.Instance), or "" when its writer does not say: Choria's
	// candidates, older versions, or a read through the KV API alone.
	Instance string
	// term is what the writer said of the term the message belongs to.
	term termMark
	// write is the number a write that takes the key carries (action.write).
	write uint64
}

// termMark is what a Conclave candidate's write says of its term (the
// Conclave-Term header): the token of the running term it renews; that it
// begins a term as it lands (its revision is the token); or that it holds
// the key for a term not yet begun. The zero mark says nothing.
type termMark struct {
	token  uint64
	begins bool
	waits  bool
}

// said reports whether the writer said anything of its term.
func (t termMark) said() bool { return t != termMark{} }

// readTermMark reads the Conclave-Term header's value.
func readTermMark(v string) termMark {
	switch v {
	case keymsg.TermBegins:
		return termMark{begins: true}
	case keymsg.TermWaits:
		return termMark{waits: true}
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 {
		return termMark{token: n}
	}
	return termMark{}
}

// header is the Conclave-Term header's value for t.
func (t termMark) header() string {
	switch {
	case t.begins:
		return keymsg.TermBegins
	case t.waits:
		return keymsg.TermWaits
	case t.token != 0:
		return strconv.FormatUint(t.token, 10)
	}
	return ""
}

// ReadEntry reads what an entry of a watch, a Get or a History means for the
// election. A nil entry means the key is absent.
func ReadEntry(ent jetstream.KeyValueEntry) Entry {
	if ent == nil {
		return Entry{State: KeyAbsent}
	}
	e := Entry{Key: ent.Key(), Revision: ent.Revision(), Written: ent.Created(), Operation: ent.Operation()}
	if withTTL, ok := ent.(interface{ MsgTTL() time.Duration }); ok {
		e.TTL = withTTL.MsgTTL()
	}
	var st keymsg.Stamp
	if stamped, ok := ent.(interface{ Stamp() keymsg.Stamp }); ok {
		st = stamped.Stamp()
		if errs.ValidateIdentity(st.Instance) == nil {
			e.Instance, e.term = st.Instance, readTermMark(st.Term)
			e.write, _ = strconv.ParseUint(st.Write, 16, 64)
		}
	}
	e.State = KeyRemoved // a purge, an empty value or an unmarked delete
	if e.Operation == jetstream.KeyValueDelete {
		if by, to, within, ok := readRelease(string(ent.Value())); ok {
			e.State, e.ReleasedBy, e.HandOverTo, e.HandOverWithin = KeyReleased, by, to, within
			if to != "" && errs.ValidateIdentity(st.HandOverInstance) == nil {
				e.HandOverInstance = st.HandOverInstance
			}
		}
	} else if e.Operation == jetstream.KeyValuePut && len(ent.Value()) > 0 {
		e.State, e.Leader = KeyHeld, string(ent.Value())
	}
	return e
}

// Token is the fencing token of the term a held message belongs to, as its
// writer says in the Conclave-Term header: the running term's token, or the
// message's own revision for a write that begins a term. It is 0 when the
// writer does not say (Choria's candidates, a read through the KV API
// alone) or no term runs yet.
func (e Entry) Token() uint64 {
	switch {
	case e.State != KeyHeld:
		return 0
	case e.term.begins:
		return e.Revision
	}
	return e.term.token
}

// Describe says in a few words what the entry means: "held by X",
// "released by X", "removed (deleted)", "removed (purged)", "removed
// (emptied)" or "absent".
func (e Entry) Describe() string {
	switch {
	case e.State == KeyHeld:
		return "held by " + e.Leader
	case e.State == KeyReleased && e.HandOverTo != "":
		return "released by " + e.ReleasedBy + ", handed over to " + e.HandOverTo
	case e.State == KeyReleased:
		return "released by " + e.ReleasedBy
	case e.State != KeyRemoved:
		return "absent"
	case e.Operation == jetstream.KeyValuePurge:
		return "removed (purged)"
	case e.Operation == jetstream.KeyValuePut:
		return "removed (emptied)"
	}
	return "removed (deleted)"
}

// opPurge is the operation of a key gone without a marker, as by a purge.
const opPurge = jetstream.KeyValuePurge
