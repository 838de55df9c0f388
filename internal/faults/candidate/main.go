// Command candidate is one process of the fault harness (package faults): it
// runs several election candidates ("workers") that share one identity and
// one NATS connection, as the workers of one program on one host do. Each
// leader writes to the harness's fencing resource every 50–100ms while its
// term is valid, and the process records every OnWon, OnLeading, renewal,
// OnLost and write, stamped with CLOCK_MONOTONIC, to a JSON-lines file.
//
// -priority ranks the process's candidates (streams.WithPriority) and
// -min-term sets how long a leader leads before it hands over to a better
// ranked one (streams.WithMinTerm). With -shards N the process also joins
// shard group -shard-group of N shards under its identity, and records each
// shard's term (OnAssigned, renewals, OnRevoked) by its key.
//
// SIGUSR1 arms a pause: the next write, right after its term was found
// valid, stops the whole process with SIGSTOP, which the harness ends with
// SIGCONT once another leader has taken over. SIGUSR2 disarms it. SIGTERM
// stops the candidates gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/internal/faults"
	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		os.Exit(1)
	}
}

type settings struct {
	proc, identity, servers, bucket, key, fence, records string
	shardGroup                                           string
	workers, priority, shards                            int
	minEvery, maxEvery, minTerm                          time.Duration
}

func parse(args []string) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	fs.StringVar(&s.proc, "proc", "", "name of this process, host and incarnation (h1.2)")
	fs.StringVar(&s.identity, "identity", "", "election identity, shared by the workers")
	fs.IntVar(&s.workers, "workers", 1, "candidates in this process")
	fs.StringVar(&s.servers, "servers", "", "comma-separated NATS URLs (the harness's proxies)")
	fs.StringVar(&s.bucket, "bucket", "CHORIA_LEADER_ELECTION", "election bucket")
	fs.StringVar(&s.key, "key", "faults", "election key")
	fs.StringVar(&s.fence, "fence", "", "base URL of the fencing resource")
	fs.StringVar(&s.records, "records", "", "JSON-lines record file to create")
	fs.IntVar(&s.priority, "priority", 0, "rank of the candidates (streams.WithPriority)")
	fs.DurationVar(&s.minTerm, "min-term", 0, "how long a leader leads before it hands over to a better ranked candidate (0: the election's default)")
	fs.IntVar(&s.shards, "shards", 0, "shards of the shard group the process joins beside its elections (0: none)")
	fs.StringVar(&s.shardGroup, "shard-group", "faultshards", "the shard group's name")
	fs.DurationVar(&s.minEvery, "min-every", 50*time.Millisecond, "shortest pause between a leader's writes")
	fs.DurationVar(&s.maxEvery, "max-every", 100*time.Millisecond, "longest pause between a leader's writes")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	switch {
	case s.proc == "" || s.identity == "" || s.servers == "" || s.fence == "" || s.records == "":
		return s, errors.New("-proc, -identity, -servers, -fence and -records are required")
	case s.workers < 1:
		return s, fmt.Errorf("-workers %d: need at least 1", s.workers)
	case s.shards < 0:
		return s, fmt.Errorf("-shards %d: need 0 (none) or more", s.shards)
	case s.minTerm < 0:
		return s, fmt.Errorf("-min-term %v: need 0 (the default) or more", s.minTerm)
	case s.minEvery <= 0 || s.maxEvery < s.minEvery:
		return s, fmt.Errorf("-min-every %v, -max-every %v: need 0 < min <= max", s.minEvery, s.maxEvery)
	}
	return s, nil
}

// process is what the workers of this process share.
type process struct {
	set   settings
	cal   faults.Calibration
	rec   *faults.Journal
	log   *logrus.Logger
	http  *http.Client
	armed atomic.Bool
}

func run(ctx context.Context, args []string) error {
	set, err := parse(args)
	if err != nil {
		return err
	}
	rec, err := faults.CreateJournal(set.records)
	if err != nil {
		return err
	}
	defer rec.Close()
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel) // a file per process; the election logs little at debug
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	p := &process{
		set: set, cal: faults.Calibrate(), rec: rec, log: log,
		http: &http.Client{Timeout: 2 * time.Second},
	}
	p.record(faults.CandidateRecord{Ev: faults.EvStart, PID: os.Getpid(), Identity: set.identity, Priority: set.priority,
		Detail: fmt.Sprintf("calibration ±%v", p.cal.Uncertainty())})

	arm := make(chan os.Signal, 4)
	signal.Notify(arm, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(arm)
	go func() {
		for sig := range arm {
			p.armed.Store(sig == syscall.SIGUSR1)
		}
	}()

	nc, err := p.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := p.bucket(ctx, nc)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	var wg sync.WaitGroup
	var workers []*worker
	errs := make([]error, set.workers)
	for i := range set.workers {
		w := &worker{p: p, name: fmt.Sprintf("%s.w%d", set.proc, i)}
		// A leader marks its release (through js), so that after a full
		// restart the first new candidate leads at once.
		opts := []streams.Option{
			streams.InBucket(set.bucket),
			streams.OnWon(w.won), streams.OnLeading(w.leading), streams.OnLost(w.lost),
			streams.OnCampaign(w.campaigning),
			streams.WithLogger(log.WithField("cand", w.name)),
			streams.WithPriority(set.priority),
		}
		if set.minTerm > 0 {
			opts = append(opts, streams.WithMinTerm(set.minTerm))
		}
		e, err := streams.NewElection(set.identity, set.key, js, opts...)
		if err != nil {
			return err
		}
		workers = append(workers, w)
		wg.Go(func() { errs[i] = e.Start(ctx) })
		wg.Go(func() { w.work(ctx) })
	}
	wg.Go(func() { p.countCampaigns(ctx, workers) })
	var shardErr error
	if set.shards > 0 {
		m := &member{p: p, terms: map[int]*streams.Term{}}
		g, err := shards.NewGroup(set.identity, set.shardGroup, set.shards, js,
			shards.InBucket(set.bucket), shards.OnAssigned(m.assigned), shards.OnRevoked(m.revoked),
			shards.WithLogger(log.WithField("group", set.shardGroup)))
		if err != nil {
			return err
		}
		wg.Go(func() { shardErr = g.Start(ctx) })
	}
	wg.Wait()
	p.record(faults.CandidateRecord{Ev: faults.EvExit})
	return errors.Join(append(errs, shardErr)...)
}

// member is the process's member of the shard group: it records each
// shard's term as a worker records its election's.
type member struct {
	p     *process
	mu    sync.Mutex
	terms map[int]*streams.Term
}

func (m *member) key(shard int) string { return shards.Key(m.p.set.shardGroup, shard) }

func (m *member) assigned(shard int, t *streams.Term) {
	vu := t.ValidUntil()
	m.p.record(faults.CandidateRecord{Ev: faults.EvShardLeading, Key: m.key(shard), Token: t.Token(),
		Started: m.p.cal.Mono(t.Started()), ValidUntil: m.p.cal.Mono(vu)})
	m.mu.Lock()
	m.terms[shard] = t
	m.mu.Unlock()
	go watchRenewals(t, vu, func(vu time.Time) {
		m.p.record(faults.CandidateRecord{Ev: faults.EvShardRenewed, Key: m.key(shard), Token: t.Token(), ValidUntil: m.p.cal.Mono(vu)})
	})
}

func (m *member) revoked(shard int) {
	m.mu.Lock()
	t := m.terms[shard]
	delete(m.terms, shard)
	m.mu.Unlock()
	if t == nil {
		m.p.record(faults.CandidateRecord{Ev: faults.EvShardLost, Key: m.key(shard), Detail: "no term seen"})
		return
	}
	m.p.record(faults.CandidateRecord{Ev: faults.EvShardLost, Key: m.key(shard), Token: t.Token(),
		Cause: t.Cause().String(), ValidUntil: m.p.cal.Mono(t.ValidUntil())})
}

func (p *process) record(r faults.CandidateRecord) {
	if r.At == 0 {
		r.At = faults.Mono()
	}
	r.Proc = p.set.proc
	switch err := p.rec.Append(r); {
	case errors.Is(err, faults.ErrJournalClosed):
		// A connection handler running after the end: nothing to record.
	case err != nil:
		// A candidate that cannot record makes the run unverifiable.
		p.log.Fatalf("recording %s: %v", r.Ev, err)
	}
}

// connect dials the broker through the harness's proxies only: discovered
// cluster URLs would bypass them.
func (p *process) connect() (*nats.Conn, error) {
	return nats.Connect(p.set.servers,
		nats.Name("faults candidate "+p.set.proc),
		nats.IgnoreDiscoveredServers(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, 0),
		nats.Timeout(time.Second),
		// Notice a blackholed link within a few seconds.
		nats.PingInterval(time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			p.record(faults.CandidateRecord{Ev: faults.EvDisconnected, Detail: fmt.Sprint(err)})
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.record(faults.CandidateRecord{Ev: faults.EvReconnected, Detail: nc.ConnectedUrlRedacted()})
		}),
	)
}

// bucket waits until the election bucket can be opened, retrying every
// 200ms while the broker is away (the elections' own retries back off to
// 5s), and returns the JetStream context the candidates campaign over.
func (p *process) bucket(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	for {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.KeyValue(tctx, p.set.bucket)
		cancel()
		if err == nil {
			return js, nil
		}
		p.log.Warnf("opening bucket %s: %v", p.set.bucket, err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// worker is one candidate.
type worker struct {
	p         *process
	name      string
	term      atomic.Pointer[streams.Term] // the current term, from OnLeading to OnLost
	seq       uint64
	campaigns atomic.Int64 // attempts to win since countCampaigns last looked
}

func (w *worker) campaigning(s streams.State) {
	if s == streams.CandidateState {
		w.campaigns.Add(1)
	}
}

// countCampaigns records, every second, how often each worker tried to win:
// a standby should try about once per takeover, not many times a second.
func (p *process) countCampaigns(ctx context.Context, workers []*worker) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, w := range workers {
			if n := w.campaigns.Swap(0); n > 0 {
				p.record(faults.CandidateRecord{Ev: faults.EvCampaigns, Cand: w.name, Count: int(n)})
			}
		}
	}
}

func (w *worker) won() {
	w.p.record(faults.CandidateRecord{Ev: faults.EvWon, Cand: w.name})
}

func (w *worker) leading(t *streams.Term) {
	vu := t.ValidUntil()
	w.p.record(faults.CandidateRecord{Ev: faults.EvLeading, Cand: w.name, Token: t.Token(),
		Started: w.p.cal.Mono(t.Started()), ValidUntil: w.p.cal.Mono(vu)})
	w.term.Store(t)
	go watchRenewals(t, vu, func(vu time.Time) {
		w.p.record(faults.CandidateRecord{Ev: faults.EvRenewed, Cand: w.name, Token: t.Token(), ValidUntil: w.p.cal.Mono(vu)})
	})
}

func (w *worker) lost() {
	t := w.term.Swap(nil)
	if t == nil {
		w.p.record(faults.CandidateRecord{Ev: faults.EvLost, Cand: w.name, Detail: "no term seen"})
		return
	}
	w.p.record(faults.CandidateRecord{Ev: faults.EvLost, Cand: w.name, Token: t.Token(),
		Cause: t.Cause().String(), ValidUntil: w.p.cal.Mono(t.ValidUntil())})
}

// watchRenewals calls renewed at every move of the term's deadline, so
// that the checker knows how long the term could last if the process dies
// without an OnLost.
func watchRenewals(t *streams.Term, last time.Time, renewed func(validUntil time.Time)) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.Done():
			return
		case <-tick.C:
		}
		vu := t.ValidUntil()
		if !t.Valid() {
			return
		}
		if !vu.Equal(last) {
			last = vu
			renewed(vu)
		}
	}
}

// work writes to the fencing resource every 50–100ms while this worker's
// term is valid.
func (w *worker) work(ctx context.Context) {
	span := int64(w.p.set.maxEvery - w.p.set.minEvery)
	for {
		pause := w.p.set.minEvery + time.Duration(rand.Int64N(span+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		t := w.term.Load()
		if t == nil {
			continue
		}
		// Read the clock before Valid: if the term is valid at Valid's
		// instant, it was valid at this earlier one too.
		checked := faults.Mono()
		if !t.Valid() {
			continue
		}
		w.seq++
		r := faults.CandidateRecord{Ev: faults.EvWrite, Cand: w.name, Token: t.Token(), Seq: w.seq, Checked: checked}
		if w.p.armed.CompareAndSwap(true, false) {
			// The paused-leader case at its worst: between the check and
			// the write.
			w.p.record(faults.CandidateRecord{Ev: faults.EvSelfStop, Cand: w.name, Token: r.Token, Seq: r.Seq, Checked: checked})
			stopSelf()
		}
		r.Sent = faults.Mono()
		verdict, err := w.p.write(ctx, r)
		r.Verdict = verdict
		if err != nil {
			r.Verdict, r.Detail = "error", err.Error()
		}
		w.p.record(r)
	}
}

// stopSelf stops the whole process with SIGSTOP before it returns. Sent to
// the process, the signal may be taken by another thread while this one runs
// on (and writes); sent to this thread, it stops this thread on its way back
// from the system call, and the rest of the process with it.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// write sends one write to the fencing resource, once more if the first
// attempt failed in transport (the resource answers a repeat with its first
// verdict).
func (p *process) write(ctx context.Context, r faults.CandidateRecord) (string, error) {
	q := url.Values{}
	q.Set("cand", r.Cand)
	q.Set("token", strconv.FormatUint(r.Token, 10))
	q.Set("seq", strconv.FormatUint(r.Seq, 10))
	q.Set("checked", strconv.FormatInt(r.Checked, 10))
	u := p.set.fence + "/write?" + q.Encode()
	var err error
	for range 2 {
		var verdict string
		verdict, err = p.get(ctx, u)
		if err == nil {
			return verdict, nil
		}
	}
	return "", err
}

func (p *process) get(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	verdict := strings.TrimSpace(string(b))
	if verdict != faults.Accepted && verdict != faults.Rejected {
		return "", fmt.Errorf("fence answered %s: %s", resp.Status, verdict)
	}
	return verdict, nil
}
