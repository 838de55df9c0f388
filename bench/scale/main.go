// Command scale measures Conclave at fleet scale with every part a separate
// OS process: a `conclave broker run` as provisioned (or three of them in a
// cluster), candidate processes that each campaign in every one of N
// elections through the framework as apps do (conclave.New, fw.NewElection),
// and this program, which follows every election from outside through one
// watch over the whole bucket. It prints tables:
//
//   - N elections x P processes: time until every election has a leader;
//     then at steady state the broker's CPU and RSS, messages in and out per
//     second at the broker (/varz), consumers on the stream, and each
//     candidate process's CPU and RSS; and the cost per election, to show
//     whether it stays flat as N grows.
//   - SIGKILL of the process leading the most elections: time from the kill
//     until each of its elections has a new leader's write on the watch
//     (p50, p99, worst) against TTL + 1 s, and the same up to the new
//     leader's OnWon as the candidates report it.
//   - A 3-node cluster (bucket R3): the same steady-state figures, then
//     SIGKILL of the stream's leader node, and the time until every election
//     is written again, with leader changes and possible overlaps.
//
// Usage (from the module root; the full run takes a long while):
//
//	go run ./bench/scale                                 # 1,000, 3,000, 10,000 elections, then the cluster at 2,000
//	go run ./bench/scale -sizes 1000,3000 -cluster 0     # some sizes, no cluster
//	go run ./bench/scale -sizes 0 -cluster 2000          # only the cluster
//	go run ./bench/scale -sizes 300 -cluster 300 -ttl 10s -window 20s   # a small trial
//	go run ./bench/scale -smoke                          # CI: 30 elections x 3, TTL 2 s, one kill
//
// It builds the CLI once (go build ./cmd/conclave, in the module root) unless
// -conclave names a binary, and runs everything in a temporary directory
// that it removes. Progress goes to standard error, tables to standard
// output. It exits non-zero when an election has no leader at a deadline
// or at the end, when a takeover looks like an overlap, or, with
// -max-failover (set by -smoke), when a failover takes longer. It needs
// Linux: it reads CPU and memory from /proc.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// keyPrefix starts every election key the benchmark uses: scale.e00001, …
const keyPrefix = "scale.e"

// settings are the benchmark's flags.
type settings struct {
	sizes         []int         // elections per single-broker scenario
	cluster       int           // elections on the 3-node cluster; 0 skips it
	procs         int           // candidate processes
	ttl           time.Duration // the bucket TTL the broker provisions
	window        time.Duration // steady-state window
	settle        time.Duration // pause after every election has a leader, before the window
	electDeadline time.Duration // how long every election may take to get its first leader
	failDeadline  time.Duration // how long after a kill to wait for new leaders
	maxFailover   time.Duration // 0, or the failover beyond which the run fails
	kill          bool          // kill the busiest candidate process in each size
	conclave      string        // a prebuilt conclave binary, or "" to build one
	smoke         bool
}

func main() {
	if childRequested(os.Args[1:]) {
		if err := runChild(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "scale child:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale bench:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// parseFlags reads the command line into settings.
func parseFlags(args []string) (settings, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var s settings
	sizes := fs.String("sizes", "1000,3000,10000", "comma-separated election counts, one single-broker scenario each; 0 for none")
	fs.IntVar(&s.cluster, "cluster", 2000, "elections on the 3-node cluster (R3); 0 skips the cluster")
	fs.IntVar(&s.procs, "procs", 3, "candidate processes, each campaigning in every election")
	fs.DurationVar(&s.ttl, "ttl", 30*time.Second, "election bucket TTL (plugin.choria.network.stream.leader_election_ttl)")
	fs.DurationVar(&s.window, "window", time.Minute, "steady-state measuring window")
	fs.DurationVar(&s.settle, "settle", 5*time.Second, "pause after every election has a leader, before the window")
	fs.DurationVar(&s.electDeadline, "elect-deadline", 0, "how long every election may take to get a leader (default 2 TTL + 1 min)")
	fs.DurationVar(&s.failDeadline, "failover-deadline", 0, "how long to wait for new leaders after a kill (default 2 TTL + 30 s)")
	fs.DurationVar(&s.maxFailover, "max-failover", 0, "fail the run when a failover takes longer than this (0: report only)")
	fs.BoolVar(&s.kill, "kill", true, "SIGKILL the candidate process leading the most elections, in each size")
	fs.StringVar(&s.conclave, "conclave", "", "path of a built conclave CLI (default: go build ./cmd/conclave)")
	fs.BoolVar(&s.smoke, "smoke", false, "CI run: 30 elections x 3 processes, TTL 2 s, 3 s window, one kill, no cluster; fails beyond TTL + 3 s")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if s.smoke {
		// Only what the flags given explicitly do not override.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("sizes", func() { *sizes = "30" })
		def("cluster", func() { s.cluster = 0 })
		def("ttl", func() { s.ttl = 2 * time.Second })
		def("window", func() { s.window = 3 * time.Second })
		def("settle", func() { s.settle = time.Second })
		def("elect-deadline", func() { s.electDeadline = 30 * time.Second })
		def("failover-deadline", func() { s.failDeadline = s.ttl + 15*time.Second })
		def("max-failover", func() { s.maxFailover = s.ttl + 3*time.Second })
	}
	for _, f := range strings.Split(*sizes, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 99999 {
			return s, fmt.Errorf("-sizes: %q is not an election count from 0 to 99999", f)
		}
		if n > 0 {
			s.sizes = append(s.sizes, n)
		}
	}
	switch {
	case s.procs < 2:
		return s, fmt.Errorf("-procs %d: at least 2, so that a killed leader has a successor", s.procs)
	case s.cluster < 0 || s.cluster > 99999:
		return s, fmt.Errorf("-cluster %d: from 0 to 99999", s.cluster)
	case s.ttl < time.Second || s.ttl%time.Second != 0:
		return s, fmt.Errorf("-ttl %v: whole seconds, at least 1s", s.ttl)
	case s.window <= 0:
		return s, fmt.Errorf("-window %v: must be positive", s.window)
	case len(s.sizes) == 0 && s.cluster == 0:
		return s, errors.New("nothing to run: -sizes and -cluster are both 0")
	}
	if s.electDeadline <= 0 {
		s.electDeadline = 2*s.ttl + time.Minute
	}
	if s.failDeadline <= 0 {
		s.failDeadline = 2*s.ttl + 30*time.Second
	}
	return s, nil
}

// run runs every scenario the flags ask for and prints the tables. It
// reports false when a scenario found a failure (after printing it), and an
// error when the benchmark itself could not run.
func run() (bool, error) {
	s, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if err := checkPlatform(); err != nil {
		return false, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	dir, err := os.MkdirTemp("", "conclave-scale-")
	if err != nil {
		return false, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)

	bin := s.conclave
	if bin == "" {
		if bin, err = buildCLI(ctx, dir); err != nil {
			return false, err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("finding this program to run its children: %w", err)
	}
	b := &bench{set: s, dir: dir, cli: bin, self: self}

	var results []*result
	for _, n := range s.sizes {
		res := b.scenario(ctx, n, 1)
		results = append(results, res)
		if ctx.Err() != nil {
			break
		}
	}
	if s.cluster > 0 && ctx.Err() == nil {
		results = append(results, b.scenario(ctx, s.cluster, 3))
	}
	printReport(os.Stdout, s, results, time.Since(started))
	ok := true
	for _, r := range results {
		if len(r.failures) > 0 {
			ok = false
		}
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return ok, nil
}
