// Command choria measures Conclave's election side by side with Choria's own
// (github.com/choria-io/go-choria/providers/election/streams) on the same
// broker and the same bucket settings, and prints a markdown table of both
// and their ratio: time to first leader, graceful handoff, crash failover,
// broker messages at steady state, broker CPU for many elections, and a
// mixed election of both libraries' candidates checked for overlapping
// leaders. See README.md.
//
//	go run . -quick                          # 2–2.5 minutes
//	go run . -out results.md -svg ratios.svg # the full run, about 9 minutes
//	go run . scale                           # Choria's election at fleet scale on `conclave broker run`
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if ok, code := childMain(); ok {
		os.Exit(code)
	}
	run := run
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "scale" {
		run, args = scaleMain, args[1:]
	}
	if err := run(context.Background(), args, os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "choria bench:", err)
		os.Exit(1)
	}
}

// config says how much of each scenario to run.
type config struct {
	quick bool
	ttl   time.Duration
	grace time.Duration // Conclave's streams.WithGrace in the mixed election

	firstSizes   []int // candidates per election for time to first leader
	firsts       int   // Conclave: trials per size, one after another
	choriaFirsts int   // Choria: trials per size, all at once

	handoffs      int // Conclave: handoffs in one election, one after another
	handoffLanes  int // Choria: elections handing off at once
	handoffRounds int // Choria: handoffs per election

	failLanes  int // both: elections crashing at once
	failRounds int // both: crashes per election

	standbys []int
	window   time.Duration

	cpuElections int
	cpuWindow    time.Duration
	cpuParts     int // the window is sampled in this many parts

	mixed       time.Duration
	mixedPerLib int
}

func fullConfig() config {
	return config{
		ttl: 5 * time.Second, grace: 5 * time.Second,
		firstSizes: []int{1, 5}, firsts: 50, choriaFirsts: 20,
		handoffs: 50, handoffLanes: 10, handoffRounds: 3,
		failLanes: 10, failRounds: 3,
		standbys: []int{1, 10, 100}, window: 30 * time.Second,
		cpuElections: 200, cpuWindow: time.Minute, cpuParts: 3,
		mixed: 4 * time.Minute, mixedPerLib: 3,
	}
}

func quickConfig() config {
	c := fullConfig()
	c.quick = true
	c.firsts, c.choriaFirsts = 10, 5
	c.handoffs, c.handoffLanes, c.handoffRounds = 10, 4, 1
	c.failLanes, c.failRounds = 4, 1
	c.window = 2 * c.ttl
	c.cpuElections, c.cpuWindow, c.cpuParts = 100, 2*c.ttl, 1
	c.mixed = 30 * time.Second
	return c
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("choria", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: choria [flags]         Conclave and Choria side by side")
		fmt.Fprintln(stderr, "       choria scale [flags]   Choria's election at fleet scale on `conclave broker run` (choria scale -h)")
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "a short run (2–2.5 minutes)")
	out := fs.String("out", "", "also write the markdown results to this file")
	svg := fs.String("svg", "", "write a chart of the ratios Conclave/Choria to this SVG file")
	ttl := fs.Duration("ttl", 0, "bucket TTL for both libraries (default 5s; Choria needs at least 4s)")
	mixed := fs.Duration("mixed", 0, "how long the mixed election runs (default 4m, quick 30s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := fullConfig()
	if *quick {
		cfg = quickConfig()
	}
	if *ttl != 0 {
		cfg.ttl, cfg.grace = *ttl, *ttl
		cfg.window = max(cfg.window, 2**ttl)
		cfg.cpuWindow = max(cfg.cpuWindow, 2**ttl)
	}
	if *mixed != 0 {
		cfg.mixed = *mixed
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	res, err := runBench(ctx, cfg, func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	})
	if err != nil {
		return err
	}
	md := res.markdown()
	if _, err := io.WriteString(stdout, md); err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return err
		}
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(res.svg()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the settings both libraries must accept: Choria refuses
// a TTL whose campaign interval (0.75×TTL) is under 1s or within 1s of the
// TTL, that is a TTL under 4s; Conclave refuses one under 1s.
func (c config) validate() error {
	var errs []error
	if c.ttl < 4*time.Second || c.ttl > time.Hour {
		errs = append(errs, fmt.Errorf("ttl %v: Choria's election needs 4s to 1h (its campaign interval, 0.75×TTL, must be at least 1s and at least 1s below the TTL)", c.ttl))
	}
	if c.grace < 0 {
		errs = append(errs, fmt.Errorf("grace %v is negative", c.grace))
	}
	if c.mixedPerLib < 1 || c.cpuElections < 1 || len(c.firstSizes) == 0 {
		errs = append(errs, errors.New("every scenario needs at least one candidate"))
	}
	return errors.Join(errs...)
}

func numCPU() int { return runtime.NumCPU() }

// results is everything one run measured.
type results struct {
	cfg      config
	started  time.Time
	took     time.Duration
	versions map[string]string
	load     [2]string // /proc/loadavg at start and end

	first    map[lib]map[int][]time.Duration
	handoff  map[lib][]time.Duration
	failover map[lib][]time.Duration
	steady   map[lib][]steadyResult
	cpu      cpuResult
	mixed    mixedResult
}

func runBench(ctx context.Context, cfg config, log func(string, ...any)) (*results, error) {
	res := &results{cfg: cfg, started: time.Now(), versions: versions("providers/election/streams"), load: [2]string{loadavg(), ""},
		first: map[lib]map[int][]time.Duration{}, handoff: map[lib][]time.Duration{},
		failover: map[lib][]time.Duration{}, steady: map[lib][]steadyResult{}}
	dir, err := os.MkdirTemp("", "conclave-choria-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir, false)
	if err != nil {
		return nil, err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if err := createBucket(ctx, srv.ClientURL(), cfg.ttl); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, srv: srv, js: js, log: log}

	log("phase 1/3: first leader, handoff, failover and the mixed election (TTL %v)", cfg.ttl)
	if err := b.latencies(ctx, res); err != nil {
		return nil, err
	}
	log("phase 2/3: steady-state broker messages, one library at a time")
	for i, n := range cfg.standbys {
		order := libs
		if i%2 == 1 {
			order = []lib{choriaLib, conclaveLib}
		}
		for _, l := range order {
			r, err := b.steady(ctx, l, n)
			if err != nil {
				return nil, err
			}
			log("steady %s, 1 leader + %d standby%s: %.1f writes, %.1f messages in, %.1f out per minute", l, n, plural(n), r.writes, r.in, r.out)
			res.steady[l] = append(res.steady[l], r)
		}
	}
	for _, l := range libs {
		sortSteady(res.steady[l])
	}
	log("phase 3/3: broker CPU, %d elections per library, brokers and candidates in child processes", cfg.cpuElections)
	if res.cpu, err = cpuScenario(ctx, cfg, log); err != nil {
		return nil, err
	}
	res.took = time.Since(res.started)
	res.load[1] = loadavg()
	return res, nil
}

// latencies runs scenarios 1–3 and 7 at once. Choria's trials take seconds
// each, mostly waiting, so they run side by side in the background on keys
// of their own, as do the crash failovers of both libraries and the mixed
// election. Conclave's first-leader and handoff trials take milliseconds
// and run one after another in the foreground, on the same broker, at the
// same time.
func (b *bench) latencies(ctx context.Context, res *results) error {
	cfg := b.cfg
	bg := newGroup()
	for _, n := range cfg.firstSizes {
		for range cfg.choriaFirsts {
			bg.goDur(func() (time.Duration, error) { return b.firstLeader(ctx, choriaLib, n) },
				func(d time.Duration) { res.addFirst(choriaLib, n, d) })
		}
	}
	choriaPause := func() time.Duration { return rand75(cfg.ttl) }
	for range cfg.handoffLanes {
		bg.goDurs(func() ([]time.Duration, error) { return b.handoffLane(ctx, choriaLib, cfg.handoffRounds, choriaPause) },
			func(ds []time.Duration) { res.handoff[choriaLib] = append(res.handoff[choriaLib], ds...) })
	}
	for _, l := range libs {
		for range cfg.failLanes {
			bg.goDurs(func() ([]time.Duration, error) { return b.failoverLane(ctx, l, cfg.failRounds) },
				func(ds []time.Duration) { res.failover[l] = append(res.failover[l], ds...) })
		}
	}
	bg.do(func() error {
		m, err := b.mixed(ctx)
		bg.locked(func() { res.mixed = m })
		return err
	})

	time.Sleep(2 * time.Second) // past the background's burst of connections
	for _, n := range cfg.firstSizes {
		for range cfg.firsts {
			d, err := b.firstLeader(ctx, conclaveLib, n)
			if err != nil {
				return errors.Join(err, bg.wait())
			}
			bg.locked(func() { res.addFirst(conclaveLib, n, d) })
		}
	}
	ds, err := b.handoffLane(ctx, conclaveLib, cfg.handoffs, func() time.Duration { return 20 * time.Millisecond })
	if err != nil {
		return errors.Join(err, bg.wait())
	}
	bg.locked(func() { res.handoff[conclaveLib] = ds })
	b.log("Conclave's foreground trials done; waiting for Choria's and the mixed election (%v)", cfg.mixed)
	return bg.wait()
}

func (r *results) addFirst(l lib, n int, d time.Duration) {
	if r.first[l] == nil {
		r.first[l] = map[int][]time.Duration{}
	}
	r.first[l][n] = append(r.first[l][n], d)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
