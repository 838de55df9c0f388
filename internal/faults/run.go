package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mode is the broker set-up of a run.
type Mode string

const (
	// Single runs one broker.
	Single Mode = "single"
	// Cluster runs three brokers with an R3 election bucket.
	Cluster Mode = "cluster"
)

func (m Mode) nodes() int {
	if m == Cluster {
		return 3
	}
	return 1
}

// Timing facts measured on this machine (shared/DESIGN.md), from which the
// checker's bound on a leaderless gap is built.
const (
	// ExpiryLateness is how late the broker may expire a key: up to ~350ms
	// on file storage.
	ExpiryLateness = 350 * time.Millisecond
	// ClusterFailover is how long writes stop when the stream leader of an
	// R3 stream is killed: 4.5–8.5s (the Raft election timeout).
	ClusterFailover = 8500 * time.Millisecond
	// SchedulingSlack covers scheduling on two cores shared with other
	// work: process wake-ups, the harness's own polling.
	SchedulingSlack = 250 * time.Millisecond
	// RestartSlack is how soon after the first process of a graceful full
	// restart started a new leader must lead: the last leader released the
	// key, which a new candidate recognises and takes at once.
	RestartSlack = time.Second
)

// DefaultTTL is the bucket TTL of a run. It must exceed what a healthy
// leader needs to renew on a busy two-core machine: a renewal every TTL/3,
// a request timeout of TTL/5, retries every TTL/20, fsync before every
// acknowledgement, and in a cluster a Raft round trip. At 1s (the minimum)
// the 100ms safety margin and 200ms requests leave scheduling hiccups
// enough to end terms for nothing, which would drown the faults in noise.
// At 3s the margin is 300ms, requests get 600ms, and a takeover after a
// crash still takes only about 3.5s, so a run sees many of them.
const DefaultTTL = 3 * time.Second

// ShardGroup is the shard group the candidate processes join.
const ShardGroup = "faultshards"

// Config describes one run.
type Config struct {
	Mode Mode
	// TTL is the election bucket's TTL. Default DefaultTTL.
	TTL time.Duration
	// Short injects each fault kind of the mode once, in random order, and
	// then stops. Otherwise faults are drawn at random for Duration.
	Short    bool
	Duration time.Duration
	// Kinds limits the faults to these kinds; all of the mode's when empty.
	Kinds []Kind
	// Settle is how long to keep observing once a leader works again after
	// the last fault.
	Settle time.Duration
	// Hosts is the number of candidate processes, Workers the number of
	// candidates in each, sharing its identity. Defaults 4 and 3.
	Hosts, Workers int
	// MinTerm is how long a leader leads before it hands over to a better
	// ranked candidate (streams.WithMinTerm; see PriorityMove). Default
	// twice the TTL.
	MinTerm time.Duration
	// Shards is the number of shards of the shard group each candidate
	// process joins beside its elections (group ShardGroup, one member a
	// process, named by the host's identity). Default 8; -1 for none.
	Shards int
	// Seed seeds the choice and timing of faults. 0 picks one.
	Seed uint64
	// Dir is the run directory: broker configurations and stores, logs and
	// records. It must exist.
	Dir string
	// Bin are the programs to run, from Build.
	Bin Binaries
	// Progress receives a line per fault; nil for none.
	Progress io.Writer
}

// Params returns the checker's parameters for the run.
func (c Config) Params() Params {
	p := Params{TTL: c.TTL, Slack: ExpiryLateness + c.TTL/4 + SchedulingSlack, RestartSlack: RestartSlack}
	if c.Mode == Cluster {
		p.Failover = ClusterFailover
	}
	return p
}

func (c *Config) setDefaults() error {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Hosts == 0 {
		c.Hosts = 4
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.MinTerm == 0 {
		c.MinTerm = 2 * c.TTL
	}
	if c.Shards == 0 {
		c.Shards = 8
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	switch {
	case c.Mode != Single && c.Mode != Cluster:
		return fmt.Errorf("faults: mode %q: use %q or %q", c.Mode, Single, Cluster)
	case c.TTL < time.Second:
		return fmt.Errorf("faults: TTL %v is below the election's 1s minimum", c.TTL)
	case c.Hosts < 3:
		return fmt.Errorf("faults: %d hosts: need at least 3, so that two remain while one is faulty", c.Hosts)
	case c.MinTerm < 0:
		return fmt.Errorf("faults: min term %v: need a positive duration (0 for twice the TTL)", c.MinTerm)
	case c.Workers < 1:
		return fmt.Errorf("faults: %d workers per host: need at least 1", c.Workers)
	case !c.Short && c.Duration <= 0:
		return fmt.Errorf("faults: give a Duration, or Short")
	case c.Dir == "" || c.Bin.Conclave == "" || c.Bin.Candidate == "":
		return fmt.Errorf("faults: Dir and Bin are required")
	}
	for _, k := range c.Kinds {
		if !slices.Contains(Kinds(c.Mode), k) {
			return fmt.Errorf("faults: fault kind %q does not apply to mode %s: use one of %v", k, c.Mode, Kinds(c.Mode))
		}
	}
	return nil
}

// Binaries are the programs a run starts.
type Binaries struct {
	Conclave  string // the conclave command: brokers and stand-downs
	Candidate string // internal/faults/candidate
	// Tree names the source they were built from: `git describe --always
	// --dirty`, or "" outside a git work tree.
	Tree string
}

// Build compiles the conclave command and the candidate program into dir,
// from the module that contains the working directory.
func Build(ctx context.Context, dir string) (Binaries, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("faults: finding the module: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.HasSuffix(strings.TrimSpace(string(gomod)), os.DevNull) {
		return Binaries{}, errors.New("faults: run inside the conclave module")
	}
	b := Binaries{Conclave: filepath.Join(dir, "conclave"), Candidate: filepath.Join(dir, "candidate")}
	for _, t := range []struct{ out, pkg string }{
		{b.Conclave, "./cmd/conclave"},
		{b.Candidate, "./internal/faults/candidate"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("faults: go build %s: %w\n%s", t.pkg, err, out)
		}
	}
	git := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty")
	git.Dir = root
	if out, err := git.Output(); err == nil {
		b.Tree = strings.TrimSpace(string(out))
	}
	return b, nil
}

// Result is what a run produced.
type Result struct {
	Config  Config
	Report  *Report
	History *History
	// Notes are things the harness could not do as planned.
	Notes []string
	// Elapsed is the wall time of the whole run, start-up included.
	Elapsed time.Duration
}

// host is one candidate process slot: its identity and its links to the
// brokers outlive the processes that fill it.
type host struct {
	name     string // h1
	identity string // host-1
	proxies  []*Proxy
	inc      int
	priority int // of its processes' candidates; raised by PriorityMove
	proc     *process
	procName string // h1.2: name and incarnation
}

type harness struct {
	cfg    Config
	params Params
	rngMu  sync.Mutex // faults of a Double draw from rng at once
	rng    *rand.Rand
	ev     *Journal
	fence  *Fence
	br     *brokers
	hosts  []*host

	reapers sync.WaitGroup
	mu      sync.Mutex
	notes   []string
	skipped map[Kind]int // faults that began but could not be injected, by kind
}

// Run starts the brokers and candidates of one run, injects faults, stops
// everything, and checks the records. It returns an error only when the run
// could not be carried out; what the checker found is in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	h := &harness{cfg: cfg, params: cfg.Params(), rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))}
	for _, d := range []string{"candidates"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := writeRunConfig(cfg); err != nil {
		return nil, err
	}
	var err error
	if h.ev, err = CreateJournal(filepath.Join(cfg.Dir, "harness.jsonl")); err != nil {
		return nil, err
	}
	runErr := h.run(ctx)
	h.shutdown()
	if err := h.ev.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr != nil {
		return nil, runErr
	}
	hist, err := LoadHistory(cfg.Dir)
	if err != nil {
		return nil, err
	}
	rep := Check(hist, h.params)
	rep.Mode = string(cfg.Mode)
	return &Result{Config: cfg, Report: rep, History: hist, Notes: h.notes, Elapsed: time.Since(began)}, nil
}

func (h *harness) run(ctx context.Context) error {
	var err error
	h.fence, err = StartFence(filepath.Join(h.cfg.Dir, "fence.jsonl"))
	if err != nil {
		return err
	}
	n := h.cfg.Mode.nodes()
	if h.br, err = newBrokers(h.cfg.Bin.Conclave, h.cfg.Dir, n, h.cfg.TTL); err != nil {
		return err
	}
	for i := range n {
		if err := h.startBroker(i); err != nil {
			return err
		}
	}
	if _, err := h.br.awaitLeader(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("faults: brokers did not come up: %w", err)
	}
	if out, err := exec.CommandContext(ctx, h.cfg.Bin.Conclave, "election", "stand-down", "--help").CombinedOutput(); err != nil {
		return fmt.Errorf("faults: %s has no `election stand-down` command, which the stand-down fault runs: %w: %s", h.cfg.Bin.Conclave, err, strings.TrimSpace(string(out)))
	}

	for i := range h.cfg.Hosts {
		hs := &host{name: fmt.Sprintf("h%d", i+1), identity: fmt.Sprintf("host-%d", i+1)}
		for j := range n {
			p, err := NewProxy(h.br.addr(j))
			if err != nil {
				return err
			}
			hs.proxies = append(hs.proxies, p)
		}
		h.hosts = append(h.hosts, hs)
	}
	h.event(HarnessEvent{Ev: HvRunStart, Detail: fmt.Sprintf("mode %s, ttl %v, min term %v, %d hosts x %d workers, seed %d",
		h.cfg.Mode, h.cfg.TTL, h.cfg.MinTerm, h.cfg.Hosts, h.cfg.Workers, h.cfg.Seed)})
	for _, hs := range h.hosts {
		if err := h.startHost(hs); err != nil {
			return err
		}
	}
	if _, ok := h.awaitLeader(ctx, 30*time.Second); !ok {
		return fmt.Errorf("faults: no leader wrote within 30s of starting the candidates; see %s", h.cfg.Dir)
	}
	h.progress("first leader; injecting faults")

	if err := h.inject(ctx); err != nil {
		return err
	}
	// Let the last fault settle, so that the run ends with a leader.
	if _, ok := h.awaitLeaderSince(ctx, h.params.AllowedGap()+5*time.Second, Mono()); !ok {
		h.note("no leader after the last fault")
	}
	sleep(ctx, h.cfg.Settle)
	h.event(HarnessEvent{Ev: HvRunStop})
	return ctx.Err()
}

// inject runs the faults one after another, each at a random moment once a
// leader is working.
func (h *harness) inject(ctx context.Context) error {
	kinds := Kinds(h.cfg.Mode)
	if len(h.cfg.Kinds) > 0 {
		kinds = h.cfg.Kinds
	}
	var plan []Kind
	if h.cfg.Short {
		plan = append(plan, kinds...)
		h.rngMu.Lock()
		h.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
		h.rngMu.Unlock()
	}
	end := time.Now().Add(h.cfg.Duration)
	healed := Mono()
	for i := 0; ctx.Err() == nil; i++ {
		var k Kind
		if h.cfg.Short {
			if i == len(plan) {
				return nil
			}
			k = plan[i]
		} else {
			if time.Now().After(end) {
				return nil
			}
			k = kinds[h.intn(len(kinds))]
		}
		if err := h.reviveHosts(); err != nil {
			return err
		}
		// Wait for a leader that works after the last fault, not one whose
		// last write came just before it.
		since := max(healed, Mono()-int64(250*time.Millisecond))
		if _, ok := h.awaitLeaderSince(ctx, h.params.AllowedGap()+5*time.Second, since); !ok {
			h.note("no leader before fault %d (%s)", i+1, k)
		}
		if k == HandOver || k == HandOverCut || k == StopLeader {
			// The named host (a stop's successor) takes the key at once
			// only if its watch delivers the release, and a fault that
			// restarted brokers or processes leaves watches to be made
			// again: ask it of an election settled for the allowed gap
			// since the last fault, as the gap check's bound for a
			// graceful stop assumes.
			sleep(ctx, time.Duration(healed+int64(h.params.AllowedGap())-Mono()))
		}
		quiet := 500*time.Millisecond + h.jitter(3500*time.Millisecond)
		if h.cfg.Short {
			quiet = 300*time.Millisecond + h.jitter(900*time.Millisecond)
		}
		if !sleep(ctx, quiet) {
			break
		}
		// Inject only while a leader works: a fault injected while the last
		// one still keeps the election leaderless would add its own
		// takeover time to that gap.
		if _, ok := h.awaitLeader(ctx, h.params.AllowedGap()+5*time.Second); !ok {
			h.note("no leader working when fault %d (%s) was due", i+1, k)
		}
		before := h.skips(k)
		if err := h.fault(ctx, k); err != nil {
			return fmt.Errorf("faults: %s: %w", k, err)
		}
		if h.cfg.Short && h.skips(k) > before && h.skips(k) <= 2 {
			// Each kind once: one that could not be injected (a command
			// that timed out as a cluster came back) is tried again later.
			plan = append(plan, k)
		}
		healed = Mono()
	}
	return ctx.Err()
}

// skips returns how many faults of kind k could not be injected so far.
func (h *harness) skips(k Kind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.skipped[k]
}

// jitter returns a random duration in [0, d).
func (h *harness) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return time.Duration(h.rng.Int64N(int64(d)))
}

// intn returns a random int in [0, n).
func (h *harness) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// between returns a random duration in [lo, hi).
func (h *harness) between(lo, hi time.Duration) time.Duration { return lo + h.jitter(hi-lo) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (h *harness) event(e HarnessEvent) int64 {
	if e.At == 0 {
		e.At = Mono()
	}
	if err := h.ev.Append(e); err != nil {
		h.note("recording %s: %v", e.Ev, err)
	}
	return e.At
}

func (h *harness) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.notes = append(h.notes, msg)
	h.mu.Unlock()
	_ = h.ev.Append(HarnessEvent{Ev: HvNote, At: Mono(), Detail: msg})
	h.progress("note: %s", msg)
}

// runConfig is what a run directory keeps of its Config, for Reload.
type runConfig struct {
	Mode     Mode          `json:"mode"`
	TTL      time.Duration `json:"ttl"`
	Short    bool          `json:"short"`
	Duration time.Duration `json:"duration"`
	Hosts    int           `json:"hosts"`
	Workers  int           `json:"workers"`
	MinTerm  time.Duration `json:"min_term,omitempty"`
	Shards   int           `json:"shards,omitempty"`
	Seed     uint64        `json:"seed"`
	Kinds    []Kind        `json:"kinds,omitempty"`
	Settle   time.Duration `json:"settle,omitempty"`
	Tree     string        `json:"tree,omitempty"`
}

func writeRunConfig(cfg Config) error {
	b, err := json.MarshalIndent(runConfig{Mode: cfg.Mode, TTL: cfg.TTL, Short: cfg.Short, Duration: cfg.Duration,
		Hosts: cfg.Hosts, Workers: cfg.Workers, MinTerm: cfg.MinTerm, Shards: cfg.Shards, Seed: cfg.Seed, Kinds: cfg.Kinds, Settle: cfg.Settle, Tree: cfg.Bin.Tree}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.Dir, "run.json"), append(b, '\n'), 0o644)
}

// Reload checks the records a finished run left in dir again, as Run did
// at its end: to redraw its timeline or re-check it with a newer checker.
func Reload(dir string) (*Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		return nil, err
	}
	var rc runConfig
	if err := json.Unmarshal(b, &rc); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "run.json"), err)
	}
	cfg := Config{Mode: rc.Mode, TTL: rc.TTL, Short: rc.Short, Duration: rc.Duration, Hosts: rc.Hosts, Workers: rc.Workers,
		MinTerm: rc.MinTerm, Shards: rc.Shards, Seed: rc.Seed, Kinds: rc.Kinds, Settle: rc.Settle, Dir: dir, Bin: Binaries{Tree: rc.Tree}}
	hist, err := LoadHistory(dir)
	if err != nil {
		return nil, err
	}
	res := &Result{Config: cfg, History: hist}
	res.Report = Check(hist, cfg.Params())
	res.Report.Mode = string(cfg.Mode)
	var first, last int64
	for _, e := range hist.Events {
		if e.Ev == HvNote {
			res.Notes = append(res.Notes, e.Detail)
		}
		if first == 0 {
			first = e.At
		}
		last = e.At
	}
	res.Elapsed = time.Duration(last - first)
	return res, nil
}

func (h *harness) progress(format string, args ...any) {
	if h.cfg.Progress != nil {
		fmt.Fprintf(h.cfg.Progress, "%s %-7s %s\n", time.Now().Format("15:04:05.000"), h.cfg.Mode, fmt.Sprintf(format, args...))
	}
}

// startHost starts a new incarnation of a host's candidate process.
func (h *harness) startHost(hs *host) error {
	hs.inc++
	hs.procName = fmt.Sprintf("%s.%d", hs.name, hs.inc)
	var servers []string
	for _, p := range hs.proxies {
		servers = append(servers, "nats://"+p.Addr())
	}
	base := filepath.Join(h.cfg.Dir, "candidates", hs.procName)
	args := []string{
		"-proc", hs.procName, "-identity", hs.identity, "-workers", fmt.Sprint(h.cfg.Workers),
		"-servers", strings.Join(servers, ","), "-key", "faults", "-fence", h.fence.URL(),
		"-records", base + ".jsonl", "-priority", fmt.Sprint(hs.priority), "-min-term", h.cfg.MinTerm.String(),
		"-shards", fmt.Sprint(max(h.cfg.Shards, 0)), "-shard-group", ShardGroup,
	}
	p, err := startProcess(hs.procName, h.cfg.Bin.Candidate, args, base+".log")
	if err != nil {
		return err
	}
	hs.proc = p
	h.event(HarnessEvent{Ev: HvProcStart, Target: hs.procName, Host: hs.name, Detail: fmt.Sprintf("pid %d", p.pid())})
	h.reap(p, HarnessEvent{Ev: HvProcExit, Target: hs.procName, Host: hs.name})
	return nil
}

// reap records the exit of p with the time it was reaped.
func (h *harness) reap(p *process, e HarnessEvent) {
	h.reapers.Go(func() {
		<-p.done
		e.At = p.exitedAt
		e.Detail = p.state.String()
		h.event(e)
		if !p.expected.Load() {
			h.note("%s exited on its own: %s (log: %s)", p.name, p.state, p.logPath)
		}
	})
}

// reviveHosts restarts candidate processes that died on their own.
func (h *harness) reviveHosts() error {
	for _, hs := range h.hosts {
		if !hs.proc.alive() {
			if err := h.startHost(hs); err != nil {
				return err
			}
		}
	}
	return nil
}

// startBroker starts broker node i and records it.
func (h *harness) startBroker(i int) error {
	if err := h.br.start(i); err != nil {
		return err
	}
	nd := h.br.nodes[i]
	h.event(HarnessEvent{Ev: HvBrokerStart, Node: nd.name, Target: nd.name, Detail: fmt.Sprintf("pid %d", nd.proc.pid())})
	h.reap(nd.proc, HarnessEvent{Ev: HvBrokerExit, Node: nd.name, Target: nd.name})
	return nil
}

// killBroker kills node i and records it.
func (h *harness) killBroker(i int) {
	nd := h.br.nodes[i]
	if nd.proc == nil {
		return
	}
	nd.proc.expected.Store(true)
	h.event(HarnessEvent{Ev: HvBrokerKill, Node: nd.name, Target: nd.name})
	h.br.kill(i)
}

// awaitLeader waits until a candidate of a live process has had a write
// accepted within the last 250ms, and returns its host.
func (h *harness) awaitLeader(ctx context.Context, within time.Duration) (*host, bool) {
	return h.awaitLeaderSince(ctx, within, Mono()-int64(250*time.Millisecond))
}

// awaitLeaderSince waits until a candidate of a live process has had a write
// accepted at or after the CLOCK_MONOTONIC time since, and returns its host.
func (h *harness) awaitLeaderSince(ctx context.Context, within time.Duration, since int64) (*host, bool) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var found *host
	_, ok := h.fence.AwaitAccepted(ctx, since, func(w WriteRecord) bool {
		found = h.hostOf(w.Cand)
		return found != nil
	})
	return found, ok
}

// hostOf returns the host whose current process runs candidate cand
// (h1.2.w0), or nil.
func (h *harness) hostOf(cand string) *host {
	proc := ProcOf(cand)
	for _, hs := range h.hosts {
		if hs.procName == proc && hs.proc.alive() {
			return hs
		}
	}
	return nil
}

// ProcOf returns the process part of a candidate name: h1.2 of h1.2.w0.
func ProcOf(cand string) string {
	if i := strings.LastIndex(cand, ".w"); i >= 0 {
		return cand[:i]
	}
	return cand
}

// HostOf returns the host part of a process or candidate name: h1 of h1.2.w0.
func HostOf(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return name
}

// shutdown stops everything the run started, gracefully where it can.
func (h *harness) shutdown() {
	for _, hs := range h.hosts {
		for _, p := range hs.proxies {
			p.SetDelay(0)
			p.Heal(false)
		}
	}
	var wg sync.WaitGroup
	for _, hs := range h.hosts {
		if hs.proc != nil && hs.proc.alive() {
			p := hs.proc
			p.expected.Store(true)
			wg.Go(func() {
				if !p.terminate(15 * time.Second) {
					h.note("%s did not exit cleanly after SIGTERM", p.name)
				}
			})
		}
	}
	wg.Wait()
	if h.br != nil {
		for _, nd := range h.br.nodes {
			if nd.proc != nil {
				nd.proc.expected.Store(true)
			}
		}
		h.br.stopAll()
	}
	h.reapers.Wait()
	for _, hs := range h.hosts {
		for _, p := range hs.proxies {
			p.Close()
		}
	}
	if h.fence != nil {
		if err := h.fence.Close(); err != nil {
			h.note("closing the fence: %v", err)
		}
	}
}
