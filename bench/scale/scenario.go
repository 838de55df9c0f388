package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/conclave-io/conclave/internal/benchproc"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
)

// setupDeadline bounds how long a candidate process may take to connect and
// build its elections (fw.NewElection opens the bucket for each).
const setupDeadline = 5 * time.Minute

// bench holds what every scenario shares.
type bench struct {
	set  settings
	dir  string // temporary directory, removed at the end
	cli  string // the conclave binary
	self string // this program, re-executed for candidate processes
	runs int

	choriaBin string // bench/choria's binary, for Choria's candidates; "" without -choria
	pprofBin  string // the profiling broker (bench/scale/pprofbroker), with -profile
}

// result is what one scenario measured. Zero fields were not measured.
type result struct {
	lib                     string // libConclave or libChoria
	announce                bool   // Conclave's candidates announce who is standing
	names, shape            string // the -names and -shape it ran with
	elections, nodes, procs int
	copies                  int           // candidates each process runs in each of its elections
	perProc                 int           // elections each candidate process campaigns in
	ttl                     time.Duration // the bucket's TTL: -ttl, or for Choria -choria-ttl
	loadStart               string        // load averages when it started and ended
	loadEnd                 string

	// Election from scratch.
	led      int           // elections that had a leader by the deadline
	allLed   time.Duration // "go" → the last first leader's write
	p50Led   time.Duration // "go" → the median first leader's write
	setupMax time.Duration // slowest candidate process to build its elections

	steady *steady

	kill *killResult // the busiest candidate process killed (single broker)
	node *nodeResult // the stream leader's node killed (cluster)

	leaderless []string // at the end
	overlaps   []string // possible overlaps seen over the whole run
	failures   []string
}

// steady is the steady-state window's figures.
type steady struct {
	window      time.Duration
	brokerCores float64 // summed over the brokers
	brokerRSS   []float64
	inPerSec    float64 // summed over the brokers
	outPerSec   float64
	inBytes     float64 // per second, summed over the brokers
	outBytes    float64
	consumers   int
	procCores   []float64 // per candidate process
	procRSS     []float64
	procBase    []float64   // each candidate process's RSS before it built any election
	leading     int64       // candidates leading, by their own count, at the end
	mem         []*memStats // per candidate process, after the window and a GC
	changes     int         // leader changes during the window
	watchMsgs   float64

	// Per Conclave candidate process, over the window: messages its
	// connection received on the bucket's subjects (deliveries of its
	// watches), those of its own keys, the writes to its own keys (as the
	// observer saw them), and every message it received.
	deliveries, ownDeliv, ownWrites, inMsgs []float64

	profiles []string // CPU profiles of the brokers over the window (-profile)
}

// killResult is the SIGKILL of the candidate process leading the most.
type killResult struct {
	victim     string
	itLed      int
	took       []time.Duration // kill → new leader's write, per election
	unresolved int             // elections still without a new leader at the deadline
	onWon      []time.Duration // kill → new leader's OnWon, per election
	late       []time.Duration // new leader's write − (the victim's last write + TTL)
	changes    int             // leader changes, kill → end of the failover
}

// nodeResult is the SIGKILL of the stream leader's node.
type nodeResult struct {
	node         string
	newLeader    string
	streamLeader time.Duration   // kill → stream info names another leader
	took         []time.Duration // kill → the election's first write after it
	unresolved   int
	changes      int   // leader changes, kill → end
	losses       int64 // OnLost in the candidates, kill → end
}

// label names the library, and for Conclave without announcements says
// so.
func (r *result) label() string {
	if r.lib == libConclave && !r.announce {
		return libConclave + " (no announcements)"
	}
	return r.lib
}

// fileLabel is label for file names.
func (r *result) fileLabel() string {
	if r.lib == libConclave && !r.announce {
		return libConclave + "-noannounce"
	}
	return r.lib
}

// fail records a failure of the scenario and says it at once.
func (r *result) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.failures = append(r.failures, msg)
	progress("FAILURE: %s", msg)
}

// env is one scenario's running processes and observer connection.
type env struct {
	brokers    []*broker
	candidates []*candidate
	nc         *nats.Conn
	js         jetstream.JetStream
	cancel     context.CancelFunc
}

// close ends everything the scenario started: candidate processes first
// (their leaders release), then the brokers, each with a grace period
// before SIGKILL.
func (e *env) close() {
	if e.cancel != nil {
		e.cancel()
	}
	var wg sync.WaitGroup
	for _, c := range e.candidates {
		wg.Go(func() { c.shutdown(15 * time.Second) })
	}
	wg.Wait()
	if e.nc != nil {
		e.nc.Close()
	}
	for _, b := range e.brokers {
		wg.Go(func() { b.stop(os.Interrupt, 15*time.Second) })
	}
	wg.Wait()
}

// The libraries whose candidates a scenario runs.
const (
	libConclave = "Conclave"
	libChoria   = "Choria"
)

// scenario runs n elections of lib's candidates on nodes brokers (1, or 3
// for the cluster): election from scratch, steady state, then (Conclave
// only) a kill. Whatever fails is recorded in the result; everything
// started is stopped before it returns.
func (b *bench) scenario(ctx context.Context, lib string, n, nodes int, announce bool) *result {
	s := b.set
	r := &result{lib: lib, announce: announce, names: s.names, shape: s.shape, elections: n, nodes: nodes, procs: s.procs, copies: s.copies, perProc: s.perProc(n), ttl: s.ttl}
	if lib == libChoria {
		r.ttl = s.choriaTTL
	}
	b.runs++
	dir := filepath.Join(b.dir, fmt.Sprintf("run%d", b.runs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.fail("%v", err)
		return r
	}
	what := fmt.Sprintf("%s: %d elections (%s names), %d processes x %d keys x %d copies, TTL %v, ", r.label(), n, s.names, s.procs, r.perProc, s.copies, r.ttl)
	if nodes == 1 {
		what += "one broker"
	} else {
		what += fmt.Sprintf("%d-node cluster", nodes)
	}
	progress("=== %s; load average %s", what, loadavg())
	r.loadStart = loadavg()

	ctx, cancel := context.WithCancel(ctx)
	e := &env{cancel: cancel}
	defer e.close()
	if err := b.run(ctx, e, dir, r); err != nil {
		r.fail("%v", err)
	}
	r.loadEnd = loadavg()
	return r
}

// run is scenario's body.
func (b *bench) run(ctx context.Context, e *env, dir string, r *result) error {
	n, s := r.elections, b.set
	brokers, err := startBrokers(dir, b.brokerBin(), r.nodes, r.ttl, s.profile != "")
	e.brokers = brokers
	if err != nil {
		return err
	}
	var urls []string
	for _, br := range brokers {
		urls = append(urls, br.clientURL)
	}
	if err := b.awaitBrokers(ctx, e, urls); err != nil {
		return err
	}

	names := keyNames(s.names, n)
	obs := newObserver(r.ttl, names)
	kv, err := e.js.KeyValue(ctx, bucket.Name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", bucket.Name, err)
	}
	if err := obs.watch(ctx, kv); err != nil {
		return err
	}

	assigned := assignKeys(names, s.procs, r.perProc)
	var ok bool
	var goAt time.Time
	var firsts []time.Time
	if r.lib == libChoria {
		goAt = time.Now()
		ok, firsts, err = b.startChoria(ctx, e, dir, urls[0], assigned, n)
	} else {
		goAt, err = b.startConclave(ctx, e, dir, urls, assigned, r)
		if err == nil {
			ok = b.awaitFirstLeaders(ctx, obs, goAt, n)
			_, firsts = obs.firsts(n)
			err = b.profileCandidates(ctx, e, r, "start", "cpu-stop", "heap led")
		}
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.led = len(firsts)
	if len(firsts) > 0 {
		ds := make([]time.Duration, len(firsts))
		for i, t := range firsts {
			ds[i] = t.Sub(goAt)
		}
		slices.Sort(ds)
		r.p50Led = pct(ds, 50)
		if ok {
			r.allLed = ds[len(ds)-1]
		}
	}
	if !ok {
		r.fail("%d of %d elections had no leader %v after the candidates started (first ones: %s)",
			n-r.led, n, s.electDeadline, strings.Join(first(obs.leaderless(n, b.liveSet(e), time.Now()), 5), "; "))
		b.reportCandidates(ctx, e)
	} else {
		progress("all %d elections have a leader, the last %v after the start", n, r.allLed.Round(time.Millisecond))
	}

	if err := sleepCtx(ctx, s.settle); err != nil {
		return err
	}
	st, err := b.measure(ctx, e, obs, r)
	if err != nil {
		return err
	}
	r.steady = st
	// The candidates' own count, read one process after another: with no
	// leader change meanwhile it cannot exceed one leader per election.
	if st.leading > int64(n) && st.changes == 0 {
		r.fail("the candidate processes count %d leaders for %d elections (more than one leader in some)", st.leading, n)
	}

	if r.nodes == 1 && s.kill && r.lib == libConclave && s.procs*r.perProc >= 2*n {
		if err := b.killBusiest(ctx, e, obs, r); err != nil {
			return err
		}
	}
	if r.nodes > 1 {
		if err := b.killStreamLeader(ctx, e, obs, r); err != nil {
			return err
		}
	}

	// At the end, every election has a leader among the running processes.
	r.leaderless = obs.leaderless(n, b.liveSet(e), time.Now())
	if len(r.leaderless) > 0 {
		r.fail("%d of %d elections have no leader at the end: %s", len(r.leaderless), n, strings.Join(first(r.leaderless, 5), "; "))
	}
	r.overlaps = obs.overlaps(20)
	if _, k := obs.counts(); k > 0 {
		r.fail("%d takeovers came before the previous leader's term could have ended (possible overlaps): %s", k, strings.Join(first(r.overlaps, 3), "; "))
	}
	if _, _, err := obs.stats(); err != nil && ctx.Err() == nil {
		r.fail("observer: %v", err)
	}
	return nil
}

// awaitBrokers waits until the brokers serve the election bucket (on a
// cluster: with a stream leader and every replica current) and connects the
// observer.
func (b *bench) awaitBrokers(ctx context.Context, e *env, urls []string) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for {
		for _, br := range e.brokers {
			if br.exited() {
				return errors.New(br.describeExit())
			}
		}
		last = b.brokersReady(ctx, e, urls)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("brokers not ready within 60s: %w", last)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// brokersReady is one attempt of awaitBrokers.
func (b *bench) brokersReady(ctx context.Context, e *env, urls []string) error {
	if e.nc == nil {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("bench/scale observer"),
			nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(false))
		if err != nil {
			return fmt.Errorf("connecting: %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return fmt.Errorf("JetStream: %w", err)
		}
		e.nc, e.js = nc, js
	}
	info, err := b.streamInfo(ctx, e)
	if err != nil {
		return err
	}
	if len(e.brokers) > 1 {
		c := info.Cluster
		if c == nil || c.Leader == "" || len(c.Replicas) != len(e.brokers)-1 {
			return fmt.Errorf("stream %s has no leader and %d replicas yet", bucket.Stream, len(e.brokers)-1)
		}
		for _, p := range c.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("replica %s of %s not current yet", p.Name, bucket.Stream)
			}
		}
	}
	progress("brokers ready: %s", describeStream(info))
	return nil
}

// streamInfo reads the election stream's info, with a 5 s bound.
func (b *bench) streamInfo(ctx context.Context, e *env) (*jetstream.StreamInfo, error) {
	return b.streamInfoWithin(ctx, e, 5*time.Second)
}

// streamInfoWithin reads the election stream's info, with bound d.
func (b *bench) streamInfoWithin(ctx context.Context, e *env, d time.Duration) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	st, err := e.js.Stream(ctx, bucket.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", bucket.Stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", bucket.Stream, err)
	}
	return info, nil
}

// describeStream says what the broker provisioned.
func describeStream(info *jetstream.StreamInfo) string {
	c := info.Config
	s := fmt.Sprintf("%s MaxAge %v, replicas %d, max consumers %d, per-message TTL %v, %d consumers",
		c.Name, c.MaxAge, c.Replicas, c.MaxConsumers, c.AllowMsgTTL, info.State.Consumers)
	if info.Cluster != nil && info.Cluster.Leader != "" {
		s += ", leader " + info.Cluster.Leader
	}
	return s
}

// sample is one reading of the CPU and message counters.
type sample struct {
	at          time.Time
	brokerTicks []uint64
	procTicks   []uint64
	in, out     int64
	inB, outB   int64 // bytes
	watch       int64
}

// take reads the counters of every running broker and candidate process.
func (b *bench) take(ctx context.Context, e *env, obs *observer) (sample, error) {
	s := sample{at: time.Now()}
	for _, br := range e.brokers {
		t, err := benchproc.CPUTicks(br.pid())
		if err != nil {
			return s, err
		}
		v, err := br.readVarz(ctx)
		if err != nil {
			return s, err
		}
		s.brokerTicks = append(s.brokerTicks, t)
		s.in += v.InMsgs
		s.out += v.OutMsgs
		s.inB += v.InBytes
		s.outB += v.OutBytes
	}
	for _, c := range e.candidates {
		t, err := benchproc.CPUTicks(c.pid())
		if err != nil {
			return s, err
		}
		s.procTicks = append(s.procTicks, t)
	}
	s.watch, _, _ = obs.stats()
	return s, nil
}

// measure reads the steady state over the window: the brokers' CPU and
// messages, each candidate process's CPU and memory, and for Conclave's
// each process's deliveries on the bucket's subjects against the writes to
// its own keys. With -profile it also reads a CPU profile of each broker
// over the window.
func (b *bench) measure(ctx context.Context, e *env, obs *observer, r *result) (*steady, error) {
	n := r.elections
	progress("steady state: measuring over %v", b.set.window)
	changes0, _ := obs.counts()
	st0, err := b.statusAll(ctx, e)
	if err != nil {
		return nil, err
	}
	w0 := obs.writeCounts()
	s0, err := b.take(ctx, e, obs)
	if err != nil {
		return nil, err
	}
	profiles := b.startProfiles(ctx, e, r)
	if err := b.profileCandidates(ctx, e, r, "window", "heap window0", "cpu-start"); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, b.set.window); err != nil {
		return nil, err
	}
	s1, err := b.take(ctx, e, obs)
	if err != nil {
		return nil, err
	}
	if err := b.profileCandidates(ctx, e, r, "window", "cpu-stop", "heap window1"); err != nil {
		return nil, err
	}
	w1 := obs.writeCounts()
	st1, err := b.statusAll(ctx, e)
	if err != nil {
		return nil, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	cores := func(a, b uint64) float64 { return float64(b-a) / clockTicks / secs }
	st := &steady{window: s1.at.Sub(s0.at), inPerSec: float64(s1.in-s0.in) / secs, outPerSec: float64(s1.out-s0.out) / secs,
		inBytes: float64(s1.inB-s0.inB) / secs, outBytes: float64(s1.outB-s0.outB) / secs,
		watchMsgs: float64(s1.watch-s0.watch) / secs}
	for i := range s0.brokerTicks {
		st.brokerCores += cores(s0.brokerTicks[i], s1.brokerTicks[i])
		rss, err := rssMB(e.brokers[i].pid())
		if err != nil {
			return nil, err
		}
		st.brokerRSS = append(st.brokerRSS, rss)
	}
	for i, c := range e.candidates {
		st.procCores = append(st.procCores, cores(s0.procTicks[i], s1.procTicks[i]))
		rss, err := rssMB(c.pid())
		if err != nil {
			return nil, err
		}
		st.procRSS = append(st.procRSS, rss)
		st.procBase = append(st.procBase, c.baseRSS)
		st.leading += st1[i].Leading
		if c.choria {
			continue
		}
		var own int64
		for _, k := range c.keys {
			own += w1[k] - w0[k]
		}
		st.deliveries = append(st.deliveries, float64(st1[i].KVMsgs-st0[i].KVMsgs))
		st.ownDeliv = append(st.ownDeliv, float64(st1[i].OwnMsgs-st0[i].OwnMsgs))
		st.ownWrites = append(st.ownWrites, float64(own))
		st.inMsgs = append(st.inMsgs, float64(st1[i].InMsgs-st0[i].InMsgs))
	}
	st.profiles = profiles()
	// Memory at rest, after the window: RSS above, then each process's
	// own account after a garbage collection.
	for _, c := range e.candidates {
		m, err := c.request(ctx, "mem", msgMem)
		if err != nil {
			return nil, err
		}
		st.mem = append(st.mem, m.Mem)
	}
	if len(st.mem) > 0 && st.mem[0] != nil {
		m := st.mem[0]
		progress("memory at rest, %s: RSS %.0f MB for %d candidates (%.1f KB each); heap %.1f KB, stacks %.1f KB, %.2f goroutines per candidate",
			e.candidates[0].name, st.procRSS[0], m.Candidates, st.procRSS[0]*1024/float64(m.Candidates),
			float64(m.HeapBytes)/1024/float64(m.Candidates), float64(m.StackBytes)/1024/float64(m.Candidates), float64(m.Goroutines)/float64(m.Candidates))
	}
	// An overloaded broker may answer late: the window's figures stand
	// without the consumer count.
	if info, err := b.streamInfoWithin(ctx, e, 30*time.Second); err == nil {
		st.consumers = info.State.Consumers
	} else {
		st.consumers = -1
		r.fail("consumers not counted: %v", err)
	}
	changes1, _ := obs.counts()
	st.changes = changes1 - changes0
	progress("steady: broker %.3f cores, %.0f msgs in/s, %.0f out/s, %d consumers, the observer's watch %.0f msgs/s; candidates count %d leaders for %d elections",
		st.brokerCores, st.inPerSec, st.outPerSec, st.consumers, st.watchMsgs, st.leading, n)
	if len(st.deliveries) > 0 {
		ratios := deliveryRatios(st)
		progress("deliveries per process / writes to its own keys: p50 %.2f, worst %.2f", pctF(ratios, 50), pctF(ratios, 100))
	}
	return st, nil
}

// killBusiest SIGKILLs the candidate process leading the most elections and
// measures how long its elections take to get new leaders.
func (b *bench) killBusiest(ctx context.Context, e *env, obs *observer, r *result) error {
	leads := obs.leaders()
	var victim *candidate
	for _, c := range e.candidates {
		if victim == nil || leads[c.identity] > leads[victim.identity] {
			victim = c
		}
	}
	if leads[victim.identity] == 0 {
		return fmt.Errorf("no candidate process leads an election: nothing to kill")
	}
	k := &killResult{victim: victim.identity}
	r.kill = k
	changes0, _ := obs.counts()
	at := time.Now()
	k.itLed = obs.startFailover(at, victim.identity, r.elections)
	if err := victim.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL %s: %w", victim.name, err)
	}
	progress("SIGKILL %s (pid %d), which led %d elections; waiting up to %v for new leaders", victim.name, victim.pid(), k.itLed, b.set.failDeadline)
	<-victim.done

	waitUntil(ctx, at.Add(b.set.failDeadline), func() bool { _, p := obs.failoverState(); return p == 0 })
	if ctx.Err() != nil {
		return ctx.Err()
	}
	k.took, k.unresolved = obs.failoverState()
	slices.Sort(k.took)
	k.late = obs.failoverLateness()
	slices.Sort(k.late)
	changes1, _ := obs.counts()
	k.changes = changes1 - changes0

	// The candidates' view: when each new leader's OnWon ran.
	won := map[string]int64{}
	for _, c := range e.candidates {
		if c == victim {
			continue
		}
		m, err := c.request(ctx, "wins "+strconv.FormatInt(at.UnixNano(), 10), msgWins)
		if err != nil {
			return err
		}
		for j, i := range m.Keys {
			key := c.keys[i]
			if prev, ok := won[key]; !ok || m.At[j] < prev {
				won[key] = m.At[j]
			}
		}
	}
	for _, ns := range won {
		k.onWon = append(k.onWon, time.Unix(0, ns).Sub(at))
	}
	slices.Sort(k.onWon)

	limit := b.set.ttl + time.Second
	if k.unresolved > 0 {
		r.fail("%d of the %d elections %s led had no new leader %v after the kill", k.unresolved, k.itLed, k.victim, b.set.failDeadline)
	} else {
		progress("every election %s led has a new leader: p50 %v, worst %v (target TTL + 1 s = %v)",
			k.victim, pct(k.took, 50).Round(time.Millisecond), k.took[len(k.took)-1].Round(time.Millisecond), limit)
	}
	if mf := b.set.maxFailover; mf > 0 && len(k.took) > 0 && k.took[len(k.took)-1] > mf {
		r.fail("the worst failover took %v, over the %v allowed (-max-failover)", k.took[len(k.took)-1].Round(time.Millisecond), mf)
	}
	return nil
}

// killStreamLeader SIGKILLs the node leading the election stream and
// measures how long until the stream has a new leader and every election is
// written again.
func (b *bench) killStreamLeader(ctx context.Context, e *env, obs *observer, r *result) error {
	info, err := b.streamInfo(ctx, e)
	if err != nil {
		return err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return fmt.Errorf("stream %s reports no leader", bucket.Stream)
	}
	var victim *broker
	for _, br := range e.brokers {
		if br.identity == info.Cluster.Leader {
			victim = br
		}
	}
	if victim == nil {
		return fmt.Errorf("stream leader %q is none of the brokers started", info.Cluster.Leader)
	}
	nr := &nodeResult{node: victim.identity}
	r.node = nr
	if e.nc.ConnectedServerName() == victim.identity {
		progress("the observer is connected to %s: it reconnects to another node", victim.identity)
	}
	var losses0 int64
	for _, c := range e.candidates {
		m, err := c.request(ctx, "status", msgStatus)
		if err != nil {
			return err
		}
		losses0 += m.Losses
	}
	changes0, _ := obs.counts()
	at := time.Now()
	obs.startFailover(at, "", r.elections)
	if err := victim.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL %s: %w", victim.name, err)
	}
	progress("SIGKILL %s (pid %d), the leader of %s; waiting up to %v for every election to be written again",
		victim.name, victim.pid(), bucket.Stream, b.set.failDeadline)
	<-victim.done

	deadline := at.Add(b.set.failDeadline)
	waitUntil(ctx, deadline, func() bool {
		if nr.streamLeader == 0 {
			if info, err := b.streamInfoWithin(ctx, e, time.Second); err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != victim.identity {
				// When the new leader took over, by its own account;
				// else when this poll saw it.
				nr.streamLeader, nr.newLeader = time.Since(at), info.Cluster.Leader
				if since := info.Cluster.LeaderSince; since != nil && since.After(at) {
					nr.streamLeader = since.Sub(at)
				}
				progress("stream %s has a new leader, %s, %v after the kill", bucket.Stream, nr.newLeader, nr.streamLeader.Round(time.Millisecond))
			}
		}
		_, p := obs.failoverState()
		return p == 0 && nr.streamLeader > 0
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	nr.took, nr.unresolved = obs.failoverState()
	slices.Sort(nr.took)
	changes1, _ := obs.counts()
	nr.changes = changes1 - changes0
	var losses1 int64
	for _, c := range e.candidates {
		m, err := c.request(ctx, "status", msgStatus)
		if err != nil {
			return err
		}
		losses1 += m.Losses
	}
	nr.losses = losses1 - losses0
	if nr.streamLeader == 0 {
		r.fail("stream %s had no new leader %v after its leader %s was killed", bucket.Stream, b.set.failDeadline, victim.identity)
	}
	if nr.unresolved > 0 {
		r.fail("%d of %d elections were not written again %v after the stream leader was killed", nr.unresolved, r.elections, b.set.failDeadline)
	} else {
		progress("every election written again after the node kill: p50 %v, worst %v; %d leader changes, %d OnLost",
			pct(nr.took, 50).Round(time.Millisecond), nr.took[len(nr.took)-1].Round(time.Millisecond), nr.changes, nr.losses)
	}
	if mf := b.set.maxFailover; mf > 0 && len(nr.took) > 0 && nr.took[len(nr.took)-1] > mf {
		r.fail("after the node kill the last election was written again after %v, over the %v allowed (-max-failover)", nr.took[len(nr.took)-1].Round(time.Millisecond), mf)
	}
	return nil
}

// liveSet is the identities of the candidate processes still running.
func (b *bench) liveSet(e *env) map[string]bool {
	live := map[string]bool{}
	for _, c := range e.candidates {
		if !c.exited() {
			live[c.identity] = true
		}
	}
	return live
}

// reportCandidates prints each candidate process's own count, to tell a
// slow election from a stuck process.
func (b *bench) reportCandidates(ctx context.Context, e *env) {
	for _, c := range e.candidates {
		m, err := c.request(ctx, "status", msgStatus)
		if err != nil {
			progress("  %s: %v", c.name, err)
			continue
		}
		line := fmt.Sprintf("  %s: leads %d, %d wins, %d losses, %d campaigns failed", c.name, m.Leading, m.Wins, m.Losses, m.Failed)
		if m.Err != "" {
			line += ": " + m.Err
		}
		progress("%s; log %s", line, c.log)
	}
}

// waitUntil polls cond every 100 ms until it holds (true), the deadline
// passes or ctx ends (false).
func waitUntil(ctx context.Context, deadline time.Time, cond func() bool) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pct returns the p-th percentile of sorted ds (nearest rank), 0 if empty.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds))*p/100+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// first returns at most n elements of s.
func first(s []string, n int) []string { return s[:min(n, len(s))] }

// profileCandidates runs profiling commands (cpu-start, cpu-stop, heap
// <what>) in every Conclave candidate process when -profile is set, in
// order; each command's file is named for the scenario, the phase and the
// process.
func (b *bench) profileCandidates(ctx context.Context, e *env, r *result, phase string, cmds ...string) error {
	if b.set.profile == "" || r.lib != libConclave {
		return nil
	}
	for _, c := range e.candidates {
		if c.exited() {
			continue
		}
		for _, cmd := range cmds {
			verb, what, _ := strings.Cut(cmd, " ")
			line := verb
			switch verb {
			case "cpu-start":
				line += " " + b.candidateProfile(r, c, phase+".cpu")
			case "heap":
				line += " " + b.candidateProfile(r, c, what+".heap")
			}
			if _, err := c.request(ctx, line, msgOK); err != nil {
				return fmt.Errorf("profiling: %w", err)
			}
		}
	}
	return nil
}

// candidateProfile is the path of candidate process c's profile what.
func (b *bench) candidateProfile(r *result, c *candidate, what string) string {
	return filepath.Join(b.set.profile, fmt.Sprintf("cand-%s-%s-%dx%dx%d-%s-%s.pprof", r.fileLabel(), r.names, r.elections, r.procs, r.copies, c.identity, what))
}
