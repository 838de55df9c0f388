package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/nostanding"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// fleetCandidates is how many candidates each election of the fleet has,
// each on a connection of its own, as three processes would.
const fleetCandidates = 3

// fleetCost is what a fleet of elections costs once every one is led.
type fleetCost struct {
	led      time.Duration // start until every election led
	window   time.Duration
	writes   float64 // key writes per second
	in, out  float64 // broker messages per second
	bin, bou float64 // broker bytes per second
	cpu      float64 // this process's CPU (broker and candidates), in cores
}

// fleetCost starts b.cfg.fleet elections of fleetCandidates candidates on a
// bucket of TTL b.cfg.fleetTTL, with who is standing on or off, waits
// until every one is led and a TTL more, and measures the broker's
// messages and bytes over one announcement interval: each process's
// candidates announce themselves exactly once in it.
func (b *bench) fleetCost(standingOn bool) (fleetCost, error) {
	var cost fleetCost
	if err := b.provision(b.cfg.fleetTTL); err != nil {
		return cost, err
	}
	ctx := context.Background()
	if !standingOn {
		ctx = nostanding.Context(ctx)
	}
	var (
		led     atomic.Int64
		allLed  = make(chan struct{})
		running sync.WaitGroup
		es      []*streams.Election
	)
	defer func() {
		// Stop every candidate, many at a time: each leader releases.
		sem := make(chan struct{}, 256)
		var wg sync.WaitGroup
		for _, e := range es {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				e.Stop()
			}()
		}
		wg.Wait()
		running.Wait()
	}()
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	keys := make([]string, b.cfg.fleet)
	for i := range keys {
		keys[i] = b.key()
	}
	start := time.Now()
	for p := range fleetCandidates {
		nc, err := b.connect(b.opts)
		if err != nil {
			return cost, err
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return cost, fmt.Errorf("jetstream: %w", err)
		}
		identity := fmt.Sprintf("fleet-p%d", p+1)
		for _, key := range keys {
			e, err := streams.NewElection(identity, key, js, streams.OnWon(func() {
				if led.Add(1) == int64(len(keys)) {
					close(allLed)
				}
			}))
			if err != nil {
				return cost, fmt.Errorf("election %s: %w", key, err)
			}
			es = append(es, e)
			running.Add(1)
			go func() {
				defer running.Done()
				_ = e.Start(ctx)
			}()
		}
	}
	select {
	case <-allLed:
		cost.led = time.Since(start)
	case <-time.After(5 * time.Minute):
		return cost, fmt.Errorf("%d of %d elections led after 5 min", led.Load(), len(keys))
	}
	time.Sleep(b.cfg.fleetTTL) // past the start's announcements and first renewals

	cost.window = standing.AnnouncementInterval(b.cfg.fleetTTL)
	c0, err := b.counts()
	if err != nil {
		return cost, err
	}
	cpu0 := cpuTime()
	time.Sleep(cost.window)
	cpu1 := cpuTime()
	c1, err := b.counts()
	if err != nil {
		return cost, err
	}
	v0, v1 := c0.varz, c1.varz
	secs := cost.window.Seconds()
	cost.writes = float64(c1.seq-c0.seq) / secs
	cost.in, cost.out = float64(v1.InMsgs-v0.InMsgs)/secs, float64(v1.OutMsgs-v0.OutMsgs)/secs
	cost.bin, cost.bou = float64(v1.InBytes-v0.InBytes)/secs, float64(v1.OutBytes-v0.OutBytes)/secs
	cost.cpu = (cpu1 - cpu0).Seconds() / secs
	if n := led.Load(); n != int64(len(keys)) {
		return cost, fmt.Errorf("%d wins for %d elections while measuring: leadership moved", n, len(keys))
	}
	return cost, nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// printFleet prints the announcement cost table.
func (b *bench) printFleet() {
	cfg, off, on := b.cfg, b.res.fleet[0], b.res.fleet[1]
	fmt.Printf("\nWho is standing at fleet scale: %d elections × %d candidates (a connection per candidate's process, as %d processes), TTL %v, measured over one announcement interval (%v) once every election led; off is the same fleet without who is standing (no announcements, questions or answers):\n\n",
		cfg.fleet, fleetCandidates, fleetCandidates, cfg.fleetTTL, on.window)
	fmt.Println("| who is standing | all led after | key writes/s | broker messages in/s | broker messages out/s | broker bytes in/s | broker bytes out/s | process CPU, cores (broker and candidates) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		c    fleetCost
	}{{"off", off}, {"on", on}} {
		fmt.Printf("| %s | %v | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f |\n", r.name, round(r.c.led), r.c.writes, r.c.in, r.c.out, r.c.bin, r.c.bou, r.c.cpu)
	}
	extra := func(on, off float64) string { return fmt.Sprintf("%+.1f%%", 100*(on-off)/off) }
	fmt.Printf("| on against off | | | %s | %s | %s | %s | %s |\n", extra(on.in, off.in), extra(on.out, off.out), extra(on.bin, off.bin), extra(on.bou, off.bou), extra(on.cpu, off.cpu))
	fmt.Printf("\nAnnouncements add %s of the broker's messages (in and out) to the election's own (target: at most +10%%).\n", extra(on.in+on.out, off.in+off.out))
}
