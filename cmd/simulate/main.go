// Command simulate runs Conclave's deterministic simulators without the
// race detector: the election's (TestSimulate) and the shard group's
// (TestSimulateShards), both in providers/election/streams. It runs CI's
// 2,000 seeds of each, many seeds for hours, or one seed replayed with its
// trace.
//
//	go run ./cmd/simulate                          # CI's 2,000 seeds of each simulator
//	go run ./cmd/simulate -shards -seeds 100000    # 100,000 shard group seeds from seed 1
//	go run ./cmd/simulate -elections -for 2h -from 1000000    # as many election seeds as fit in two hours
//	go run ./cmd/simulate -seed 4874               # replay one election seed, printing its events
//	go run ./cmd/simulate -shards -seed 4874       # replay one shard group seed
//
// Each election seed runs two to six candidates' lease machines (in one
// seed in four, copies of two identities told apart by their instances)
// and one or two observers on a simulated bucket for about two simulated
// minutes under faults drawn from the seed, and checks after every event that at most one
// candidate leads, fencing tokens grow, callbacks alternate, no candidate
// spins, a leader follows the faults and observers tell the truth.
//
// Each shard group seed runs one to twelve shards over two to five members,
// every shard an election of the same lease machine and every member
// deciding with the shard group's own code (internal/shardplan), while
// members join, stop, crash, pause and turn unhealthy, under the
// election's faults. It checks after every event that each shard has at
// most one holder and growing tokens; once quiet after the last fault, that
// each healthy member holds between the floor and the ceiling of its share
// and nothing moves; and after one more join, leave, crash or failing
// health check, that no shard moves twice and the spread is even again.
//
// A seed replays exactly: a failure prints the command that replays it.
// The simulators are tests of the streams package, so this command runs
// them with the Go toolchain (go test), from the module's root.
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
		seeds     = flag.Int("seeds", 2000, "how many seeds to run (of each simulator)")
		from      = flag.Uint64("from", 1, "the first seed")
		seed      = flag.Uint64("seed", 0, "replay this one seed and print its events (an election seed unless -shards)")
		dur       = flag.Duration("for", 0, "run seeds from -from until this much time has passed (overrides -seeds; each simulator in turn)")
		shards    = flag.Bool("shards", false, "run only the shard group simulator")
		elections = flag.Bool("elections", false, "run only the election simulator")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./cmd/simulate [-shards | -elections] [-seeds N] [-from SEED] [-for DURATION] [-seed SEED]\n\n")
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
	if *shards && *elections {
		fmt.Fprintln(os.Stderr, "simulate: give -shards or -elections, not both (neither runs both)")
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "simulate: %v\n", err)
		os.Exit(2)
	}
	run := "^(TestSimulate|TestSimulateShards)$"
	switch {
	case *shards:
		run = "^TestSimulateShards$"
	case *elections, *seed != 0:
		run = "^TestSimulate$"
	}
	args := []string{"test", "-count=1", "-timeout=0", "-run", run, "-v", "./providers/election/streams", "-args",
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
