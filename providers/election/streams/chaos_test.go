package streams

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chaosCandidate is one campaigning candidate with a connection of its own,
// so that closing it cuts off that candidate alone.
type chaosCandidate struct {
	name string
	nc   *nats.Conn
	e    *Election
	stop func()
}

// chaosElection is one election's candidates and their history.
type chaosElection struct {
	key        string
	rec        *recorder
	mu         sync.Mutex
	candidates []*chaosCandidate
	started    int
}

type chaosRun struct {
	t   *testing.T
	ts  *testServer
	ttl time.Duration // the largest TTL the bucket had during the run

	mu           sync.Mutex
	disturbances []time.Time // deletes, and the moments the broker came back
	counts       map[string]int
}

func (r *chaosRun) disturbed(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disturbances = append(r.disturbances, time.Now())
	r.counts[kind]++
}

// add starts a new candidate in el. Every third shares the identity "host",
// as the workers of one program on one host do.
func (r *chaosRun) add(el *chaosElection) {
	el.mu.Lock()
	el.started++
	n := el.started
	el.mu.Unlock()
	name := fmt.Sprintf("%s-%d", el.key, n)
	identity := name
	if n%3 != 0 {
		identity = "host"
	}
	nc := connect(r.t, r.ts.url())
	e := mustElection(r.t, identity, el.key, openBucket(r.t, nc), el.rec.options(name)...)
	c := &chaosCandidate{name: name, nc: nc, e: e, stop: runElectionAllowing(r.t, e, nats.ErrConnectionClosed)}
	el.mu.Lock()
	el.candidates = append(el.candidates, c)
	el.mu.Unlock()
}

// leader returns the candidate of el that leads now, if any.
func (el *chaosElection) leader() *chaosCandidate {
	el.mu.Lock()
	defer el.mu.Unlock()
	for _, c := range el.candidates {
		if c.e.IsLeader() {
			return c
		}
	}
	return nil
}

func (el *chaosElection) remove(c *chaosCandidate) {
	el.mu.Lock()
	defer el.mu.Unlock()
	for i, o := range el.candidates {
		if o == c {
			el.candidates = append(el.candidates[:i], el.candidates[i+1:]...)
			return
		}
	}
}

// TestChaos runs a dozen candidates in one election and five in another while
// it stops leaders, deletes the key, closes leaders' connections, restarts
// the broker, raises and lowers the TTL, and restarts every candidate of an
// election at once, then checks that terms never overlapped, every loss followed a
// win, tokens grew, and no election went leaderless longer than the
// largest TTL + 1s after the last disturbance. CONCLAVE_CHAOS_SECONDS lengthens the run.
func TestChaos(t *testing.T) {
	const ttl, raisedTTL = time.Second, 2 * time.Second
	duration := 20 * time.Second
	if s, err := strconv.Atoi(os.Getenv("CONCLAVE_CHAOS_SECONDS")); err == nil && s > 0 {
		duration = time.Duration(s) * time.Second
	}
	if testing.Short() {
		duration = 8 * time.Second
	}
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	run := &chaosRun{t: t, ts: ts, ttl: raisedTTL, counts: map[string]int{}}
	currentTTL := ttl
	main := &chaosElection{key: "chaos", rec: newRecorder()}
	side := &chaosElection{key: "side", rec: newRecorder()}
	for i := 0; i < 12; i++ {
		run.add(main)
	}
	for i := 0; i < 5; i++ {
		run.add(side)
	}
	run.disturbed("start")

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	end := time.Now().Add(duration)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		// Every third disturbance is the side election's, and one that
		// moves its leadership (the broker's restarts and TTL changes reach
		// it anyway): drawn at random, it got fewer than the two moves the
		// check below needs in about one run in six.
		el, kind := main, rng.IntN(6)
		if i%3 == 1 {
			el, kind = side, []int{0, 1, 2, 5}[rng.IntN(4)]
		}
		switch kind {
		case 0: // stop the leader gracefully, start a replacement
			if l := el.leader(); l != nil {
				l.stop()
				el.remove(l)
				run.add(el)
				run.counts["stop leader"]++
			}
		case 1: // force a stand-down
			kv := openBucket(t, connect(t, ts.url()))
			if err := kv.Delete(t.Context(), el.key); err != nil {
				t.Logf("delete: %v", err)
			}
			run.disturbed("delete key")
		case 2: // the leader loses its connection for good
			if l := el.leader(); l != nil {
				l.nc.Close()
				el.remove(l)
				run.add(el)
				run.counts["close leader connection"]++
			}
		case 3: // restart the broker
			ts.stop()
			time.Sleep(time.Duration(rng.IntN(int(2 * ttl))))
			ts.start()
			run.disturbed("restart broker")
		case 4: // an operator raises or lowers the TTL
			currentTTL = ttl + raisedTTL - currentTTL
			js, err := jetstream.New(connect(t, ts.url()))
			if err == nil {
				err = setBucketTTL(t.Context(), js, currentTTL)
			}
			if err != nil {
				t.Logf("change TTL: %v", err)
			}
			run.disturbed(fmt.Sprintf("TTL to %v", currentTTL))
		case 5: // restart every candidate of the election at once
			el.mu.Lock()
			cs := append([]*chaosCandidate(nil), el.candidates...)
			el.mu.Unlock()
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); c.stop() }()
			}
			wg.Wait()
			for _, c := range cs {
				el.remove(c)
				run.add(el)
			}
			run.disturbed("restart all of " + el.key)
		}
	}
	// Let the last disturbance settle, then stop everyone.
	time.Sleep(raisedTTL + time.Second)
	for _, el := range []*chaosElection{main, side} {
		el.mu.Lock()
		cs := append([]*chaosCandidate(nil), el.candidates...)
		el.mu.Unlock()
		for _, c := range cs {
			c.stop()
		}
	}

	t.Logf("faults: %v", run.counts)
	for _, el := range []*chaosElection{main, side} {
		evs := el.rec.snapshot()
		ss := checkHistory(t, evs)
		worst := run.checkGaps(el.key, ss)
		t.Logf("election %s: %d terms, worst leaderless gap after a disturbance %v", el.key, len(ss), worst.Round(time.Millisecond))
		if len(ss) < 3 {
			t.Fatalf("election %s had only %d terms: the chaos did not move leadership", el.key, len(ss))
		}
	}
}

// checkGaps fails the run if, after the last disturbance before a
// leaderless period ended, more than TTL + 1s passed with no leader.
func (r *chaosRun) checkGaps(key string, ss []span) time.Duration {
	r.mu.Lock()
	dist := append([]time.Time(nil), r.disturbances...)
	r.mu.Unlock()
	sort.Slice(dist, func(i, j int) bool { return dist[i].Before(dist[j]) })
	allowed := r.ttl + time.Second
	var worst time.Duration
	covered := dist[0]
	for _, s := range ss {
		if s.start.After(covered) {
			from := covered
			for _, d := range dist {
				if d.After(from) && d.Before(s.start) {
					from = d
				}
			}
			gap := s.start.Sub(from)
			worst = max(worst, gap)
			if gap > allowed {
				r.t.Errorf("election %s had no leader for %v before %s led at %v, longer than the largest TTL + 1s", key, gap, s.who, s.start.Format("15:04:05.000"))
			}
		}
		if s.end.After(covered) {
			covered = s.end
		}
	}
	return worst
}
