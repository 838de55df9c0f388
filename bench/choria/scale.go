package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	choria "github.com/choria-io/go-choria/providers/election/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The scale scenario runs Choria's own election at fleet scale against one
// `conclave broker run`: a few candidate processes (children of this
// binary) each campaign in the same N elections, the way a Choria program
// campaigns over its one shared connection, for N growing until the broker
// and the library no longer sustain it. See README.md.

// scaleConfig says how the scale scenario runs.
type scaleConfig struct {
	sizes     []int         // elections per step, in order
	ttl       time.Duration // the bucket's TTL
	processes int           // candidate processes, each in every election
	deadline  time.Duration // from starting the processes until every election must have a leader
	settle    time.Duration // after every election has a leader, before the window
	window    time.Duration // the steady-state measuring window
	conclave  string        // a prebuilt conclave CLI; empty builds one
}

func defaultScaleConfig() scaleConfig {
	return scaleConfig{
		sizes: []int{250, 500, 1000, 2000, 4000, 8000, 16000},
		ttl:   30 * time.Second, processes: 3, settle: time.Second,
	}
}

// fill sets the deadline and window from the TTL when they are not set:
// Choria's first leader needs its start-up splay (up to 5s) and one
// campaign interval (0.75×TTL) plus 200ms, so the deadline allows that
// twice over a TTL; the window spans two campaign intervals, in which every
// candidate campaigns or renews twice.
func (c *scaleConfig) fill() {
	if c.deadline == 0 {
		c.deadline = choriaSplay + 2*c.ttl
	}
	if c.window == 0 {
		c.window = c.ttl * 3 / 2
	}
}

func (c scaleConfig) validate() error {
	var errs []error
	if c.ttl < 4*time.Second || c.ttl > time.Hour {
		errs = append(errs, fmt.Errorf("ttl %v: Choria's election needs 4s to 1h", c.ttl))
	}
	if len(c.sizes) == 0 {
		errs = append(errs, errors.New("no sizes"))
	}
	for _, n := range c.sizes {
		if n < 1 {
			errs = append(errs, fmt.Errorf("size %d: at least 1 election", n))
		}
	}
	if c.processes < 1 {
		errs = append(errs, fmt.Errorf("processes %d: at least 1", c.processes))
	}
	if c.deadline <= 0 || c.window <= 0 || c.settle < 0 {
		errs = append(errs, errors.New("deadline and window must be positive, settle not negative"))
	}
	return errors.Join(errs...)
}

// scaleRow is what one size measured.
type scaleRow struct {
	elections   int
	allLed      time.Duration // from starting the processes until every election had a leader
	led         int           // elections with a leader at the end (or at the deadline)
	brokerCores float64       // broker CPU over the window, in cores
	brokerRSS   int64         // broker resident memory at the end of the window, bytes
	msgsIn      float64       // broker messages in per second over the window
	msgsOut     float64       // broker messages out per second over the window
	consumers   int           // consumers on the election stream at the end of the window
	candCores   float64       // all candidate processes' CPU over the window, in cores
	candRSS     int64         // the largest candidate process's resident memory, bytes
	losses      int           // OnLost calls during the window
	errors      int           // errors the candidate processes reported, start-up included
	overlaps    int           // elections led by more than one process at one sample
	sustained   bool
	reason      string // why not sustained
}

// scaleResult is a whole scale run.
type scaleResult struct {
	cfg      scaleConfig
	started  time.Time
	took     time.Duration
	versions map[string]string
	load     [2]string
	rows     []scaleRow
}

// scaleMain runs the "scale" subcommand.
func scaleMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := defaultScaleConfig()
	fs := flag.NewFlagSet("choria scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", joinInts(cfg.sizes), "comma-separated numbers of elections, tried in order until one is not sustained")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "the election bucket's TTL (leader_election_ttl); Choria needs at least 4s")
	fs.IntVar(&cfg.processes, "processes", cfg.processes, "candidate processes, each campaigning in every election")
	fs.DurationVar(&cfg.deadline, "deadline", 0, "how long after the processes start every election must have a leader (default 5s + 2×TTL)")
	fs.DurationVar(&cfg.window, "window", 0, "steady-state measuring window (default 1.5×TTL: two Choria campaign intervals)")
	fs.StringVar(&cfg.conclave, "conclave", "", "a conclave CLI to run the broker with (default: build ../../cmd/conclave)")
	out := fs.String("out", "", "also write the markdown results to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.sizes, err = parseInts(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return err
	}
	res, err := runScale(ctx, cfg, func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	})
	if res != nil {
		md := res.markdown()
		if _, werr := io.WriteString(stdout, md); werr != nil {
			err = errors.Join(err, werr)
		}
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil {
				err = errors.Join(err, fmt.Errorf("writing %s: %w", *out, werr))
			}
		}
	}
	return err
}

// runScale starts one conclave broker and measures each size in turn until
// one is not sustained. It returns the rows measured so far with any error.
func runScale(ctx context.Context, cfg scaleConfig, log func(string, ...any)) (*scaleResult, error) {
	res := &scaleResult{cfg: cfg, started: time.Now(), versions: versions("broker", "config", "cmd/conclave", "internal/cli"), load: [2]string{loadavg(), ""}}
	dir, err := os.MkdirTemp("", "conclave-choria-scale-")
	if err != nil {
		return nil, fmt.Errorf("scale: temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	bin := cfg.conclave
	if bin == "" {
		log("scale: building the conclave CLI")
		if bin, err = buildConclave(ctx, dir); err != nil {
			return nil, err
		}
	}
	br, err := startConclaveBroker(ctx, bin, dir, cfg.ttl, 30*time.Second)
	if err != nil {
		return nil, err
	}
	defer br.stop()
	log("scale: conclave broker run (pid %d) on %s, monitoring on %s, bucket TTL %v", br.pid(), br.url, br.monitorURL, cfg.ttl)

	nc, err := nats.Connect(br.url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("scale: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("scale: jetstream: %w", err)
	}
	s := &scaler{cfg: cfg, br: br, js: js, log: log}
	res.rows, err = growUntilUnsustained(cfg.sizes, func(n int) (scaleRow, error) { return s.measure(ctx, n) },
		func(r scaleRow) { log("scale: %s", r.summary()) })
	res.took = time.Since(res.started)
	res.load[1] = loadavg()
	return res, err
}

// growUntilUnsustained measures each size in order and stops after the
// first one that is not sustained. A size whose measurement fails counts as
// not sustained, with the error as the reason, unless it is the first size:
// then the benchmark itself is broken, and the error is returned.
func growUntilUnsustained(sizes []int, measure func(int) (scaleRow, error), done func(scaleRow)) ([]scaleRow, error) {
	var rows []scaleRow
	for i, n := range sizes {
		r, err := measure(n)
		if err != nil {
			if i == 0 {
				return rows, err
			}
			r = scaleRow{elections: n, reason: err.Error()}
		}
		rows = append(rows, r)
		done(r)
		if !r.sustained {
			break
		}
	}
	return rows, nil
}

// scaler measures sizes on one broker.
type scaler struct {
	cfg scaleConfig
	br  *brokerProc
	js  jetstream.JetStream
	log func(string, ...any)
}

// scaleStatus is what a candidate process reports.
type scaleStatus struct {
	Leading []int  `json:"leading"` // elections (by number) this process leads now
	Wins    int    `json:"wins"`
	Losses  int    `json:"losses"`
	Errors  int    `json:"errors"`
	Error   string `json:"error,omitempty"` // the first error
	// Mem is the process's memory at rest, after a garbage collection,
	// in the answer to a "mem" line only.
	Mem *memStatus `json:"mem,omitempty"`
}

// memStatus is a process's memory and goroutines after a garbage
// collection, as bench/scale reads them per candidate.
type memStatus struct {
	Candidates  int    `json:"candidates"`
	Goroutines  int    `json:"goroutines"`
	HeapBytes   uint64 `json:"heap_bytes"`   // live heap (HeapAlloc) after runtime.GC
	HeapObjects uint64 `json:"heap_objects"` // live objects after runtime.GC
	StackBytes  uint64 `json:"stack_bytes"`  // goroutine stacks in use (StackInuse)
	SysBytes    uint64 `json:"sys_bytes"`    // memory the Go runtime got from the OS
}

// readMem collects garbage and reads the process's memory for candidates
// candidates.
func readMem(candidates int) *memStatus {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &memStatus{Candidates: candidates, Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc,
		HeapObjects: ms.HeapObjects, StackBytes: ms.StackInuse, SysBytes: ms.Sys}
}

// fleet is the candidate processes of one size.
type fleet struct {
	procs []*child
}

func (f *fleet) close() {
	var wg sync.WaitGroup
	for _, c := range f.procs {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
}

// fleetStatus sums the processes' statuses.
type fleetStatus struct {
	led, overlaps, wins, losses, errors int
	firstErr                            string
}

func (f *fleet) status(elections int) (fleetStatus, error) {
	var fs fleetStatus
	leaders := make([]uint8, elections)
	for i, c := range f.procs {
		var st scaleStatus
		if err := c.status(&st); err != nil {
			return fs, fmt.Errorf("candidate process %d: status: %w", i, err)
		}
		for _, e := range st.Leading {
			if e >= 0 && e < elections {
				leaders[e]++
			}
		}
		fs.wins += st.Wins
		fs.losses += st.Losses
		fs.errors += st.Errors
		if fs.firstErr == "" && st.Error != "" {
			fs.firstErr = fmt.Sprintf("process %d: %s", i, st.Error)
		}
	}
	for _, n := range leaders {
		if n > 0 {
			fs.led++
		}
		if n > 1 {
			fs.overlaps++
		}
	}
	return fs, nil
}

// measure runs size n: starts the candidate processes, waits for every
// election to have a leader, then measures a steady-state window, and stops
// the processes. The bucket is purged afterwards (no candidate runs then),
// so that the next size starts on an empty bucket.
func (s *scaler) measure(ctx context.Context, n int) (scaleRow, error) {
	r := scaleRow{elections: n}
	if err := s.br.alive(); err != nil {
		return r, err
	}
	s.log("scale: %d elections × %d candidate processes: starting", n, s.cfg.processes)
	prefix := fmt.Sprintf("n%d_", n)
	f := &fleet{}
	defer func() {
		f.close()
		if err := s.purge(ctx); err != nil {
			s.log("scale: %v", err)
		}
	}()
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	procs := make([]*child, s.cfg.processes)
	for i := range s.cfg.processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := spawn(childArgs{Kind: "scale", URL: s.br.url, Elections: n, Prefix: prefix, Proc: i}, s.cfg.deadline)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("candidate process %d: %w", i, err))
				return
			}
			procs[i] = c
		}()
	}
	wg.Wait()
	for _, c := range procs {
		if c != nil {
			f.procs = append(f.procs, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	s.log("scale: %d processes started in %v; waiting for every election to have a leader (deadline %v)", len(f.procs), time.Since(start).Round(time.Millisecond), s.cfg.deadline)

	// Every election must have a leader by the deadline, without errors.
	for {
		st, err := f.status(n)
		if err != nil {
			return r, err
		}
		r.led, r.errors, r.overlaps = st.led, st.errors, max(r.overlaps, st.overlaps)
		switch {
		case st.errors > 0:
			r.reason = fmt.Sprintf("%d errors before every election had a leader (%s)", st.errors, st.firstErr)
			return r, nil
		case st.led == n:
			r.allLed = time.Since(start)
		case time.Since(start) > s.cfg.deadline:
			r.reason = fmt.Sprintf("%d of %d elections had a leader after %v", st.led, n, s.cfg.deadline)
			return r, nil
		}
		if r.allLed > 0 {
			break
		}
		if err := s.br.alive(); err != nil {
			return r, err
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.log("scale: every election has a leader after %v; measuring for %v", r.allLed.Round(time.Millisecond), s.cfg.window)
	time.Sleep(s.cfg.settle)

	// The steady-state window: CPU and messages, with the leaders sampled
	// every second to see that every election keeps one.
	before, err := s.sample(ctx, f, n)
	if err != nil {
		return r, err
	}
	end := before.at.Add(s.cfg.window)
	for time.Now().Before(end) {
		time.Sleep(min(time.Second, time.Until(end)))
		st, err := f.status(n)
		if err != nil {
			return r, err
		}
		r.led, r.overlaps = min(r.led, st.led), max(r.overlaps, st.overlaps)
	}
	after, err := s.sample(ctx, f, n)
	if err != nil {
		return r, err
	}
	secs := after.at.Sub(before.at).Seconds()
	r.brokerCores = (after.brokerCPU - before.brokerCPU).Seconds() / secs
	r.candCores = (after.candCPU - before.candCPU).Seconds() / secs
	r.msgsIn = float64(after.msgs.In-before.msgs.In) / secs
	r.msgsOut = float64(after.msgs.Out-before.msgs.Out) / secs
	r.brokerRSS, r.candRSS, r.consumers = after.brokerRSS, after.candRSS, after.consumers
	r.losses = after.st.losses - before.st.losses
	r.errors = after.st.errors
	r.led = min(r.led, after.st.led)
	r.overlaps = max(r.overlaps, after.st.overlaps)

	var problems []string
	if r.led < n {
		problems = append(problems, fmt.Sprintf("only %d of %d elections had a leader at one sample", r.led, n))
	}
	if r.losses > 0 {
		problems = append(problems, fmt.Sprintf("%d leaders lost their election", r.losses))
	}
	if r.errors > 0 {
		problems = append(problems, fmt.Sprintf("%d errors (%s)", r.errors, after.st.firstErr))
	}
	if r.overlaps > 0 {
		problems = append(problems, fmt.Sprintf("%d elections with two leaders", r.overlaps))
	}
	r.sustained = len(problems) == 0
	r.reason = strings.Join(problems, "; ")
	return r, s.br.alive()
}

// scaleSample is one reading of the counters the window compares.
type scaleSample struct {
	at        time.Time
	brokerCPU time.Duration
	brokerRSS int64
	candCPU   time.Duration // all candidate processes
	candRSS   int64         // the largest candidate process
	msgs      msgCounts
	consumers int
	st        fleetStatus
}

func (s *scaler) sample(ctx context.Context, f *fleet, n int) (scaleSample, error) {
	var sm scaleSample
	var err error
	sm.at = time.Now()
	if sm.brokerCPU, err = procCPU(s.br.pid()); err != nil {
		return sm, fmt.Errorf("broker CPU: %w", err)
	}
	if sm.brokerRSS, err = procRSS(s.br.pid()); err != nil {
		return sm, fmt.Errorf("broker memory: %w", err)
	}
	for _, c := range f.procs {
		d, err := c.cpu()
		if err != nil {
			return sm, fmt.Errorf("candidate CPU: %w", err)
		}
		sm.candCPU += d
		rss, err := procRSS(c.cmd.Process.Pid)
		if err != nil {
			return sm, fmt.Errorf("candidate memory: %w", err)
		}
		sm.candRSS = max(sm.candRSS, rss)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if sm.msgs, err = remoteVarz(rctx, s.br.monitorURL); err != nil {
		return sm, fmt.Errorf("broker /varz: %w", err)
	}
	if sm.consumers, err = streamConsumers(rctx, s.js); err != nil {
		return sm, err
	}
	if sm.st, err = f.status(n); err != nil {
		return sm, err
	}
	return sm, nil
}

// purge empties the election bucket between sizes.
func (s *scaler) purge(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.js.Stream(rctx, streamName)
	if err != nil {
		return fmt.Errorf("purging %s: %w", streamName, err)
	}
	if err := st.Purge(rctx); err != nil {
		return fmt.Errorf("purging %s: %w", streamName, err)
	}
	return nil
}

// runScaleChild is a candidate process of the scale scenario: one NATS
// connection, as a Choria program has, and one Choria election per key
// Prefix0 … Prefix(Elections-1) (or of KeysFile), all under the identity
// choria-scale-Proc.
func runScaleChild(a childArgs) error {
	var mu sync.Mutex
	var st scaleStatus
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		st.Errors++
		if st.Error == "" {
			st.Error = err.Error()
		}
	}
	id := fmt.Sprintf("choria-scale-%d", a.Proc)
	nc, err := nats.Connect(a.URL, nats.Name(id), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { fail(fmt.Errorf("nats: %w", err)) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { fail(fmt.Errorf("disconnected: %v", err)) }))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(bucketName)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketName, err)
	}
	keys, err := scaleKeys(a)
	if err != nil {
		return err
	}
	copies := max(a.Copies, 1)
	leading := make([]int, len(keys)) // candidates of this process that lead each election
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range copies {
		for i, key := range keys {
			e, err := choria.NewElection(id, key, kv,
				// Choria calls OnLost when a leader's update fails, also
				// before it called OnWon for that lease: never below 0.
				choria.OnWon(func() { mu.Lock(); st.Wins++; leading[i] = min(leading[i]+1, copies); mu.Unlock() }),
				choria.OnLost(func() { mu.Lock(); st.Losses++; leading[i] = max(leading[i]-1, 0); mu.Unlock() }))
			if err != nil {
				return fmt.Errorf("election %s: %w", key, err)
			}
			go func() {
				if err := e.Start(ctx); err != nil && ctx.Err() == nil {
					fail(fmt.Errorf("election %s: Start: %w", key, err))
				}
			}()
		}
	}
	fmt.Println("READY {}")
	serveStdin(func(line string) any {
		var mem *memStatus
		if line == "mem" {
			mem = readMem(copies * len(keys))
		}
		mu.Lock()
		defer mu.Unlock()
		s := st
		s.Mem = mem
		s.Leading = make([]int, 0, len(leading))
		for i, l := range leading {
			for range l {
				s.Leading = append(s.Leading, i)
			}
		}
		return s
	})
	// Exit without stopping the elections, as a process that ends does:
	// the broker expires the keys.
	return nil
}

// scaleKeys is the election keys of a scale child: those of a.KeysFile,
// or a.Prefix0 … a.Prefix(a.Elections-1).
func scaleKeys(a childArgs) ([]string, error) {
	if a.KeysFile == "" {
		keys := make([]string, a.Elections)
		for i := range keys {
			keys[i] = a.Prefix + strconv.Itoa(i)
		}
		return keys, nil
	}
	b, err := os.ReadFile(a.KeysFile)
	if err != nil {
		return nil, fmt.Errorf("election keys: %w", err)
	}
	var keys []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no election keys", a.KeysFile)
	}
	return keys, nil
}

// procRSS returns a process's resident memory in bytes, from
// /proc/PID/status.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

func (r scaleRow) summary() string {
	if r.allLed == 0 {
		return fmt.Sprintf("%d elections: not sustained: %s", r.elections, r.reason)
	}
	s := fmt.Sprintf("%d elections: all led after %v, broker %.3f cores, %.0f msgs in/s, %.0f out/s, %d consumers, candidates %.3f cores",
		r.elections, r.allLed.Round(time.Millisecond), r.brokerCores, r.msgsIn, r.msgsOut, r.consumers, r.candCores)
	if !r.sustained {
		s += "; not sustained: " + r.reason
	}
	return s
}

// markdown renders the run as a report.
func (r *scaleResult) markdown() string {
	var b strings.Builder
	cfg := r.cfg
	fmt.Fprintf(&b, "# Choria's election at fleet scale on one `conclave broker run`\n\n")
	fmt.Fprintf(&b, "Run %s, took %v. Choria %s, Conclave %s, nats.go %s, %s; load average %s at the start, %s at the end.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), r.took.Round(time.Second),
		r.versions["github.com/choria-io/go-choria"], r.versions["conclave"], r.versions["github.com/nats-io/nats.go"], r.versions["go"],
		r.load[0], r.load[1])
	fmt.Fprintf(&b, "%d candidate processes, each campaigning in every election over one connection; bucket TTL %v (Choria campaigns every %v); "+
		"every election must have a leader within %v of starting the processes; then a %v window. Sizes tried in order until one is not sustained.\n\n",
		cfg.processes, cfg.ttl, cfg.ttl*3/4, cfg.deadline, cfg.window)
	b.WriteString("| elections | all led after | broker CPU (cores) | broker msgs in/s | broker msgs out/s | consumers on the stream | broker RSS | candidates' CPU (cores, all) | largest candidate RSS | sustained |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.rows {
		if row.allLed == 0 {
			fmt.Fprintf(&b, "| %d | — | — | — | — | — | — | — | — | no: %s |\n", row.elections, mdEscape(row.reason))
			continue
		}
		verdict := "yes"
		if !row.sustained {
			verdict = "no: " + mdEscape(row.reason)
		}
		fmt.Fprintf(&b, "| %d | %.1fs | %.3f | %.0f | %.0f | %d | %s | %.3f | %s | %s |\n",
			row.elections, row.allLed.Seconds(), row.brokerCores, row.msgsIn, row.msgsOut, row.consumers,
			mib(row.brokerRSS), row.candCores, mib(row.candRSS), verdict)
	}
	b.WriteString("\n")
	if largest := r.largestSustained(); largest > 0 {
		fmt.Fprintf(&b, "Largest size sustained: %d elections × %d processes.\n", largest, cfg.processes)
	} else {
		b.WriteString("No size was sustained.\n")
	}
	return b.String()
}

// largestSustained is the largest size sustained, 0 if none was.
func (r *scaleResult) largestSustained() int {
	largest := 0
	for _, row := range r.rows {
		if row.sustained {
			largest = max(largest, row.elections)
		}
	}
	return largest
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
