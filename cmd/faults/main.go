// Command faults runs the fault harness (package internal/faults): real
// broker and candidate processes, faults injected at random times, and a
// checker over everything they recorded. It prints a summary table and can
// draw the runs as an SVG timeline.
//
//	go run ./cmd/faults -short                      # every fault kind once, single node and cluster (CI)
//	go run ./cmd/faults -duration 10m               # random faults for 10 minutes per mode
//	go run ./cmd/faults -short -svg docs/img/fault-timeline.svg
//
// It exits with status 1 when the checker finds a violation, 2 when the run
// could not be carried out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/conclave-io/conclave/internal/faults"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "inject each fault kind once per mode, then stop (the CI mode)")
	duration := fs.Duration("duration", 2*time.Minute, "how long to inject random faults, per mode (ignored with -short)")
	mode := fs.String("mode", "both", "brokers: single, cluster or both")
	ttl := fs.Duration("ttl", faults.DefaultTTL, "election bucket TTL")
	minTerm := fs.Duration("min-term", 0, "how long a leader leads before it hands over to a better-ranked candidate (0: twice the TTL)")
	hosts := fs.Int("hosts", 4, "candidate processes")
	workers := fs.Int("workers", 3, "candidates per process, sharing its identity")
	shardCount := fs.Int("shards", 8, "shards of the shard group every process joins beside its elections (-1: none)")
	seed := fs.Uint64("seed", 0, "seed for the choice and timing of faults (0: from the clock)")
	out := fs.String("out", "", "directory for the run's files (default: a temporary one, removed after a passing run)")
	keep := fs.Bool("keep", false, "keep the temporary directory after a passing run")
	svg := fs.String("svg", "", "write the timeline of the runs to this SVG file")
	settle := fs.Duration("settle", 0, "keep observing this long after the last fault, once a leader works again")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to inject (default: all of each mode's)")
	quiet := fs.Bool("q", false, "print only the summary")
	recheck := fs.String("recheck", "", "run nothing: check the records a kept run left in this -out directory again")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *recheck != "" {
		return report(*recheck, args, *svg, stdout, stderr)
	}
	var modes []faults.Mode
	switch *mode {
	case "both":
		modes = []faults.Mode{faults.Single, faults.Cluster}
	case string(faults.Single), string(faults.Cluster):
		modes = []faults.Mode{faults.Mode(*mode)}
	default:
		fmt.Fprintf(stderr, "faults: -mode %q: use single, cluster or both\n", *mode)
		return 2
	}

	var only []faults.Kind
	if *kinds != "" {
		for _, k := range strings.Split(*kinds, ",") {
			k := faults.Kind(strings.TrimSpace(k))
			if !slices.Contains(faults.AllKinds(), k) {
				fmt.Fprintf(stderr, "faults: -kinds: unknown fault kind %q: use some of %v\n", k, faults.AllKinds())
				return 2
			}
			only = append(only, k)
		}
	}

	dir := *out
	temporary := dir == ""
	if temporary {
		var err error
		if dir, err = os.MkdirTemp("", "conclave-faults-"); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "faults:", err)
		return 2
	}
	var progress io.Writer = stderr
	if *quiet {
		progress = nil
	}

	began := time.Now()
	bin, err := faults.Build(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if progress != nil {
		fmt.Fprintf(progress, "built binaries from %s in %v; run files in %s\n", bin.Tree, time.Since(began).Round(time.Millisecond), dir)
	}
	var results []*faults.Result
	for _, m := range modes {
		runDir := filepath.Join(dir, string(m))
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
		var mine []faults.Kind
		for _, k := range only {
			if slices.Contains(faults.Kinds(m), k) {
				mine = append(mine, k)
			}
		}
		if len(only) > 0 && len(mine) == 0 {
			continue // none of the kinds applies to this mode
		}
		res, err := faults.Run(ctx, faults.Config{
			Mode: m, TTL: *ttl, Short: *short, Duration: *duration, Kinds: mine, Settle: *settle, Hosts: *hosts, Workers: *workers, MinTerm: *minTerm, Shards: *shardCount,
			Seed: *seed, Dir: runDir, Bin: bin, Progress: progress,
		})
		if err != nil {
			fmt.Fprintf(stderr, "faults: %s run: %v (files in %s)\n", m, err, runDir)
			return 2
		}
		if progress != nil {
			fmt.Fprintln(progress, res.Report)
		}
		results = append(results, res)
	}
	fmt.Fprintf(stdout, "\n`go run ./cmd/faults %s` — %v in all\n\n", strings.Join(args, " "), time.Since(began).Round(time.Second))
	code := finish(results, *svg, stdout, stderr)
	switch {
	case code != 0:
		fmt.Fprintf(stdout, "\nFAIL: records kept in %s (`go run ./cmd/faults -recheck %s` checks them again)\n", dir, dir)
	case temporary && !*keep:
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
		}
	}
	return code
}

// report re-checks the runs kept in dir (its single and cluster
// subdirectories) and prints and draws them as a run would have.
func report(dir string, args []string, svg string, stdout, stderr io.Writer) int {
	var results []*faults.Result
	for _, m := range []faults.Mode{faults.Single, faults.Cluster} {
		sub := filepath.Join(dir, string(m))
		if _, err := os.Stat(filepath.Join(sub, "run.json")); err != nil {
			continue
		}
		res, err := faults.Reload(sub)
		if err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
		results = append(results, res)
	}
	if len(results) == 0 {
		fmt.Fprintf(stderr, "faults: no runs in %s (want %s/single/run.json or %s/cluster/run.json)\n", dir, dir, dir)
		return 2
	}
	fmt.Fprintf(stdout, "`go run ./cmd/faults %s`\n\n", strings.Join(args, " "))
	return finish(results, svg, stdout, stderr)
}

// finish prints the summary, draws the timeline and returns the exit status.
func finish(results []*faults.Result, svg string, stdout, stderr io.Writer) int {
	faults.WriteSummary(stdout, results)
	if svg != "" {
		if err := writeSVG(svg, results); err != nil {
			fmt.Fprintln(stderr, "faults:", err)
			return 2
		}
	}
	for _, r := range results {
		if !r.Report.OK() {
			return 1
		}
	}
	return 0
}

func writeSVG(path string, results []*faults.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(faults.WriteTimeline(f, results), f.Close())
}
