package faults

import (
	"slices"
	"testing"
)

// TestDoublePairsAreFaultsOfTheirModes: each pair Double draws from is made
// of two faults that the modes it runs in inject on their own, so that a
// run with -kinds double injects nothing its mode lacks.
func TestDoublePairsAreFaultsOfTheirModes(t *testing.T) {
	for _, p := range doublePairs {
		if len(p.modes) == 0 {
			t.Errorf("%s+%s runs in no mode", p.first, p.second)
		}
		for _, m := range p.modes {
			ks := Kinds(m)
			for _, k := range []Kind{p.first, p.second} {
				if k == Double || !slices.Contains(ks, k) {
					t.Errorf("%s+%s in mode %s: %s is not one of that mode's faults %v", p.first, p.second, m, k, ks)
				}
			}
		}
	}
}
