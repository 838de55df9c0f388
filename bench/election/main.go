// Command election measures the election provider on an in-process broker
// and prints tables: time to first leader, graceful handoff, named
// hand-over, the load one election puts on the broker with 1, 10 and 100
// standbys, what who is standing's announcements cost a fleet (10,000
// elections x 3 candidates at TTL 30s by default, -fleet), and crash
// failover at several TTLs (1s, 3s and 10s by default) against the target
// of TTL + 0.1s.
//
// The election bucket is provisioned by broker.ProvisionElectionBucket with
// per-key TTLs on, as `conclave broker run` provisions it, so the numbers are
// what users of the broker get.
//
// With -secure the broker is configured as Conclave's broker configures a
// secure one: mutual TLS on the client port (certificates made at start in
// the temporary directory) and users with allow lists; the candidates log
// in as a user that may campaign in every election and nothing else, an
// admin provisions the bucket. -compare measures a plain and a secure
// broker in one process, interleaved phase by phase, and prints the ratios
// secure/plain, since only numbers from one run are comparable here.
//
//	go run ./bench/election                        # the numbers in BENCHMARKS.md
//	go run ./bench/election -quick                 # a smaller run (CI): failover at TTL 1s only
//	go run ./bench/election -failover-ttls 1s,2s   # crash failover at other TTLs
//	go run ./bench/election -fleet 0               # without the announcement-cost fleet
//	go run ./bench/election -secure                # on a broker with mutual TLS and per-user permissions
//	go run ./bench/election -compare               # plain and secure interleaved, and the ratios secure/plain
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "election bench:", err)
		os.Exit(1)
	}
}

// failoverTarget is how late past the TTL a crash failover may be: issue 9's
// target is every crash failover within TTL + 0.1s.
const failoverTarget = 100 * time.Millisecond

type config struct {
	ttl       time.Duration   // bucket TTL for first leader, handoff and steady state
	failTTLs  []time.Duration // bucket TTLs crash failover is measured at
	firsts    int
	handoffs  int
	failovers int // per TTL
	lanes     int // crash failovers measured at once, each on a key of its own
	window    time.Duration
	standbys  []int
	fleet     int           // elections of the announcement-cost fleet, each with three candidates
	fleetTTL  time.Duration // its bucket TTL
}

// durations is a flag.Value holding a comma-separated list of durations.
type durations []time.Duration

func (d *durations) String() string {
	parts := make([]string, len(*d))
	for i, v := range *d {
		parts[i] = v.String()
	}
	return strings.Join(parts, ",")
}

func (d *durations) Set(s string) error {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q: %w", part, err)
		}
		if v < bucket.MinTTL {
			return fmt.Errorf("TTL %v is shorter than the broker's minimum, %v", v, bucket.MinTTL)
		}
		out = append(out, v)
	}
	*d = out
	return nil
}

func run() error {
	cfg := config{standbys: []int{1, 10, 100}}
	failTTLs := durations{time.Second, 3 * time.Second, 10 * time.Second}
	quick := flag.Bool("quick", false, "fewer iterations, shorter windows, crash failover at TTL 1s only (flags given explicitly still apply)")
	flag.DurationVar(&cfg.ttl, "ttl", time.Second, "bucket TTL for first leader, handoff and steady state")
	flag.Var(&failTTLs, "failover-ttls", "comma-separated bucket TTLs to measure crash failover at")
	flag.IntVar(&cfg.firsts, "firsts", 100, "elections started from scratch")
	flag.IntVar(&cfg.handoffs, "handoffs", 200, "graceful handoffs")
	flag.IntVar(&cfg.failovers, "failovers", 20, "crash failovers per TTL")
	flag.IntVar(&cfg.lanes, "lanes", 4, "crash failovers measured at once, each in an election of its own")
	flag.DurationVar(&cfg.window, "window", 10*time.Second, "steady-state measuring window")
	flag.IntVar(&cfg.fleet, "fleet", 10000, "elections, of three candidates each, over which the cost of who is standing's announcements is measured (0: skip)")
	flag.DurationVar(&cfg.fleetTTL, "fleet-ttl", 30*time.Second, "bucket TTL of the announcement-cost fleet")
	secure := flag.Bool("secure", false, "measure on a broker with mutual TLS and per-user permissions, as Conclave's broker configures a secure one")
	compare := flag.Bool("compare", false, "measure a plain and a secure broker (-secure) interleaved, and print the ratios secure/plain")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quickly := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		quickly("firsts", func() { cfg.firsts = 20 })
		quickly("handoffs", func() { cfg.handoffs = 40 })
		quickly("failovers", func() { cfg.failovers = 5 })
		quickly("window", func() { cfg.window = 3 * time.Second })
		quickly("failover-ttls", func() { failTTLs = durations{time.Second} })
		quickly("fleet", func() { cfg.fleet = 200 })
		quickly("fleet-ttl", func() { cfg.fleetTTL = 3 * time.Second })
	}
	cfg.failTTLs = failTTLs
	if cfg.ttl < bucket.MinTTL {
		return fmt.Errorf("-ttl %v is shorter than the broker's minimum, %v", cfg.ttl, bucket.MinTTL)
	}
	if cfg.firsts < 1 || cfg.handoffs < 1 || cfg.failovers < 1 || cfg.lanes < 1 || len(cfg.failTTLs) == 0 {
		return errors.New("-firsts, -handoffs, -failovers and -lanes must be at least 1, and -failover-ttls not empty")
	}
	if cfg.fleet < 0 || cfg.fleetTTL < bucket.MinTTL {
		return fmt.Errorf("-fleet must be 0 or more and -fleet-ttl at least the broker's minimum, %v", bucket.MinTTL)
	}

	modes := []bool{*secure}
	if *compare {
		modes = []bool{false, true}
	}
	var runs []*bench
	for _, sec := range modes {
		b, err := newBench(cfg, sec)
		if b != nil {
			defer b.close()
		}
		if err != nil {
			return err
		}
		runs = append(runs, b)
	}
	if err := measure(cfg, runs); err != nil {
		return err
	}
	for i, b := range runs {
		if i > 0 {
			fmt.Println()
		}
		b.print()
	}
	if *compare {
		printComparison(cfg, runs[0], runs[1])
	}
	return nil
}

// results are one broker's measurements.
type results struct {
	first, handoff []time.Duration
	named          []time.Duration // named hand-overs: HandOver until the named candidate's OnWon
	// floor: one synced write from the candidates' connection after the
	// idle the named hand-overs start from, of which a hand-over makes one.
	floor        []time.Duration
	steady       [][3]float64 // by cfg.standbys: key writes, messages in, messages out per second
	fleet        [2]fleetCost // the fleet without, then with, who is standing
	fail, sinceW [][]time.Duration
}

// newBench starts a broker, plain or secure, connects the admin and the
// candidates' shared connection and provisions the bucket. Close it even
// when it returns an error.
func newBench(cfg config, secure bool) (*bench, error) {
	dir, err := os.MkdirTemp("", "conclave-bench-")
	if err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	b := &bench{cfg: cfg, secure: secure, mode: "plain: no TLS, no users"}
	b.closers = append(b.closers, func() { os.RemoveAll(dir) })
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "store"), NoLog: true, NoSigs: true, SyncAlways: true}
	if secure {
		if b.adminOpts, b.opts, err = secureBroker(dir, opts); err != nil {
			return b, fmt.Errorf("secure broker: %w", err)
		}
		b.mode = fmt.Sprintf("secure: mutual TLS, candidates log in as user %q, allowed to campaign in every election and nothing else", benchUser)
		// Permission violations on the candidates' connections reach only
		// the asynchronous error handler: count them, as the run is only
		// valid if the allow lists deny nothing an election needs.
		b.opts = append(b.opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(err.Error(), `"`+deniedProbe+`"`) {
				return
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.violations++; b.violation == nil {
				b.violation = err
			}
		}))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return b, fmt.Errorf("broker: %w", err)
	}
	go srv.Start()
	b.closers = append(b.closers, func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		return b, fmt.Errorf("broker did not start")
	}
	b.srv = srv

	// The admin provisions the bucket and reads the measurements; the
	// candidates share a connection of their own.
	admin, err := b.connect(b.adminOpts)
	if err != nil {
		return b, err
	}
	b.closers = append(b.closers, admin.Close)
	if b.adminJS, err = jetstream.New(admin); err != nil {
		return b, fmt.Errorf("jetstream: %w", err)
	}
	nc, err := b.connect(b.opts)
	if err != nil {
		return b, err
	}
	b.closers = append(b.closers, nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		return b, fmt.Errorf("jetstream: %w", err)
	}
	if secure {
		// The candidates' permissions are in force: a request outside them fails.
		if _, err := nc.Request(deniedProbe, nil, 250*time.Millisecond); err == nil {
			return b, fmt.Errorf("user %s was allowed %s: its permissions are not in force", benchUser, deniedProbe)
		}
	}
	return b, b.provision(cfg.ttl)
}

// deniedProbe is a subject the candidates' user may not publish to.
const deniedProbe = "$JS.API.INFO"

func (b *bench) close() {
	for _, c := range slices.Backward(b.closers) {
		c()
	}
}

// measure runs every measurement on each of runs. With two, it interleaves
// them phase by phase, and splits time to first leader and handoffs into
// rounds in the order ABBA, so that drift in the machine's speed falls on
// both alike.
func measure(cfg config, runs []*bench) (err error) {
	const rounds = 4
	order := func(round int) []*bench {
		if len(runs) == 2 && (round%4 == 1 || round%4 == 2) {
			return []*bench{runs[1], runs[0]}
		}
		return runs
	}
	share := func(total, round int) int { return total/rounds + btoi(round < total%rounds) }
	for round := range rounds {
		for _, b := range order(round) {
			ds, err := b.timeToFirstLeader(share(cfg.firsts, round))
			if err != nil {
				return err
			}
			b.res.first = append(b.res.first, ds...)
		}
	}
	// Graceful handoffs, then hand-overs to a named candidate, each phase
	// on fresh elections, interleaved by round as above.
	phases := []struct {
		run  func(*handoffRun, int) ([]time.Duration, error)
		into func(*results) *[]time.Duration
	}{
		{(*handoffRun).run, func(r *results) *[]time.Duration { return &r.handoff }},
		{(*handoffRun).runNamed, func(r *results) *[]time.Duration { return &r.named }},
		{(*handoffRun).runFloor, func(r *results) *[]time.Duration { return &r.floor }},
	}
	for _, ph := range phases {
		if err := handoffPhase(runs, order, rounds, func(b *bench, h *handoffRun, round int) error {
			ds, err := ph.run(h, share(cfg.handoffs, round))
			*ph.into(&b.res) = append(*ph.into(&b.res), ds...)
			return err
		}); err != nil {
			return err
		}
	}
	for i, n := range cfg.standbys {
		for _, b := range order(i) {
			w, in, out, err := b.steady(n)
			if err != nil {
				return err
			}
			b.res.steady = append(b.res.steady, [3]float64{w, in, out})
		}
	}
	if cfg.fleet > 0 {
		for i, standing := range []bool{false, true} {
			for _, b := range order(i) {
				if b.res.fleet[i], err = b.fleetCost(standing); err != nil {
					return fmt.Errorf("announcement cost (%s): %w", b.mode, err)
				}
			}
		}
	}
	for i, ttl := range cfg.failTTLs {
		for _, b := range order(i) {
			if err := b.provision(ttl); err != nil {
				return err
			}
			fail, sinceWrite, err := b.failovers(ttl)
			if err != nil {
				return fmt.Errorf("crash failover at TTL %v (%s): %w", ttl, b.mode, err)
			}
			b.res.fail, b.res.sinceW = append(b.res.fail, fail), append(b.res.sinceW, sinceWrite)
		}
	}
	for _, b := range runs {
		b.mu.Lock()
		n, first := b.violations, b.violation
		b.mu.Unlock()
		if n > 0 {
			return fmt.Errorf("%d permission violations on the candidates' connections, the first: %w", n, first)
		}
	}
	return nil
}

// handoffPhase starts a handoff election per run, measures each round in
// the round's order with measure, and stops the elections.
func handoffPhase(runs []*bench, order func(int) []*bench, rounds int, measure func(b *bench, h *handoffRun, round int) error) error {
	hs := make([]*handoffRun, 0, len(runs))
	defer func() {
		for _, h := range hs {
			h.stop()
		}
	}()
	for _, b := range runs {
		h, err := b.startHandoffs()
		if err != nil {
			return err
		}
		hs = append(hs, h)
	}
	for round := range rounds {
		for _, b := range order(round) {
			if err := measure(b, hs[slices.Index(runs, b)], round); err != nil {
				return err
			}
		}
	}
	return nil
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// print prints b's tables.
func (b *bench) print() {
	cfg, r := b.cfg, &b.res
	fmt.Printf("Conclave election benchmark (%s): loopback, in-process nats-server %s with SyncAlways, bucket provisioned as the broker does (per-key TTL %v), TTL %v\n\n",
		b.mode, server.VERSION, onOff(b.perKeyTTL), cfg.ttl)
	fmt.Println("| measure | runs | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	row("time to first leader", r.first)
	row("graceful handoff (Stop → next OnWon)", r.handoff)
	row("named hand-over (HandOver → the named candidate's OnWon)", r.named)
	row("floor: one synced kv.Put after the same idle", r.floor)
	if len(r.named) > 0 && len(r.floor) > 0 {
		fmt.Printf("\nA named hand-over is one synced write, one stream info request and one core NATS message on the critical path: its p99 is %.2f× the floor's p99 in this run (p50 %.2f×).\n",
			ratio(pct(r.named, 99), pct(r.floor, 99)), ratio(pct(r.named, 50), pct(r.floor, 50)))
	}

	fmt.Printf("\nSteady state, one election, measured over %v:\n\n", cfg.window)
	fmt.Println("| standbys | key writes/s | broker messages in/s | broker messages out/s |")
	fmt.Println("|---|---|---|---|")
	for i, n := range cfg.standbys {
		fmt.Printf("| %d | %.2f | %.2f | %.2f |\n", n, r.steady[i][0], r.steady[i][1], r.steady[i][2])
	}

	if cfg.fleet > 0 {
		b.printFleet()
	}

	fmt.Printf("\nCrash failover (the leader's connection closed without a release → a standby's OnWon), %d per TTL, %d at a time; target: max within TTL + %v:\n\n",
		cfg.failovers, min(cfg.lanes, cfg.failovers), failoverTarget)
	fmt.Println("| TTL | runs | p50 | p99 | max | max as a multiple of TTL | target | max within target | max from the leader's last write |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for i, ttl := range cfg.failTTLs {
		fail := r.fail[i]
		worst, target := slices.Max(fail), ttl+failoverTarget
		verdict := "yes"
		if worst > target {
			verdict = fmt.Sprintf("no (+%v)", round(worst-target))
		}
		fmt.Printf("| %v | %d | %v | %v | %v | %.3f | %v | %s | %v |\n", ttl, len(fail),
			round(pct(fail, 50)), round(pct(fail, 99)), round(worst), ratio(worst, ttl), target, verdict, round(slices.Max(r.sinceW[i])))
	}
	if b.secure {
		fmt.Printf("\nNo permission violations on the candidates' connections (the probe of %s was refused, as it should be).\n", deniedProbe)
	}
}

// printComparison prints the secure run's numbers against the plain run's.
func printComparison(cfg config, plain, secure *bench) {
	p, s := &plain.res, &secure.res
	fmt.Println("\nSecure against plain, both measured in this run, interleaved (secure/plain above 1: slower with TLS and permissions):")
	fmt.Println()
	fmt.Println("| measure | plain | secure | secure/plain |")
	fmt.Println("|---|---|---|---|")
	durRow := func(name string, p, s time.Duration) {
		fmt.Printf("| %s | %v | %v | %.2f |\n", name, round(p), round(s), s.Seconds()/p.Seconds())
	}
	durRow("time to first leader, p50", pct(p.first, 50), pct(s.first, 50))
	durRow("graceful handoff, p50", pct(p.handoff, 50), pct(s.handoff, 50))
	durRow("graceful handoff, p99", pct(p.handoff, 99), pct(s.handoff, 99))
	durRow("named hand-over, p99", pct(p.named, 99), pct(s.named, 99))
	for i, ttl := range cfg.failTTLs {
		durRow(fmt.Sprintf("crash failover max, TTL %v", ttl), slices.Max(p.fail[i]), slices.Max(s.fail[i]))
	}
	last := len(cfg.standbys) - 1
	for i, name := range []string{"broker messages in/s", "broker messages out/s"} {
		pv, sv := p.steady[last][i+1], s.steady[last][i+1]
		fmt.Printf("| %s, %d standbys | %.2f | %.2f | %.2f |\n", name, cfg.standbys[last], pv, sv, sv/pv)
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

type bench struct {
	cfg config
	srv *server.Server
	// js is the candidates' shared connection's; opts how candidates
	// connect.
	js   jetstream.JetStream
	opts []nats.Option
	// adminKV and adminJS are the admin's: it provisions the bucket and
	// reads the measurements. adminOpts is how it connects.
	adminKV   jetstream.KeyValue
	adminJS   jetstream.JetStream
	adminOpts []nats.Option
	perKeyTTL bool
	secure    bool
	mode      string
	closers   []func()
	res       results

	mu         sync.Mutex
	keys       int
	violations int   // permission violations on candidates' connections
	violation  error // the first
}

// provision makes the bucket what `conclave broker run` makes it, with the
// given TTL, and opens it.
func (b *bench) provision(ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := broker.ProvisionElectionBucket(ctx, b.adminJS, broker.BucketSpec{TTL: ttl, Replicas: 1, PerKeyTTL: true}, nil)
	if err != nil {
		return fmt.Errorf("provisioning the bucket with TTL %v: %w", ttl, err)
	}
	b.perKeyTTL = report.Config.AllowMsgTTL
	if b.adminKV, err = b.adminJS.KeyValue(ctx, bucket.Name); err != nil {
		return fmt.Errorf("opening the bucket: %w", err)
	}
	// The candidates open it themselves; opening it here fails fast when
	// their user may not.
	if _, err = b.js.KeyValue(ctx, bucket.Name); err != nil {
		return fmt.Errorf("opening the bucket as the candidates: %w", err)
	}
	return nil
}

func (b *bench) connect(opts []nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(b.srv.ClientURL(), append([]nats.Option{nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return nc, nil
}

func (b *bench) key() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys++
	return fmt.Sprintf("bench_%d", b.keys)
}

// candidate is a running election with its win times.
type candidate struct {
	e    *streams.Election
	won  chan time.Time
	done chan struct{}
	nc   *nats.Conn
}

// start starts a candidate in election key. With own set it campaigns over
// a connection of its own, which a crash closes; otherwise over the shared
// one.
func (b *bench) start(key, identity string, own bool) (*candidate, error) {
	js := b.js
	c := &candidate{won: make(chan time.Time, 16), done: make(chan struct{})}
	if own {
		nc, err := b.connect(b.opts)
		if err != nil {
			return nil, err
		}
		if js, err = jetstream.New(nc); err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		c.nc = nc
	}
	e, err := streams.NewElection(identity, key, js, streams.OnWon(func() { c.won <- time.Now() }))
	if err != nil {
		if c.nc != nil {
			c.nc.Close()
		}
		return nil, fmt.Errorf("election %s: %w", key, err)
	}
	c.e = e
	go func() {
		defer close(c.done)
		_ = e.Start(context.Background())
	}()
	return c, nil
}

func (c *candidate) stop() {
	c.e.Stop()
	<-c.done
	if c.nc != nil {
		c.nc.Close()
	}
}

// timeToFirstLeader starts n elections from scratch, one at a time, and
// returns how long each took to its first leader.
func (b *bench) timeToFirstLeader(n int) ([]time.Duration, error) {
	var out []time.Duration
	for range n {
		start := time.Now()
		c, err := b.start(b.key(), "first", false)
		if err != nil {
			return nil, err
		}
		select {
		case at := <-c.won:
			out = append(out, at.Sub(start))
		case <-time.After(10 * time.Second):
			c.stop()
			return nil, fmt.Errorf("no leader within 10s")
		}
		c.stop()
	}
	return out, nil
}

// waitWin waits for one of cs to win and returns it and when.
func waitWin(cs []*candidate, within time.Duration) (*candidate, time.Time, error) {
	deadline := time.After(within)
	if len(cs) == 1 {
		select {
		case at := <-cs[0].won:
			return cs[0], at, nil
		case <-deadline:
			return nil, time.Time{}, fmt.Errorf("no leader within %v", within)
		}
	}
	for {
		for _, c := range cs {
			select {
			case at := <-c.won:
				return c, at, nil
			default:
			}
		}
		select {
		case <-deadline:
			return nil, time.Time{}, fmt.Errorf("no leader within %v", within)
		case <-time.After(100 * time.Microsecond):
		}
	}
}

func without(cs []*candidate, c *candidate) []*candidate {
	out := cs[:0:0]
	for _, o := range cs {
		if o != c {
			out = append(out, o)
		}
	}
	return out
}

// handoffRun is one election with a leader and two standbys, in which the
// leader stops and a fresh candidate joins, again and again.
type handoffRun struct {
	b      *bench
	key    string
	cs     []*candidate
	leader *candidate
	joined int
}

func (b *bench) startHandoffs() (*handoffRun, error) {
	h := &handoffRun{b: b, key: b.key()}
	for range 3 {
		if err := h.join(); err != nil {
			h.stop()
			return nil, err
		}
	}
	var err error
	if h.leader, _, err = waitWin(h.cs, 10*time.Second); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

func (h *handoffRun) join() error {
	c, err := h.b.start(h.key, fmt.Sprintf("h%d", h.joined), false)
	if err != nil {
		return err
	}
	h.joined++
	h.cs = append(h.cs, c)
	return nil
}

// run measures n graceful handoffs: the leader's Stop until the next OnWon.
func (h *handoffRun) run(n int) ([]time.Duration, error) {
	var out []time.Duration
	for range n {
		time.Sleep(20 * time.Millisecond) // let the standbys settle on the new leader
		start := time.Now()
		stopped := make(chan struct{})
		go func(l *candidate) { l.stop(); close(stopped) }(h.leader)
		h.cs = without(h.cs, h.leader)
		next, at, err := waitWin(h.cs, 5*time.Second)
		<-stopped
		if err != nil {
			return nil, err
		}
		out = append(out, at.Sub(start))
		h.leader = next
		if err := h.join(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runNamed measures n hand-overs to a named candidate: the leader's
// HandOver until the named standby's OnWon. Another candidate winning is an
// error.
func (h *handoffRun) runNamed(n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := range n {
		time.Sleep(20 * time.Millisecond) // let the standbys settle on the new leader
		others := without(h.cs, h.leader)
		to := others[i%len(others)]
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.leader.e.HandOver(ctx, to.e.Identity())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("hand-over %d: %w", i, err)
		}
		next, at, err := waitWin(h.cs, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("hand-over %d to %s: %w", i, to.e.Identity(), err)
		}
		if next != to {
			return nil, fmt.Errorf("hand-over %d: %s handed over to %s, but %s leads", i, h.leader.e.Identity(), to.e.Identity(), next.e.Identity())
		}
		out = append(out, at.Sub(start))
		h.leader = next
	}
	return out, nil
}

// runFloor measures n synced writes from the candidates' connection, each
// after the idle a named hand-over starts from: the machine's own cost of
// the one write a hand-over makes, in the same run.
func (h *handoffRun) runFloor(n int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := h.b.js.KeyValue(ctx, bucket.Name)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	var out []time.Duration
	for i := range n {
		time.Sleep(20 * time.Millisecond) // as before each named hand-over
		start := time.Now()
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kv.Put(wctx, "floor-"+h.key, []byte("floor"))
		wcancel()
		if err != nil {
			return nil, fmt.Errorf("floor write %d: %w", i, err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func (h *handoffRun) stop() {
	for _, c := range h.cs {
		c.stop()
	}
}

// failovers measures b.cfg.failovers crash failovers on a bucket of TTL
// ttl, b.cfg.lanes at a time, each in a fresh election: a leader on a
// connection of its own and one standby; the leader's connection is closed
// abruptly (no release, as when its process dies) at a point of its renewal
// cycle that varies from trial to trial, and the time until the standby's
// OnWon is one sample. It also returns, for each, the time from the
// leader's last write (the key's server timestamp) to the standby's OnWon.
func (b *bench) failovers(ttl time.Duration) (fromCrash, fromWrite []time.Duration, err error) {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range b.cfg.failovers {
			next <- i
		}
	}()
	for range min(b.cfg.lanes, b.cfg.failovers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d, w, err := b.failover(ttl, i)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					fromCrash, fromWrite = append(fromCrash, d), append(fromWrite, w)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return fromCrash, fromWrite, nil
}

// failover is trial i of failovers: the time from the crash to the
// standby's OnWon, and from the leader's last write to it.
func (b *bench) failover(ttl time.Duration, i int) (fromCrash, fromWrite time.Duration, err error) {
	key := b.key()
	leader, err := b.start(key, "crashing", true)
	if err != nil {
		return 0, 0, err
	}
	defer leader.stop()
	if _, _, err := waitWin([]*candidate{leader}, 10*time.Second); err != nil {
		return 0, 0, err
	}
	standby, err := b.start(key, "standby", false)
	if err != nil {
		return 0, 0, err
	}
	defer standby.stop()
	// Crash at a point of the renewal cycle that moves with i.
	time.Sleep(ttl/3 + time.Duration(i)*ttl/3/time.Duration(b.cfg.failovers))
	start := time.Now()
	leader.nc.Close()
	// The key as the crashed leader left it: its last write's timestamp.
	last, err := b.adminKV.Get(context.Background(), key)
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s after the crash: %w", key, err)
	}
	_, at, err := waitWin([]*candidate{standby}, 3*ttl+5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	return at.Sub(start), at.Sub(last.Created()), nil
}

// steady measures one election with a leader and n standbys: how many writes
// the key sees, and how many messages the broker handles, per second.
func (b *bench) steady(n int) (writes, in, out float64, err error) {
	key := b.key()
	var cs []*candidate
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	for i := 0; i <= n; i++ {
		c, err := b.start(key, fmt.Sprintf("s%d", i), i > 0)
		if err != nil {
			return 0, 0, 0, err
		}
		cs = append(cs, c)
	}
	if _, _, err := waitWin(cs, 10*time.Second); err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(b.cfg.ttl) // let every standby's watch settle
	c0, err := b.counts()
	if err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(b.cfg.window)
	c1, err := b.counts()
	if err != nil {
		return 0, 0, 0, err
	}
	secs := b.cfg.window.Seconds()
	return float64(c1.seq-c0.seq) / secs, float64(c1.varz.InMsgs-c0.varz.InMsgs) / secs, float64(c1.varz.OutMsgs-c0.varz.OutMsgs) / secs, nil
}

// brokerCounts is what the broker had counted at one moment: the
// bucket's last sequence (one more per write) and its message totals.
type brokerCounts struct {
	seq  uint64
	varz *server.Varz
}

func (b *bench) counts() (brokerCounts, error) {
	seq, err := lastSeq(context.Background(), b.adminKV)
	if err != nil {
		return brokerCounts{}, err
	}
	v, err := b.srv.Varz(nil)
	if err != nil {
		return brokerCounts{}, fmt.Errorf("varz: %w", err)
	}
	return brokerCounts{seq, v}, nil
}

// lastSeq is the bucket's stream's last sequence: one more per write.
func lastSeq(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("bucket status: %w", err)
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("bucket status of type %T", st)
	}
	return s.StreamInfo().State.LastSeq, nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func ratio(d, ttl time.Duration) float64 { return d.Seconds() / ttl.Seconds() }

func row(name string, ds []time.Duration) {
	fmt.Printf("| %s | %d | %v | %v | %v |\n", name, len(ds), round(pct(ds, 50)), round(pct(ds, 99)), round(slices.Max(ds)))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(10 * time.Microsecond)
	}
}
