package streams

// State is where an election stands from one candidate's point of view.
type State uint

const (
	// UnknownState means the election is not running: not yet started, or stopped.
	UnknownState State = iota
	// CandidateState means the election runs and this candidate is not the leader.
	CandidateState
	// LeaderState means this candidate is the leader.
	LeaderState
)

// String returns "unknown", "candidate" or "leader".
func (s State) String() string {
	if s > LeaderState {
		s = UnknownState
	}
	return [...]string{"unknown", "candidate", "leader"}[s]
}

// Cause says why a term ended.
type Cause uint

const (
	// CauseReleased means the leader stopped (Stop or its context ended).
	CauseReleased Cause = iota + 1
	// CauseDeposed means someone else removed or overwrote the leader's key,
	// for example an operator forcing a stand-down.
	CauseDeposed
	// CauseDeadline means the leader could not renew before its local
	// deadline: the broker was unreachable or slow, or the process was paused.
	CauseDeadline
	// CauseExpired means the broker rejected a renewal because the key had
	// expired.
	CauseExpired
	// CauseClosed means the connection to the broker was closed for good.
	CauseClosed
	// CauseDenied means the broker refused a renewal for permissions
	// (ErrPermissionDenied): the leader stood down at once.
	CauseDenied
	// CauseHandedOver means the leader handed the election over to a
	// named candidate (Election.HandOver).
	CauseHandedOver
)

var causeNames = [...]string{CauseReleased: "released", CauseDeposed: "deposed", CauseDeadline: "deadline",
	CauseExpired: "expired", CauseClosed: "closed", CauseDenied: "denied", CauseHandedOver: "handed over"}

// String returns "released", "deposed", "deadline", "expired", "closed",
// "denied" or "handed over" ("unknown" for any other value).
func (c Cause) String() string {
	if c < Cause(len(causeNames)) && causeNames[c] != "" {
		return causeNames[c]
	}
	return "unknown"
}
