package streams

import (
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// The hand-over policy: where leadership should go, as a pure function of
// who stands (the roll), the candidate asking, and how long its term has
// run on the election's clock. The steward asks it with what announcements
// and answers told; the simulator asks it with the world it simulates. Its
// answer enters the lease machine as an input: a hand-over (inHandOver),
// or the successor a stop offers the key to (inStop).

// successorOf names the standby a stopping leader self offers the key to:
// the best-ranked healthy candidate on roll (see standing.Rank) that is
// not self and not leaving, if any.
func successorOf(self standing.Candidate, roll []standing.Candidate) (standing.Candidate, bool) {
	for _, c := range roll {
		if c.Healthy && !c.Leaving && !sameAs(c, self) {
			return c, true
		}
	}
	return standing.Candidate{}, false
}

// moveOf decides whether a leader self, whose term has run for held,
// should hand over, and to whom: to the best-ranked healthy candidate of
// a higher priority, or, while self is unhealthy, to the best-ranked
// healthy one; never to itself or to one leaving, so that equal
// priorities never move. A move waits until the term has lasted minTerm:
// until then ok is false and wait says how long is left (0 when there is
// nowhere to move).
func moveOf(self standing.Candidate, roll []standing.Candidate, held, minTerm time.Duration) (to standing.Candidate, wait time.Duration, ok bool) {
	for _, c := range roll {
		if !c.Healthy || c.Leaving || sameAs(c, self) || self.Healthy && c.Priority <= self.Priority {
			continue
		}
		if held < minTerm {
			return standing.Candidate{}, minTerm - held, false
		}
		return c, 0, true // the roll is sorted best first
	}
	return standing.Candidate{}, 0, false
}

// sameAs reports whether c and o are the same candidate: the same
// instance, or, for answers without one, the same identity.
func sameAs(c, o standing.Candidate) bool {
	if c.Instance != "" || o.Instance != "" {
		return c.Instance == o.Instance && c.Identity == o.Identity
	}
	return c.Identity == o.Identity
}
