package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// cpuLib is what one library's elections cost over the CPU window.
type cpuLib struct {
	broker  time.Duration // CPU of the broker serving this library only
	clients time.Duration // CPU of the process running this library's candidates
	msgs    msgCounts     // broker messages over the window
	status  clientStatus  // at the end of the window
}

// cpuResult is the outcome of the CPU scenario.
type cpuResult struct {
	elections   int
	perElection int
	window      time.Duration
	idle        time.Duration // CPU of an idle broker with the same bucket, same window
	lib         map[lib]cpuLib
	machineBusy float64 // cores busy on the whole machine during the window, everyone's
	cores       int
	partRatios  []float64 // net broker CPU ratio Conclave/Choria in each part of the window
}

// netBrokerPerElectionMinute is the broker CPU-seconds one election costs
// per minute, less what an idle broker uses.
func (r cpuResult) netBrokerPerElectionMinute(l lib) float64 {
	return max(r.lib[l].broker-r.idle, 0).Seconds() / (float64(r.elections) * r.window.Minutes())
}

func (r cpuResult) clientsPerElectionMinute(l lib) float64 {
	return r.lib[l].clients.Seconds() / (float64(r.elections) * r.window.Minutes())
}

// electionsPerTenthCore extrapolates linearly how many such elections one
// broker serves on a tenth of one core: 6 CPU-seconds per minute.
func (r cpuResult) electionsPerTenthCore(l lib) float64 {
	per := r.netBrokerPerElectionMinute(l)
	if per == 0 {
		return 0
	}
	return 6 / per
}

// cpuScenario starts three brokers in child processes with the same
// settings: one per library and one left idle as a baseline. Each library's
// elections (1 leader + standbys each, every candidate on its own
// connection) run in a child process of their own against their own broker,
// both libraries at the same time, so the two are measured over the same
// window under the same machine load. After the elections settle it reads
// every child's CPU time from /proc over the window.
func cpuScenario(ctx context.Context, cfg config, log func(string, ...any)) (cpuResult, error) {
	res := cpuResult{elections: cfg.cpuElections, perElection: 3, window: cfg.cpuWindow, lib: map[lib]cpuLib{}, cores: numCPU()}
	var children []*child
	defer func() {
		for _, c := range children {
			c.close()
		}
	}()
	brokers := map[string]*child{}
	urls := map[string]brokerReady{}
	for _, name := range []string{"idle", conclaveLib.String(), choriaLib.String()} {
		c, err := spawn(childArgs{Kind: "broker", TTL: cfg.ttl}, 30*time.Second)
		if err != nil {
			return res, err
		}
		children = append(children, c)
		brokers[name] = c
		var r brokerReady
		if err := json.Unmarshal(c.ready, &r); err != nil {
			return res, err
		}
		urls[name] = r
	}
	clients := map[lib]*child{}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, l := range libs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := spawn(childArgs{Kind: "clients", TTL: cfg.ttl, Lib: l, URL: urls[l.String()].URL,
				Elections: cfg.cpuElections, PerElection: res.perElection}, 2*time.Minute)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			children = append(children, c)
			clients[l] = c
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return res, errs[0]
	}
	log("cpu: %d elections × %d candidates per library started in %v; waiting for every election to have a leader", cfg.cpuElections, res.perElection, time.Since(start).Round(time.Millisecond))
	if err := waitLeaders(clients, cfg.cpuElections, start.Add(choriaSplay+time.Second), 4*cfg.ttl+30*time.Second); err != nil {
		return res, err
	}
	time.Sleep(time.Second) // past the last start-up campaigns

	type sample struct {
		cpu  map[string]time.Duration
		msgs map[lib]msgCounts
	}
	take := func() (sample, error) {
		s := sample{cpu: map[string]time.Duration{}, msgs: map[lib]msgCounts{}}
		for name, c := range brokers {
			d, err := c.cpu()
			if err != nil {
				return s, err
			}
			s.cpu["broker "+name] = d
		}
		for l, c := range clients {
			d, err := c.cpu()
			if err != nil {
				return s, err
			}
			s.cpu["clients "+l.String()] = d
			m, err := remoteVarz(ctx, urls[l.String()].Monitor)
			if err != nil {
				return s, err
			}
			s.msgs[l] = m
		}
		return s, nil
	}
	busy0, total0, err := machineCPU()
	if err != nil {
		return res, err
	}
	s0, err := take()
	if err != nil {
		return res, err
	}
	// The window is cut into parts, each sampled, so that the spread of the
	// ratio between parts shows how noisy the measurement was.
	parts := max(cfg.cpuParts, 1)
	log("cpu: measuring for %v in %d part%s", cfg.cpuWindow, parts, plural(parts))
	prev := s0
	var s1 sample
	for range parts {
		time.Sleep(cfg.cpuWindow / time.Duration(parts))
		if s1, err = take(); err != nil {
			return res, err
		}
		idle := s1.cpu["broker idle"] - prev.cpu["broker idle"]
		net := func(l lib) time.Duration {
			return max(s1.cpu["broker "+l.String()]-prev.cpu["broker "+l.String()]-idle, 0)
		}
		if ch := net(choriaLib); ch > 0 {
			res.partRatios = append(res.partRatios, net(conclaveLib).Seconds()/ch.Seconds())
		}
		prev = s1
	}
	busy1, total1, err := machineCPU()
	if err != nil {
		return res, err
	}
	if total1 > total0 {
		res.machineBusy = float64(busy1-busy0) / float64(total1-total0) * float64(res.cores)
	}
	res.idle = s1.cpu["broker idle"] - s0.cpu["broker idle"]
	for _, l := range libs {
		var st clientStatus
		if err := clients[l].status(&st); err != nil {
			return res, err
		}
		res.lib[l] = cpuLib{
			broker:  s1.cpu["broker "+l.String()] - s0.cpu["broker "+l.String()],
			clients: s1.cpu["clients "+l.String()] - s0.cpu["clients "+l.String()],
			msgs:    s1.msgs[l].sub(s0.msgs[l]),
			status:  st,
		}
	}
	return res, nil
}

// waitLeaders waits until every election of every library has a leader,
// and at least until notBefore (Choria's start-up splay).
func waitLeaders(clients map[lib]*child, elections int, notBefore time.Time, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		done := true
		var last string
		for l, c := range clients {
			var st clientStatus
			if err := c.status(&st); err != nil {
				return err
			}
			if st.Leaders < elections {
				done = false
				last = fmt.Sprintf("%s has %d leaders of %d elections", l, st.Leaders, elections)
			}
		}
		if done && !time.Now().Before(notBefore) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cpu: not every election has a leader after %v: %s", within, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
