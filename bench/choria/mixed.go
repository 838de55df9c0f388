package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// recorder keeps every event of the mixed election in order, and who
// believes it leads right now.
type recorder struct {
	mu      sync.Mutex
	events  []event
	leading map[*candidate]bool
}

func newRecorder() *recorder { return &recorder{leading: map[*candidate]bool{}} }

func (r *recorder) sink(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	switch e.kind {
	case evWon:
		r.leading[e.c] = true
	case evLost, evStopped:
		delete(r.leading, e.c)
	}
}

// leader returns a candidate other than except that believes it leads.
func (r *recorder) leader(except *candidate) *candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.leading {
		if c != except {
			return c
		}
	}
	return nil
}

func (r *recorder) isLeading(c *candidate) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading[c]
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// mixedResult is what the mixed election showed.
type mixedResult struct {
	duration   time.Duration
	grace      time.Duration
	perLib     int
	joined     map[lib]int    // candidates that took part, replacements included
	actions    map[string]int // "graceful stop of a Conclave leader" → count
	terms      map[lib]int
	handovers  map[string][]time.Duration // "Conclave → Choria" → leaderless gaps
	overlaps   []string
	minGap     time.Duration
	noLeader   int            // rounds that found no leader within the bound
	anomalies  map[string]int // callback sequences that break the OnWon/OnLost contract
	totalTerms int
}

// mixed runs Choria and Conclave candidates in one election, stops or
// crashes whoever leads, over and over, and checks from the recorded
// OnWon/OnLost that there was never more than one leader.
//
// Conclave standbys take a free key at once, long before a Choria standby's
// next campaign, so left alone Conclave would win every time. To get every
// kind of handover, each round picks which library should lead next, in a
// repeating pattern; when it is Choria, the Conclave standbys are stopped
// first, and every library is topped up to its number of candidates again
// once the next leader has won.
//
// A leader's term runs from its OnWon to its OnLost. A Choria candidate
// stopped by cancelling its context never calls OnLost, so its term ends
// when its Start returns. Crashed candidates (connection closed) keep
// running until 2×TTL later, so their own belief that they lead counts too.
func (b *bench) mixed(ctx context.Context) (mixedResult, error) {
	res := mixedResult{duration: b.cfg.mixed, grace: b.cfg.grace, perLib: b.cfg.mixedPerLib,
		joined: map[lib]int{}, actions: map[string]int{}}
	rec := newRecorder()
	key := b.key("mixed")
	var (
		all     []*candidate // every candidate ever started, to stop at the end
		running []*candidate // those not stopped or crashed
		crashed sync.WaitGroup
	)
	defer func() {
		crashed.Wait()
		stopAll(all)
	}()
	addOne := func(l lib) error {
		grace := time.Duration(0)
		if l == conclaveLib {
			grace = b.cfg.grace
		}
		c, err := b.candidateTo(ctx, l, key, rec.sink, grace)
		if err != nil {
			return err
		}
		c.start()
		all, running = append(all, c), append(running, c)
		res.joined[l]++
		return nil
	}
	topUp := func() error {
		count := map[lib]int{}
		for _, c := range running {
			count[c.lib]++
		}
		for _, l := range libs {
			for ; count[l] < b.cfg.mixedPerLib; count[l]++ {
				if err := addOne(l); err != nil {
					return err
				}
			}
		}
		return nil
	}
	remove := func(c *candidate) { running = slices.DeleteFunc(running, func(o *candidate) bool { return o == c }) }
	if err := topUp(); err != nil {
		return res, err
	}
	// Over 8 rounds the pattern gives each kind of handover (Conclave →
	// Conclave, Conclave → Choria, Choria → Choria, Choria → Conclave) once
	// after a graceful stop and once after a crash.
	pattern := []lib{conclaveLib, conclaveLib, choriaLib, choriaLib}
	round := rand.N(2 * len(pattern))
	end := time.Now().Add(b.cfg.mixed)
	var prev *candidate
	for time.Now().Before(end) {
		l := waitLeader(rec, prev, min(time.Until(end), b.leaderWithin()))
		if l == nil {
			if time.Now().Before(end) {
				res.noLeader++
			}
			continue
		}
		if err := topUp(); err != nil {
			return res, err
		}
		time.Sleep(min(time.Duration(float64(b.cfg.ttl)*(0.3+0.7*rand.Float64())), max(time.Until(end), 0)))
		if !time.Now().Before(end) {
			break
		}
		prev = l
		if !rec.isLeading(l) {
			continue
		}
		next := pattern[round%len(pattern)]
		if next == choriaLib {
			for _, c := range slices.Clone(running) {
				if c.lib == conclaveLib && c != l {
					c.stop()
					remove(c)
				}
			}
		}
		remove(l)
		crash := round/len(pattern)%2 == 1
		round++
		if crash {
			res.actions["crash of a "+l.lib.String()+" leader"]++
			l.crash()
			crashed.Add(1)
			time.AfterFunc(2*b.cfg.ttl, func() { l.stop(); crashed.Done() })
		} else {
			res.actions["graceful stop of a "+l.lib.String()+" leader"]++
			go l.stop()
		}
		if l.lib == choriaLib || next == conclaveLib {
			// Replace the leader at once, unless that would put a Conclave
			// standby back before a Choria turn.
			if err := addOne(l.lib); err != nil {
				return res, err
			}
		}
	}
	crashed.Wait()
	stopAll(all)
	analyzeMixed(rec.snapshot(), &res)
	return res, nil
}

// waitLeader waits up to within for a candidate other than except to lead.
func waitLeader(rec *recorder, except *candidate, within time.Duration) *candidate {
	deadline := time.Now().Add(within)
	for {
		if c := rec.leader(except); c != nil {
			return c
		}
		if !time.Now().Before(deadline) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// term is one candidate's leadership as its callbacks told it.
type term struct {
	c        *candidate
	from, to time.Time
	how      string // what ended it
	cause    string // what the benchmark did to its leader: "stop", "crash" or ""
}

// terms rebuilds every term from the events, and notes callback sequences
// that break the contract (OnLost without OnWon, OnWon twice).
func terms(events []event) ([]term, map[string]int) {
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	open := map[*candidate]time.Time{}
	stopAsked := map[*candidate]bool{}
	crashed := map[*candidate]bool{}
	cause := func(c *candidate) string {
		switch {
		case crashed[c]:
			return "crash"
		case stopAsked[c]:
			return "stop"
		}
		return ""
	}
	anomalies := map[string]int{}
	var out []term
	for _, e := range events {
		from, leading := open[e.c]
		switch e.kind {
		case evStopAsked:
			stopAsked[e.c] = true
		case evCrashed:
			crashed[e.c] = true
		case evWon:
			if leading {
				anomalies[e.c.lib.String()+": OnWon twice without OnLost"]++
				continue
			}
			if stopAsked[e.c] {
				anomalies[e.c.lib.String()+": OnWon after it was asked to stop"]++
			}
			open[e.c] = e.at
		case evLost:
			if !leading {
				anomalies[e.c.lib.String()+": OnLost without OnWon"]++
				continue
			}
			delete(open, e.c)
			out = append(out, term{c: e.c, from: from, to: e.at, how: "OnLost", cause: cause(e.c)})
		case evStopped:
			if leading {
				delete(open, e.c)
				out = append(out, term{c: e.c, from: from, to: e.at, how: "stopped without OnLost", cause: cause(e.c)})
				if e.c.lib == conclaveLib {
					anomalies["Conclave: stopped while leading without OnLost"]++
				}
			}
		}
	}
	for c, from := range open {
		anomalies[c.lib.String()+": still leading at the end"]++
		out = append(out, term{c: c, from: from, to: time.Now(), how: "end of run"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from.Before(out[j].from) })
	return out, anomalies
}

func analyzeMixed(events []event, res *mixedResult) {
	ts, anomalies := terms(events)
	res.anomalies = anomalies
	res.terms = map[lib]int{}
	res.handovers = map[string][]time.Duration{}
	res.totalTerms = len(ts)
	res.minGap = -1
	var cur *term
	for i := range ts {
		t := &ts[i]
		res.terms[t.c.lib]++
		if cur == nil {
			cur = t
			continue
		}
		gap := t.from.Sub(cur.to)
		if gap < 0 {
			res.overlaps = append(res.overlaps, fmt.Sprintf("%s (%s) from %s to %s overlaps %s (%s) by %v",
				t.c.id, t.c.lib, t.from.Format("15:04:05.000"), t.to.Format("15:04:05.000"), cur.c.id, cur.c.lib, -gap))
		} else {
			k := cur.c.lib.String() + " → " + t.c.lib.String()
			switch cur.cause {
			case "stop":
				k += " after a stop"
			case "crash":
				k += " after a crash"
			default:
				k += " (leader lost on its own)"
			}
			res.handovers[k] = append(res.handovers[k], gap)
			if res.minGap < 0 || gap < res.minGap {
				res.minGap = gap
			}
		}
		if t.to.After(cur.to) {
			cur = t
		}
	}
}

// describeCounts renders a map of counts as "a 1, b 2" in key order.
func describeCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, "; ")
}
