package streams

import (
	"fmt"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// The hand-over policy: where leadership should go, as one pure function
// (decide) of who stands, the candidate asking, how long its term has run
// on the election's clock, and its options. It reads no clock and asks the
// network nothing, so the steward and the simulator both ask it. Its
// answer enters the lease machine as a hand-over (inHandOver), or the
// successor a stop offers the key to (inStop).

// policyInput is everything the hand-over policy decides on.
type policyInput struct {
	self standing.Candidate   // the candidate asking, with its priority and health
	roll []standing.Candidate // who else stands, best first (standing.Rank); may hold self
	// fresh is set when roll is the answers to a question of who stands
	// just asked: a candidate that died without a word does not answer, so
	// only a fresh roll moves a term.
	fresh bool
	// leading is set while self leads a term, which has run for held.
	leading bool
	held    time.Duration
	minTerm time.Duration // WithMinTerm
}

// policy is what the hand-over policy says. At most one of moving,
// confirm and a positive wait holds.
type policy struct {
	// successor is whom a stop offers the key to: the best-ranked healthy
	// candidate on the roll other than self and not leaving; zero for none.
	successor handOver
	// moving is set when the leader hands its term over to to now, for the
	// reason why. Never to self, nor to one leaving or unhealthy, and
	// never within the minimum term.
	moving bool
	to     standing.Candidate
	why    string
	// confirm is set when a move is due on a roll that is not fresh: ask
	// who stands, and decide again on the answers.
	confirm bool
	// wait, when positive, is how long the minimum term has to run before
	// the move that is due: decide again then.
	wait time.Duration
}

// decide is the hand-over policy: whom a stop offers the key to and, for a
// leader, whether and when its term moves, and to whom: to a healthy
// candidate of a higher priority, or, while the leader is unhealthy, to
// any healthy one. Equal priorities never move a healthy leader, so
// leadership does not go back and forth between them.
func decide(in policyInput) policy {
	var p policy
	if c, ok := best(in, false); ok {
		p.successor = handOver{to: c.Identity, instance: c.Instance}
	}
	if !in.leading {
		return p
	}
	to, ok := best(in, true)
	switch {
	case !ok:
	case in.held < in.minTerm:
		p.wait = in.minTerm - in.held
	case !in.fresh:
		p.confirm = true
	default:
		p.moving, p.to, p.why = true, to, moveReason(in.self, to)
	}
	return p
}

// best returns the best-ranked healthy candidate on in.roll that is not
// in.self and not leaving, if any; with giveWay, only one that a leader
// in.self gives way to: of a higher priority, unless in.self is unhealthy.
func best(in policyInput, giveWay bool) (standing.Candidate, bool) {
	for _, c := range in.roll {
		yields := !in.self.Healthy || c.Priority > in.self.Priority // self gives way to c
		if c.Healthy && !c.Leaving && !sameAs(c, in.self) && (yields || !giveWay) {
			return c, true
		}
	}
	return standing.Candidate{}, false
}

// moveReason says why self gives way to to.
func moveReason(self, to standing.Candidate) string {
	if !self.Healthy {
		return fmt.Sprintf("%s is unhealthy and %s is healthy", self.Identity, to.Identity)
	}
	return fmt.Sprintf("%s has a higher priority (%d > %d)", to.Identity, to.Priority, self.Priority)
}

// sameAs reports whether c and o are the same candidate: the same
// instance, or, for answers without one, the same identity.
func sameAs(c, o standing.Candidate) bool {
	if c.Instance != "" || o.Instance != "" {
		return c.Instance == o.Instance && c.Identity == o.Identity
	}
	return c.Identity == o.Identity
}
