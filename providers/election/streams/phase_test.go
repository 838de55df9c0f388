package streams

import (
	"testing"
)

// TestPhaseAndModeMovesAreTheOnlyOnes: the machine's phases and modes
// change only along the moves listed.
func TestPhaseAndModeMovesAreTheOnlyOnes(t *testing.T) {
	t.Parallel()
	all := []phase{candidate, winning, leading, doomed}
	allowed := map[[2]phase]bool{
		{candidate, winning}: true,
		{winning, leading}:   true, {winning, doomed}: true, {winning, candidate}: true,
		{leading, winning}: true, {leading, doomed}: true, {leading, candidate}: true,
		{doomed, candidate}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := from.canMove(to); got != allowed[[2]phase{from, to}] {
				t.Errorf("%s -> %s allowed %v, want %v", from, to, got, !got)
			}
		}
	}
	if candidate.holds() || !winning.holds() || !leading.holds() || !doomed.holds() {
		t.Error("holds() is wrong")
	}
	modes := []mode{running, taking, handingOver, givingUp, stopping, finished}
	for _, from := range modes {
		for _, to := range modes {
			want := from != finished && from != stopping && to == stopping || // any mode may stop
				from == running && (to == taking || to == handingOver || to == givingUp) ||
				(from == taking || from == handingOver) && to == running ||
				from == givingUp && to == running ||
				from == stopping && to == finished
			if got := from.canEnter(to); got != want {
				t.Errorf("mode %s -> %s allowed %v, want %v", from, to, got, want)
			}
		}
	}
}
