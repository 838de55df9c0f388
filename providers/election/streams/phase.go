package streams

import (
	"fmt"
	"slices"
)

// phase is where the campaign's hold of the key stands; mode says what the
// machine is about. The two say what the machine may do, each mode with
// its own due function (see machine.due); everything else is data for them.
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

var phaseNames = [...]string{
	candidate: "candidate", winning: "winning", leading: "leading", doomed: "doomed",
}

func (p phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
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
func (p phase) canMove(next phase) bool { return slices.Contains(phaseMoves[p], next) }

// mode is what the machine is about (see phase).
type mode uint8

const (
	// running: campaign for the key, or keep it and its term (phase says
	// which: dueCandidate, dueHolder).
	running mode = iota
	// taking: an offer of the key was taken up: the write over taking.rev
	// is due or under way (dueTaking).
	taking
	// handingOver: a hand-over was asked for: the term ends, the key is
	// offered to handOver.to, or else released naming it (dueHandingOver).
	handingOver
	// givingUp: the bucket's TTL can no longer hold elections: the key is
	// released, then the campaign waits until it can (due).
	givingUp
	// stopping: Stop was asked for, or the campaign cannot go on: the term
	// ends, the key is offered to the standby named on stop (handOver,
	// orNext) or released, the watch stops (dueStopping).
	stopping
	// finished: nothing is left to do; the driver ends.
	finished
)

var modeNames = [...]string{
	running: "running", taking: "taking", handingOver: "handing over",
	givingUp: "giving up", stopping: "stopping", finished: "finished",
}

func (md mode) String() string {
	if int(md) < len(modeNames) {
		return modeNames[md]
	}
	return fmt.Sprintf("mode(%d)", int(md))
}

// modeMoves lists every change of mode the machine may make. Stopping may
// come from any mode but finished; a mode whose work is done returns to
// running; giving up ends a hand-over or an offer taken up first (giveUp).
var modeMoves = map[mode][]mode{
	running:     {taking, handingOver, givingUp, stopping},
	taking:      {running, stopping},
	handingOver: {running, stopping},
	givingUp:    {running, stopping},
	stopping:    {finished},
	finished:    {},
}

// canEnter reports whether the machine may go from mode md to next.
func (md mode) canEnter(next mode) bool { return slices.Contains(modeMoves[md], next) }
