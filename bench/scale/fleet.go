package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// brokerBin is the broker binary: the conclave CLI, or with -profile the
// profiling broker built from the same code.
func (b *bench) brokerBin() string {
	if b.pprofBin != "" {
		return b.pprofBin
	}
	return b.cli
}

// startConclave starts a Conclave candidate process per element of
// assigned (its keys), waits until each has built its elections, and tells
// them all to campaign. It returns when it told them.
func (b *bench) startConclave(ctx context.Context, e *env, dir string, urls []string, assigned [][]string, r *result) (time.Time, error) {
	for i, keys := range assigned {
		c, err := startCandidate(dir, b.self, fmt.Sprintf("p%d", i+1), urls, keys, r.copies, r.announce)
		if err != nil {
			return time.Time{}, err
		}
		e.candidates = append(e.candidates, c)
	}
	for _, c := range e.candidates {
		m, err := c.await(ctx, msgReady, setupDeadline)
		if err != nil {
			return time.Time{}, fmt.Errorf("waiting for candidate processes to build their elections: %w", err)
		}
		r.setupMax = max(r.setupMax, time.Duration(m.Setup*float64(time.Second)))
		c.baseRSS = m.BaseRSS
	}
	progress("%d candidate processes built %d elections each (slowest in %v); campaigning", len(assigned), r.perProc, r.setupMax.Round(time.Millisecond))
	if err := b.profileCandidates(ctx, e, r, "start", "heap built", "cpu-start"); err != nil {
		return time.Time{}, err
	}
	goAt := time.Now()
	for _, c := range e.candidates {
		if err := c.send("go"); err != nil {
			return goAt, err
		}
	}
	return goAt, nil
}

// awaitFirstLeaders waits until the observer has seen a leader's write in
// each of the n elections, or the deadline.
func (b *bench) awaitFirstLeaders(ctx context.Context, obs *observer, goAt time.Time, n int) bool {
	lastReport := time.Now()
	return waitUntil(ctx, goAt.Add(b.set.electDeadline), func() bool {
		led, _ := obs.firsts(n)
		if time.Since(lastReport) > 10*time.Second {
			lastReport = time.Now()
			progress("  %d of %d elections have had a leader", led, n)
		}
		return led == n
	})
}

// startChoria starts a Choria candidate process per element of assigned
// (they campaign at once) and waits until every one of the n elections has
// a leader by the processes' own count: an OnWon without an OnLost since,
// which for Choria comes 0.75×TTL + 200 ms after the write that took the
// key. It returns whether they all did by the deadline and when each
// election was first seen led (polled every 500 ms).
func (b *bench) startChoria(ctx context.Context, e *env, dir, url string, assigned [][]string, n int) (bool, []time.Time, error) {
	for i, keys := range assigned {
		c, err := startChoria(dir, b.choriaBin, i, url, keys, b.set.copies)
		if err != nil {
			return false, nil, err
		}
		e.candidates = append(e.candidates, c)
	}
	for _, c := range e.candidates {
		if _, err := c.await(ctx, msgReady, setupDeadline); err != nil {
			return false, nil, fmt.Errorf("waiting for Choria candidate processes to start: %w", err)
		}
	}
	progress("%d Choria candidate processes started; they campaign after their splay (up to 5 s) and win after 0.75×TTL + 200 ms", len(assigned))
	firstLed := map[string]time.Time{}
	deadline := time.Now().Add(b.set.electDeadline)
	lastReport := time.Now()
	var failure error
	ok := waitUntil(ctx, deadline, func() bool {
		if failure != nil {
			return true
		}
		now := time.Now()
		ms, err := b.statusAll(ctx, e)
		if err != nil {
			failure = err
			return true
		}
		for i, m := range ms {
			if m.Failed > 0 {
				failure = fmt.Errorf("%s: %d errors: %s", e.candidates[i].name, m.Failed, m.Err)
				return true
			}
			for _, k := range m.Keys {
				if key := e.candidates[i].keys[k]; firstLed[key].IsZero() {
					firstLed[key] = now
				}
			}
		}
		if time.Since(lastReport) > 10*time.Second {
			lastReport = time.Now()
			progress("  %d of %d elections have had a leader", len(firstLed), n)
		}
		return len(firstLed) == n
	})
	var firsts []time.Time
	for _, t := range firstLed {
		firsts = append(firsts, t)
	}
	if failure != nil {
		return false, firsts, failure
	}
	return ok && len(firstLed) == n, firsts, nil
}

// statusAll asks every running candidate process for its status, a few at
// a time.
func (b *bench) statusAll(ctx context.Context, e *env) ([]childMsg, error) {
	out := make([]childMsg, len(e.candidates))
	errs := make([]error, len(e.candidates))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, c := range e.candidates {
		if c.exited() {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = c.request(ctx, "status", msgStatus)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// loadavg is the 1, 5 and 15 minute load averages, from /proc/loadavg.
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
