// Command scale measures Conclave at fleet scale with every part a separate
// OS process: a `conclave broker run` as provisioned (or three of them in a
// cluster), candidate processes that campaign in elections through the
// framework as apps do (conclave.New, fw.NewElection), and this program,
// which follows every election from outside through one watch over the
// whole bucket. At every size it also runs Choria's candidates (go-choria
// v0.30.2's election, in processes of bench/choria's binary, its own
// module) on a broker of their own with the same settings, so that the
// ratios Conclave/Choria come from one run. -choria-ttl gives Choria's
// broker a TTL of its own: half of -ttl compares the two at equal
// worst-case crash failover (about one TTL for Conclave, two for Choria).
//
// What users have:
//
//   - -names: flat (svc42), dotted (svc.42) or mixed (svc1, svc.2,
//     team2.svc3, …) election names;
//   - -shape one: -procs processes (3) each campaigning in every election;
//     -shape many: -procs processes (200) each campaigning in -keys (5) of
//     the elections, one connection each.
//
// It prints tables:
//
//   - side by side: time until every election has a leader, broker CPU
//     (cores, from /proc of the broker process) and consumers on the
//     bucket's stream, for Conclave and Choria, and their ratios;
//   - N elections x P processes: the same with the broker's RSS, messages in
//     and out per second at the broker (/varz), each candidate process's CPU
//     and RSS; and the cost per election, to show whether it stays flat as
//     N grows;
//   - memory per candidate at rest, for both libraries: each candidate
//     process's RSS over its candidates, and after a garbage collection
//     its live heap, goroutine stacks and goroutines over its candidates;
//   - per Conclave process: the messages on the bucket's subjects its
//     connection received (its watches' deliveries) against the writes to
//     its own keys (target ≤ 2×);
//   - SIGKILL of the Conclave process leading the most elections: time from
//     the kill until each of its elections has a new leader's write on the
//     watch (p50, p99, worst) against TTL + 1 s, and the same up to the new
//     leader's OnWon as the candidates report it;
//   - with -announce both, what Conclave's announcements of who is standing
//     cost: the same size run without them (internal/nostanding: no
//     announcements, answers or subscriptions), then with them, and the
//     broker's CPU, messages and bytes of the two windows side by side;
//   - a 3-node cluster (bucket R3, Conclave only): the same steady-state
//     figures, then SIGKILL of the stream's leader node, and the time until
//     every election is written again, with leader changes and possible
//     overlaps.
//
// With -profile DIR the brokers are bench/scale/pprofbroker (the CLI plus
// net/http/pprof on loopback) and a CPU profile of each over every
// steady-state window is written to DIR, with its `go tool pprof -top`.
// Conclave's candidate processes write theirs too: a CPU profile of the
// start (from "go" until every election led) and of the window, and heap
// profiles when built, when all led, and at both ends of the window, so
// that `go tool pprof -sample_index=alloc_space -base` gives what the start
// and the window allocated.
//
// Usage (from the module root; the full run takes a long while):
//
//	go run ./bench/scale                                 # 1,000, 3,000, 10,000 flat elections x 3, Choria beside; then the cluster at 2,000
//	go run ./bench/scale -sizes 10000 -cluster 0 -names dotted
//	go run ./bench/scale -sizes 10000 -cluster 0 -kill=false -settle 35s -choria-ttl 15s   # at equal worst-case crash failover
//	go run ./bench/scale -shape many -sizes 1000 -cluster 0          # 200 processes x 5 keys of 1,000
//	go run ./bench/scale -sizes 1500 -cluster 0 -choria=false -profile /tmp/prof
//	go run ./bench/scale -sizes 10000 -cluster 0 -procs 1 -copies 3 -kill=false   # every election's 3 candidates in one process
//	go run ./bench/scale -sizes 0 -cluster 2000          # only the cluster
//	go run ./bench/scale -sizes 10000 -cluster 0 -choria=false -kill=false -announce both   # what candidate announcements cost the broker
//	go run ./bench/scale -smoke                          # CI: 30 elections x 3, TTL 2 s, one kill, no Choria, announcements off then on
//
// It builds the CLI once (go build ./cmd/conclave, in the module root) unless
// -conclave names a binary, and bench/choria's binary for Choria's side,
// and runs everything in a temporary directory that it removes. Progress
// goes to standard error, tables to standard output. It exits non-zero when
// an election has no leader at a deadline or at the end, when a takeover
// looks like an overlap, or, with -max-failover (set by -smoke), when a
// failover takes longer. It needs Linux: it reads CPU and memory from /proc.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settings are the benchmark's flags.
type settings struct {
	sizes         []int         // elections per single-broker scenario
	cluster       int           // elections on the 3-node cluster; 0 skips it
	procs         int           // candidate processes
	copies        int           // candidates each process runs in each of its elections
	ttl           time.Duration // the bucket TTL the broker provisions
	choriaTTL     time.Duration // the bucket TTL of Choria's scenarios (from -ttl unless -choria-ttl)
	window        time.Duration // steady-state window
	settle        time.Duration // pause after every election has a leader, before the window
	electDeadline time.Duration // how long every election may take to get its first leader
	failDeadline  time.Duration // how long after a kill to wait for new leaders
	maxFailover   time.Duration // 0, or the failover beyond which the run fails
	kill          bool          // kill the busiest candidate process in each size
	conclave      string        // a prebuilt conclave binary, or "" to build one
	smoke         bool

	names   string // election names: namesFlat, namesDotted or namesMixed
	shape   string // shapeOne or shapeMany
	keys    int    // shapeMany: elections each candidate process campaigns in
	choria  bool   // run Choria's candidates side by side at every size
	profile string // a directory to write the brokers' CPU profiles over the window to, or ""

	// announce: Conclave's candidates with their announcements of who is
	// standing (announceOn), without (announceOff: internal/nostanding),
	// or both, one after the other, to measure what they cost.
	announce string
}

// Shapes of the fleet.
const (
	shapeOne  = "one"  // every candidate process campaigns in every election (-procs processes, 3 by default)
	shapeMany = "many" // -procs processes (200 by default) each campaign in -keys of the elections (5 by default)
)

// Values of -announce.
const (
	announceOn   = "on"
	announceOff  = "off"
	announceBoth = "both"
)

// announceModes are the -announce runs of Conclave at each size, in order:
// off before on, so that the run with announcements is not the one that
// starts on a cooler machine.
func (s settings) announceModes() []bool {
	switch s.announce {
	case announceOff:
		return []bool{false}
	case announceBoth:
		return []bool{false, true}
	}
	return []bool{true}
}

// perProc is how many of n elections each candidate process campaigns in.
func (s settings) perProc(n int) int {
	if s.shape == shapeMany {
		return s.keys
	}
	return n
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
	fs.IntVar(&s.procs, "procs", 3, "candidate processes: each campaigns in every election (-shape one), or in -keys of them (-shape many: default 200)")
	fs.StringVar(&s.names, "names", namesFlat, "election names: flat (svc42), dotted (svc.42) or mixed (svc1, svc.2, team2.svc3, …)")
	fs.StringVar(&s.shape, "shape", shapeOne, "one: every process in every election; many: -procs processes with -keys elections each, spread over the -sizes elections")
	fs.IntVar(&s.copies, "copies", 1, "candidates each process runs in each of its elections, under its one identity (-procs 1 -copies 3: every election's 3 candidates in one process)")
	fs.IntVar(&s.keys, "keys", 5, "with -shape many: elections each candidate process campaigns in")
	fs.BoolVar(&s.choria, "choria", true, "also run Choria's candidates (go-choria v0.30.2, built from bench/choria) at every size, on a broker of their own, after Conclave's; needs TTL >= 4s")
	fs.StringVar(&s.announce, "announce", announceOn, "Conclave's candidates announce who is standing (on), do not (off: no announcements, answers or subscriptions), or both: each size runs off then on, and a table gives what the announcements cost the broker")
	fs.StringVar(&s.profile, "profile", "", "write CPU profiles of the brokers over each steady-state window to this directory (runs bench/scale/pprofbroker, the CLI plus net/http/pprof on loopback)")
	fs.DurationVar(&s.ttl, "ttl", 30*time.Second, "election bucket TTL (plugin.choria.network.stream.leader_election_ttl)")
	fs.DurationVar(&s.choriaTTL, "choria-ttl", 0, "the bucket TTL of Choria's scenarios (default -ttl); half of -ttl compares the two at equal worst-case crash failover (Conclave's is about one TTL, Choria's about two)")
	fs.DurationVar(&s.window, "window", time.Minute, "steady-state measuring window")
	fs.DurationVar(&s.settle, "settle", 5*time.Second, "pause after every election has a leader, before the window")
	fs.DurationVar(&s.electDeadline, "elect-deadline", 0, "how long every election may take to get a leader (default 2 TTL + 1 min)")
	fs.DurationVar(&s.failDeadline, "failover-deadline", 0, "how long to wait for new leaders after a kill (default 2 TTL + 30 s)")
	fs.DurationVar(&s.maxFailover, "max-failover", 0, "fail the run when a failover takes longer than this (0: report only)")
	fs.BoolVar(&s.kill, "kill", true, "SIGKILL the candidate process leading the most elections, in each size")
	fs.StringVar(&s.conclave, "conclave", "", "path of a built conclave CLI (default: go build ./cmd/conclave)")
	fs.BoolVar(&s.smoke, "smoke", false, "CI run: 30 elections x 3 processes, TTL 2 s, 3 s window, one kill, no cluster, announcements off then on; fails beyond TTL + 3 s")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	procsSet := false
	fs.Visit(func(f *flag.Flag) { procsSet = procsSet || f.Name == "procs" })
	if s.shape == shapeMany && !procsSet {
		s.procs = 200
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
		def("choria", func() { s.choria = false })
		def("announce", func() { s.announce = announceBoth })
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
	case !slices.Contains(nameModes, s.names):
		return s, fmt.Errorf("-names %q: one of %s", s.names, strings.Join(nameModes, ", "))
	case s.announce != announceOn && s.announce != announceOff && s.announce != announceBoth:
		return s, fmt.Errorf("-announce %q: on, off or both", s.announce)
	case s.shape != shapeOne && s.shape != shapeMany:
		return s, fmt.Errorf("-shape %q: one or many", s.shape)
	case s.copies < 1 || s.copies > 100:
		return s, fmt.Errorf("-copies %d: from 1 to 100", s.copies)
	case s.shape == shapeOne && s.procs < 1, s.shape == shapeOne && s.procs*s.copies < 2:
		return s, fmt.Errorf("-procs %d -copies %d: at least 2 candidates per election", s.procs, s.copies)
	case s.shape == shapeMany && s.copies != 1:
		return s, errors.New("-copies: with -shape one only")
	case s.shape == shapeMany && (s.procs < 1 || s.keys < 1):
		return s, fmt.Errorf("-shape many: -procs %d and -keys %d must be at least 1", s.procs, s.keys)
	case s.shape == shapeMany && s.cluster > 0:
		return s, errors.New("-shape many: the cluster scenario runs the one shape only; add -cluster 0")
	case s.choria && s.choriaTTL == 0 && s.ttl < 4*time.Second:
		return s, fmt.Errorf("-ttl %v: Choria's election needs at least 4s; give -choria=false, or -choria-ttl 4s or more", s.ttl)
	case s.choriaTTL != 0 && !s.choria:
		return s, fmt.Errorf("-choria-ttl %v: Choria's candidates do not run (-choria=false); drop -choria-ttl", s.choriaTTL)
	case s.choriaTTL != 0 && (s.choriaTTL < 4*time.Second || s.choriaTTL%time.Second != 0):
		return s, fmt.Errorf("-choria-ttl %v: whole seconds, at least 4s (Choria's election needs 4s)", s.choriaTTL)
	case s.cluster < 0 || s.cluster > 99999:
		return s, fmt.Errorf("-cluster %d: from 0 to 99999", s.cluster)
	case s.ttl < time.Second || s.ttl%time.Second != 0:
		return s, fmt.Errorf("-ttl %v: whole seconds, at least 1s", s.ttl)
	case s.window <= 0:
		return s, fmt.Errorf("-window %v: must be positive", s.window)
	case len(s.sizes) == 0 && s.cluster == 0:
		return s, errors.New("nothing to run: -sizes and -cluster are both 0")
	}
	for _, n := range s.sizes {
		if s.shape == shapeMany && (s.keys > n || s.procs*s.keys < n) {
			return s, fmt.Errorf("-shape many: %d processes x %d keys cannot cover %d elections, each at most once per process (need keys <= elections <= procs x keys)", s.procs, s.keys, n)
		}
	}
	if s.choriaTTL == 0 {
		s.choriaTTL = s.ttl
	}
	if s.electDeadline <= 0 {
		s.electDeadline = 2*max(s.ttl, s.choriaTTL) + time.Minute
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
		if bin, err = buildCLIReported(ctx, dir); err != nil {
			return false, err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("finding this program to run its children: %w", err)
	}
	b := &bench{set: s, dir: dir, cli: bin, self: self}
	if s.choria {
		if b.choriaBin, err = buildChoria(ctx, dir); err != nil {
			return false, err
		}
	}
	if s.profile != "" {
		if err := os.MkdirAll(s.profile, 0o755); err != nil {
			return false, fmt.Errorf("-profile: %w", err)
		}
		if b.pprofBin, err = buildProfilingBroker(ctx, dir); err != nil {
			return false, err
		}
	}

	var results []*result
	for _, n := range s.sizes {
		for _, announce := range s.announceModes() {
			results = append(results, b.scenario(ctx, libConclave, n, 1, announce))
			if ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
		if s.choria {
			results = append(results, b.scenario(ctx, libChoria, n, 1, true))
			if ctx.Err() != nil {
				break
			}
		}
	}
	if s.cluster > 0 && ctx.Err() == nil {
		results = append(results, b.scenario(ctx, libConclave, s.cluster, 3, s.announce != announceOff))
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
