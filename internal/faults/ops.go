package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The faults operators cause: TTL changes, full restarts, a broker that
// refuses consumers, purges, and two faults at once.

// connect opens a harness connection to the brokers, as an operator's
// client would: any node that answers.
func (b *brokers) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(strings.Join(b.urls(), ","),
		nats.Name("faults harness operator"), nats.Timeout(500*time.Millisecond),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// retry runs op until it succeeds or within passes, pausing between tries:
// the brokers may be restarting (a fault injected alongside).
func retry(ctx context.Context, within time.Duration, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(tctx)
		tcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setTTL changes the bucket's TTL the way an operator would: the stream's
// MaxAge, and its duplicate window with it (the KV API's choice: the TTL, at
// most two minutes; the server refuses a window longer than MaxAge). It
// records the TTL in force once the server has acknowledged it.
func (h *harness) setTTL(ctx context.Context, ttl time.Duration) error {
	err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
		nc, js, err := h.br.connect() // the brokers may be down: connect on every try
		if err != nil {
			return err
		}
		defer nc.Close()
		s, err := js.Stream(ctx, Stream)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		cfg.MaxAge, cfg.Duplicates = ttl, min(ttl, 2*time.Minute)
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("setting the bucket TTL to %v: %w", ttl, err)
	}
	h.event(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: ttl.String()})
	return nil
}

// changeTTL lowers the TTL to half (at least 1s, the election's minimum) or
// doubles it, holds it, and restores the run's TTL.
func (h *harness) changeTTL(ctx context.Context, k Kind) error {
	from, to := h.cfg.TTL, 2*h.cfg.TTL
	lo, hi := to, to*3/2
	if k == TTLLower {
		to = max(time.Second, from/2)
		lo, hi = 3*to, 4*to
	}
	hold := h.between(lo, hi)
	if h.cfg.Short {
		hold = lo // CI time: the shortest hold
	}
	h.begin(k, Bucket, fmt.Sprintf("%v → %v", from, to))
	if to == from {
		h.skip(k, Bucket, "the TTL %v cannot be lowered below the 1s minimum", from)
		return nil
	}
	if err := h.setTTL(ctx, to); err != nil {
		h.skip(k, Bucket, "%v", err)
		return nil
	}
	sleep(ctx, hold)
	if err := h.setTTL(ctx, from); err != nil {
		return err // the rest of the run would have the wrong TTL
	}
	if k == TTLRaise {
		// The restore is a lowering. A leader in touch with the broker
		// adopts a lowered TTL within one old TTL; the README promises
		// nothing for a leader cut off (or stopped) before then, whose key
		// expires by the new TTL while it counts on the old. So the next
		// fault waits: the fault ends one old TTL after the restore.
		sleep(ctx, to)
	}
	h.end(k, Bucket, "TTL %v for %v, then %v again", to, hold.Round(time.Millisecond), from)
	return nil
}

// restartAll stops every candidate process at the same moment, SIGTERM
// (restart-all) or SIGKILL (kill-all), waits until all have exited, and
// starts them all again: after a SIGKILL 0.2–1s later, after a graceful
// stop at once.
func (h *harness) restartAll(ctx context.Context, k Kind) error {
	h.begin(k, "all", "")
	h.stopAll(k == KillAll)
	var wait time.Duration
	if k == KillAll {
		wait = h.between(200*time.Millisecond, time.Second)
		sleep(ctx, wait)
	}
	for _, hs := range h.hosts {
		if err := h.startHost(hs); err != nil {
			return err
		}
	}
	how := "SIGTERM"
	if k == KillAll {
		how = fmt.Sprintf("SIGKILL; started %v later", wait.Round(time.Millisecond))
	}
	h.end(k, "all", "%d processes: %s", len(h.hosts), how)
	return nil
}

// stopAll sends every candidate process SIGKILL, or SIGTERM (a graceful
// stop), at once and returns when all have been reaped. A process that has
// not exited 15s after SIGTERM is killed.
func (h *harness) stopAll(kill bool) {
	for _, hs := range h.hosts {
		hs.proc.expected.Store(true)
	}
	ev := HvProcTerm
	if kill {
		ev = HvProcKill
	}
	for _, hs := range h.hosts {
		h.event(HarnessEvent{Ev: ev, Target: hs.procName, Host: hs.name})
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	for _, hs := range h.hosts {
		_ = hs.proc.signal(sig)
	}
	var wg sync.WaitGroup
	for _, hs := range h.hosts {
		p := hs.proc
		wg.Go(func() {
			if kill || p.wait(15*time.Second) {
				<-p.done
				return
			}
			h.note("%s did not exit within 15s of SIGTERM; killed", p.name)
			h.event(HarnessEvent{Ev: HvProcKill, Target: p.name, Host: HostOf(p.name)})
			p.kill()
		})
	}
	wg.Wait()
}

// purge purges the election key while someone leads: `nats kv purge`.
func (h *harness) purge(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	target := hs.procName
	h.begin(Purge, target, "")
	nc, js, err := h.br.connect()
	if err != nil {
		h.skip(Purge, target, "%v", err)
		return nil
	}
	defer nc.Close()
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(tctx, Bucket)
	if err == nil {
		err = kv.Purge(tctx, electionKey)
	}
	if err != nil {
		h.skip(Purge, target, "kv purge %s: %v", electionKey, err)
		return nil
	}
	h.event(HarnessEvent{Ev: HvPurge, Target: target})
	h.end(Purge, target, "kv purge %s", electionKey)
	return nil
}

// fillHeadroom is how far above the consumers in use refuse-consumers sets
// the stream's limit before filling it.
const fillHeadroom = 64

// lowerConsumerLimit sets the election stream's consumer limit to the
// consumers in use plus headroom, and returns how to put the old limit back.
func lowerConsumerLimit(ctx context.Context, js jetstream.JetStream, headroom int) (restore func() error, err error) {
	st, err := js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo()
	cfg := info.Config
	old := cfg.MaxConsumers
	cfg.MaxConsumers = info.State.Consumers + headroom
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, err
	}
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		st, err := js.Stream(rctx, "KV_"+Bucket)
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		cfg.MaxConsumers = old
		_, err = js.UpdateStream(rctx, cfg)
		return err
	}, nil
}

// maxFill bounds how many consumers refuse-consumers creates while looking
// for the limit it set, fillHeadroom above the consumers in use (more when
// the killed processes' consumers go): a lowered limit the cluster does not
// enforce (seen once right after a restart-cluster: 20,000 consumers made,
// and the run stalled deleting them) skips the fault instead.
const maxFill = 8 * fillHeadroom

// filler holds consumers on the election stream until the broker refuses
// more.
type filler struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	names []string
	next  int
}

// fillerSubject is what the harness's consumers filter on: a key no
// candidate writes, so that they cost the broker nothing but a slot.
const fillerSubject = "$KV." + Bucket + ".faults-filler"

// fill creates consumers, workers at a time, until the broker refuses one
// with "maximum consumers limit reached" (true) or maxFill are held (false).
func (f *filler) fill(ctx context.Context, workers int) (bool, error) {
	var full, failed atomicFlag
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !full.get() && !failed.get() && ctx.Err() == nil {
				f.mu.Lock()
				if len(f.names) >= maxFill {
					f.mu.Unlock()
					return
				}
				f.next++
				name := fmt.Sprintf("faults-filler-%d", f.next)
				f.mu.Unlock()
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := f.js.CreateConsumer(tctx, Stream, jetstream.ConsumerConfig{
					Name: name, FilterSubject: fillerSubject, AckPolicy: jetstream.AckNonePolicy,
					DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, MemoryStorage: true, Replicas: 1,
					InactiveThreshold: time.Hour,
				})
				cancel()
				switch {
				case err == nil:
					f.mu.Lock()
					f.names = append(f.names, name)
					f.mu.Unlock()
				case errors.Is(err, jetstream.ErrMaximumConsumersLimit):
					full.set()
				default:
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					failed.set()
				}
			}
		})
	}
	wg.Wait()
	return full.get(), firstErr
}

// held returns how many consumers the filler holds.
func (f *filler) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.names)
}

// drain deletes every consumer the filler created, 8 at a time.
func (f *filler) drain(ctx context.Context) error {
	f.mu.Lock()
	names := f.names
	f.names = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	ch := make(chan string)
	var mu sync.Mutex
	var errs []error
	for range 8 {
		wg.Go(func() {
			for name := range ch {
				err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
					err := f.js.DeleteConsumer(ctx, Stream, name)
					if errors.Is(err, jetstream.ErrConsumerNotFound) {
						return nil
					}
					return err
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("deleting consumer %s: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, n := range names {
		ch <- n
	}
	close(ch)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d consumers not deleted, first: %w", len(errs), len(names), errs[0])
	}
	return nil
}

type atomicFlag struct {
	mu sync.Mutex
	v  bool
}

func (a *atomicFlag) set() { a.mu.Lock(); a.v = true; a.mu.Unlock() }
func (a *atomicFlag) get() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.v
}

// refuseConsumers lowers the election stream's consumer limit to the
// consumers in use plus a little, fills it (the harness creates consumers
// until the broker refuses one), SIGKILLs every candidate process and starts them again, so that no
// candidate has a watch and none can create one, keeps the stream full for 3
// TTLs (refilling the slots the killed processes' watches free when the
// broker removes them), then deletes its consumers and restores the limit.
func (h *harness) refuseConsumers(ctx context.Context) error {
	h.begin(RefuseConsumers, Stream, "")
	nc, js, err := h.br.connect()
	if err != nil {
		h.skip(RefuseConsumers, Stream, "%v", err)
		return nil
	}
	defer nc.Close()
	// A Conclave broker allows a million consumers: stand in for a stock
	// server's 1,000 by lowering the stream's limit to a little above what
	// is in use, and put it back afterwards.
	// A cluster still recovering from an earlier fault (a stream leader
	// killed, a restart) can take a while to answer a stream update: try a
	// few times before skipping the fault.
	var restore func() error
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		restore, err = lowerConsumerLimit(tctx, js, fillHeadroom)
		cancel()
		if err == nil {
			break
		}
		if try == 4 || ctx.Err() != nil {
			h.skip(RefuseConsumers, Stream, "lowering the consumer limit (%d tries): %v", try, err)
			return nil
		}
		sleep(ctx, time.Duration(try)*time.Second)
	}
	defer func() {
		if err := restore(); err != nil {
			h.note("refuse-consumers: restoring the consumer limit: %v", err)
		}
	}()
	f := &filler{js: js}
	began := time.Now()
	full, err := f.fill(ctx, 8)
	if !full {
		why := fmt.Sprintf("no consumer limit reached with %d consumers of the harness", f.held())
		if err != nil {
			why = fmt.Sprintf("creating consumer %d: %v", f.held()+1, err)
		}
		if derr := f.drain(ctx); derr != nil {
			return derr
		}
		h.skip(RefuseConsumers, Stream, "%s", why)
		return nil
	}
	filled := time.Since(began)
	h.event(HarnessEvent{Ev: HvConsumers, Target: Stream, Detail: fmt.Sprintf("%d full", f.held())})

	hold := 3 * h.cfg.TTL
	stop := make(chan struct{})
	var refill sync.WaitGroup
	refill.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := f.fill(ctx, 1); err != nil && ctx.Err() == nil {
				h.note("refuse-consumers: refilling: %v", err)
				return
			}
		}
	})
	h.stopAll(true)
	wait := h.between(200*time.Millisecond, time.Second)
	sleep(ctx, wait)
	for _, hs := range h.hosts {
		if err := h.startHost(hs); err != nil {
			close(stop)
			refill.Wait()
			return err
		}
	}
	sleep(ctx, hold-wait)
	close(stop)
	refill.Wait()
	n := f.held()
	began = time.Now()
	if err := f.drain(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	h.event(HarnessEvent{Ev: HvConsumers, Target: Stream, Detail: "0"})
	h.end(RefuseConsumers, Stream, "limit reached with %d consumers of ours (filled in %v); every process restarted; held %v; freed in %v",
		n, filled.Round(time.Millisecond), hold, time.Since(began).Round(time.Millisecond))
	return nil
}

// doublePairs are the faults injected together by Double: the first
// begins, the second begins while the first is under way. They touch
// different things, so that they can run at once (the second's target is
// chosen when it begins).
var doublePairs = []struct {
	first, second Kind
	modes         []Mode
}{
	{DelayLink, StandDown, []Mode{Single, Cluster}},  // a forced stand-down while the leader's link is slow
	{DelayLink, Purge, []Mode{Single, Cluster}},      // a purge while the leader's link is slow
	{DelayLink, HandOver, []Mode{Single, Cluster}},   // a named hand-over while the leader's link is slow
	{DelayLink, StopLeader, []Mode{Single, Cluster}}, // a graceful stop, offering the key on, while the leader's link is slow
	{TTLRaise, StopLeader, []Mode{Single, Cluster}},  // a graceful stop while the TTL is raised
	{TTLRaise, KillLeader, []Mode{Single, Cluster}},  // a crash while the TTL is raised
	{TTLLower, RestartBroker, []Mode{Single}},        // a TTL change during a broker restart
	{TTLLower, KillStreamLeader, []Mode{Cluster}},    // a TTL change during a Raft failover
}

// double injects two faults at once: the first, and 0.3s–1 TTL later
// (after a lowered TTL: 1–1.17 old TTLs later), while it is under way, the
// second.
func (h *harness) double(ctx context.Context) error {
	var pairs [][2]Kind
	for _, p := range doublePairs {
		for _, m := range p.modes {
			if m == h.cfg.Mode {
				pairs = append(pairs, [2]Kind{p.first, p.second})
			}
		}
	}
	pair := pairs[h.intn(len(pairs))]
	target := string(pair[0]) + "+" + string(pair[1])
	h.begin(Double, target, "")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = h.fault(ctx, pair[0]) })
	stagger := h.between(300*time.Millisecond, h.cfg.TTL)
	if pair[0] == TTLLower {
		// Cut off from the broker before adopting a lowered TTL, a leader
		// may outlive its key (the README promises nothing then): the
		// second fault begins one old TTL after the lowering, while the
		// lowered TTL still holds (3–4 new TTLs).
		stagger = h.between(h.cfg.TTL, h.cfg.TTL*7/6)
	}
	sleep(ctx, stagger)
	wg.Go(func() { errs[1] = h.fault(ctx, pair[1]) })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	h.end(Double, target, "%s, then %s while it was under way", pair[0], pair[1])
	return nil
}
