package streams

import "fmt"

// phase is where a campaign stands. It is the one field that says what the
// campaign may do; everything else is data for the phase.
type phase int

const (
	// candidate: the key is not ours; campaign when the view says it is
	// free or predicted to have expired.
	candidate phase = iota
	// winning: our write holds the key, but the term waits until it is
	// safe to begin (a deposed leader or an unchecked TTL may still count
	// on the key) and until the TTL has been read since the write.
	winning
	// leading: our write holds the key and a term runs.
	leading
	// doomed: the key may be ours, but a renewal was refused after an
	// earlier one's outcome was unknown: lead until the lease ends, renew
	// nothing, then stand down.
	doomed
)

func (p phase) String() string {
	switch p {
	case candidate:
		return "candidate"
	case winning:
		return "winning"
	case leading:
		return "leading"
	case doomed:
		return "doomed"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// holds reports whether our write holds the key in phase p.
func (p phase) holds() bool { return p != candidate }

// phaseMoves lists every transition a campaign may make: the rules in one
// place. A term runs only in leading and doomed (a doomed leader keeps the
// term it had until the lease ends).
var phaseMoves = map[phase][]phase{
	candidate: {winning},
	winning:   {leading, doomed, candidate},
	leading:   {winning, doomed, candidate},
	doomed:    {candidate},
}

// canMove reports whether a campaign may go from p to next.
func (p phase) canMove(next phase) bool {
	for _, q := range phaseMoves[p] {
		if q == next {
			return true
		}
	}
	return false
}
