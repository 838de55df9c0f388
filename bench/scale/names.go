package main

import (
	"fmt"
	"os"
	"strings"
)

// Election names, as users have them. Before issue 18 every key was
// scale.e00001, …: names sharing their first token, which is the one case
// the per-prefix shared watches serve.
const (
	namesFlat   = "flat"   // svc1, svc2, …: one token each, nothing shared
	namesDotted = "dotted" // svc.1, svc.2, …: every name under one first token
	namesMixed  = "mixed"  // a third flat (svc1), a third dotted under svc. (svc.2), a third under 50 other prefixes (team3.svc3)
)

// nameModes lists the -names values.
var nameModes = []string{namesFlat, namesDotted, namesMixed}

// keyName is the election key of index i (0-based) under names mode.
func keyName(mode string, i int) string {
	n := i + 1
	switch mode {
	case namesDotted:
		return fmt.Sprintf("svc.%d", n)
	case namesMixed:
		switch i % 3 {
		case 0:
			return fmt.Sprintf("svc%d", n)
		case 1:
			return fmt.Sprintf("svc.%d", n)
		default:
			return fmt.Sprintf("team%d.svc%d", i%50, n)
		}
	default:
		return fmt.Sprintf("svc%d", n)
	}
}

// keyNames returns the n election keys of names mode.
func keyNames(mode string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = keyName(mode, i)
	}
	return out
}

// assignKeys spreads procs processes over the n keys of names, each
// process campaigning in perProc of them: candidacy j of process p is key
// (p*perProc + j) mod n, so that with procs*perProc = c*n every key has c
// candidates, in c different processes (perProc ≤ n). With perProc = n
// every process campaigns in every key, the "one process holds many
// elections" shape.
func assignKeys(names []string, procs, perProc int) [][]string {
	out := make([][]string, procs)
	for p := range out {
		out[p] = make([]string, perProc)
		for j := range perProc {
			out[p][j] = names[(p*perProc+j)%len(names)]
		}
	}
	return out
}

// writeKeys writes keys to path, one a line, for a candidate process.
func writeKeys(path string, keys []string) error {
	if err := os.WriteFile(path, []byte(strings.Join(keys, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readKeys reads a file written by writeKeys.
func readKeys(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the election keys: %w", err)
	}
	var keys []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no election keys", path)
	}
	return keys, nil
}
