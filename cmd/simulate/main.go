// Command simulate runs the election's deterministic simulator
// (TestSimulate in providers/election/streams) without the race detector:
// CI's 2,000 seeds, many seeds for hours, or one seed replayed with its
// trace.
//
//	go run ./cmd/simulate                          # CI's 2,000 seeds
//	go run ./cmd/simulate -seeds 100000            # 100,000 seeds from seed 1
//	go run ./cmd/simulate -for 2h -from 1000000    # as many seeds as fit in two hours
//	go run ./cmd/simulate -seed 4874               # replay one seed, printing its events
//
// Each seed runs two to six candidates' lease machines and one or two
// observers on a simulated bucket for about two simulated minutes under
// faults drawn from the seed, and checks after every event that at most one
// candidate leads, fencing tokens grow, callbacks alternate, no candidate
// spins, a leader follows the faults and observers tell the truth. A seed
// replays exactly: a failure prints the command that replays it.
//
// The simulator is a test of the streams package, so this command runs it
// with the Go toolchain (go test), from the module's root.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

func main() {
	var (
		seeds = flag.Int("seeds", 2000, "how many seeds to run")
		from  = flag.Uint64("from", 1, "the first seed")
		seed  = flag.Uint64("seed", 0, "replay this one seed and print its events")
		dur   = flag.Duration("for", 0, "run seeds from -from until this much time has passed (overrides -seeds)")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./cmd/simulate [-seeds N] [-from SEED] [-for DURATION] [-seed SEED]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "simulate: unexpected argument %q: every setting is a flag (see -h)\n", flag.Arg(0))
		os.Exit(2)
	}
	if *seeds <= 0 && *dur <= 0 && *seed == 0 {
		fmt.Fprintln(os.Stderr, "simulate: -seeds must be above 0 (or give -for or -seed)")
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "simulate: %v\n", err)
		os.Exit(2)
	}
	args := []string{"test", "-count=1", "-timeout=0", "-run", "^TestSimulate$", "-v", "./providers/election/streams", "-args",
		"-sim.seeds=" + strconv.Itoa(*seeds), "-sim.from=" + strconv.FormatUint(*from, 10)}
	if *seed != 0 {
		args = append(args, "-sim.seed="+strconv.FormatUint(*seed, 10))
	}
	if *dur > 0 {
		args = append(args, "-sim.for="+dur.String())
	}
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if exit, ok := err.(*exec.ExitError); ok {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintf(os.Stderr, "simulate: go test: %v\n", err)
		os.Exit(2)
	}
}

// moduleRoot finds the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run it from the Conclave repository")
		}
		dir = parent
	}
}
