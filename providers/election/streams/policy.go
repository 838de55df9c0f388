package streams

import (
	"fmt"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// policyInput is everything the hand-over policy decides on.
type policyInput struct {
	self standing.Candidate   // the candidate asking, with its priority and health
	roll []standing.Candidate // who else stands, best first (standing.Rank); may hold self
	// fresh: roll holds the answers to a question just asked. A candidate
	// that died without a word does not answer, so only a fresh roll moves
	// a term.
	fresh bool
	// leading: self leads a term, which has run for held.
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
	// moving: hand the term over to to now, for the reason why. Never to
	// self, one leaving or unhealthy, nor within the minimum term.
	moving bool
	to     standing.Candidate
	why    string
	// confirm: a move is due on a roll that is not fresh; ask who stands
	// and decide again on the answers.
	confirm bool
	// wait, when positive, is how long the minimum term has yet to run
	// before the move that is due.
	wait time.Duration
}

// decide is the hand-over policy, pure (no clock, no network: the steward
// and the simulator both ask it): whom a stop offers the key to and, for a
// leader, whether and when its term moves to a healthy candidate of a
// higher priority, or, while the leader is unhealthy, to any healthy one.
// Equal priorities never move a healthy leader, so leadership does not go
// back and forth between them.
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
	case !in.self.Healthy:
		p.moving, p.to = true, to
		p.why = fmt.Sprintf("%s is unhealthy and %s is healthy", in.self.Identity, to.Identity)
	default:
		p.moving, p.to = true, to
		p.why = fmt.Sprintf("%s has a higher priority (%d > %d)", to.Identity, to.Priority, in.self.Priority)
	}
	return p
}

// best returns the best-ranked healthy candidate on in.roll that is not
// in.self and not leaving, if any; with giveWay, only one a leader in.self
// gives way to: of a higher priority, unless in.self is unhealthy.
func best(in policyInput, giveWay bool) (standing.Candidate, bool) {
	for _, c := range in.roll {
		yields := !in.self.Healthy || c.Priority > in.self.Priority
		if c.Healthy && !c.Leaving && !sameAs(c, in.self) && (yields || !giveWay) {
			return c, true
		}
	}
	return standing.Candidate{}, false
}

// sameAs reports whether c and o are the same candidate: the same
// identity and instance (or both without one).
func sameAs(c, o standing.Candidate) bool {
	return c.Identity == o.Identity && c.Instance == o.Instance
}
