package clustertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	// ttl is the election bucket's TTL.
	ttl = 2 * time.Second
	// margin is the election's default safety margin (a tenth of the TTL):
	// a leader's term lasts until its last write's send time + ttl - margin.
	margin = ttl / 10
	// candidates campaign in the election, spread over the nodes.
	candidates = 5
	// key is the election.
	key = "failover"

	// raftFailover is the longest write outage DESIGN.md measured when an
	// R3 stream's leader dies: 4.5–8.5 s for Raft to elect a new one.
	raftFailover = 8500 * time.Millisecond
	// leaderBound is how long after the stream leader stops a leader must
	// exist again (and one that writes: see recovered):
	//   - raftFailover, during which no write succeeds, so a leader whose
	//     deadline passes stands down and none can be elected;
	//   - one TTL: the stood-down leader's key expires a TTL after its last
	//     write, which came before the stop, so within raftFailover this is
	//     usually spent already;
	//   - one more TTL for what a takeover takes after that: a standby's
	//     safety-net campaigns are at most TTL/4 apart, each request is cut
	//     at TTL/5, the broker expires keys up to ~350ms late, and clients
	//     on the stopped node reconnect within a few hundred milliseconds.
	leaderBound = raftFailover + 2*ttl
	// settle bounds the waits for events that need no failover: the first
	// leader, renewals on a healthy cluster, Start returning after a stop.
	settle = 20 * time.Second
)

// span is one term as the test saw it: from Term.Started to the earlier of
// the OnLost call and Term.ValidUntil (which, once the term has ended, is
// when it ended).
type span struct {
	cand   int
	term   *streams.Term
	lostAt time.Time // zero while the term lasts
}

func (s *span) start() time.Time { return s.term.Started() }

// end returns when the term ended, or, while it lasts, its current deadline.
func (s *span) end() time.Time {
	until := s.term.ValidUntil()
	if !s.lostAt.IsZero() && s.lostAt.Before(until) {
		return s.lostAt
	}
	return until
}

// history records every callback of every candidate.
type history struct {
	mu     sync.Mutex
	events [candidates][]string // "won" and "lost", in order, per candidate
	spans  []*span              // in the order OnLeading ran
	open   [candidates]*span
	wake   chan struct{} // signalled after every recorded callback
}

func newHistory() *history { return &history{wake: make(chan struct{}, 1)} }

func (h *history) notify() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *history) options(i int) []streams.Option {
	return []streams.Option{
		streams.OnWon(func() {
			h.mu.Lock()
			h.events[i] = append(h.events[i], "won")
			h.mu.Unlock()
			h.notify()
		}),
		streams.OnLeading(func(t *streams.Term) {
			h.mu.Lock()
			s := &span{cand: i, term: t}
			h.spans = append(h.spans, s)
			h.open[i] = s
			h.mu.Unlock()
			h.notify()
		}),
		streams.OnLost(func() {
			now := time.Now()
			h.mu.Lock()
			h.events[i] = append(h.events[i], "lost")
			if s := h.open[i]; s != nil {
				s.lostAt = now
				h.open[i] = nil
			}
			h.mu.Unlock()
			h.notify()
		}),
	}
}

// leader returns the span of the candidate that leads now, if any.
func (h *history) leader() *span {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.open {
		if s != nil && s.term.Valid() {
			return s
		}
	}
	return nil
}

// spansCopy returns the spans recorded so far.
func (h *history) spansCopy() []*span {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.spans)
}

// recovered returns a leader that has written to the election bucket since
// at: its term began after at, or a renewal sent after at moved its
// deadline past at + ttl - margin. Nil if there is none yet.
func (h *history) recovered(at time.Time) *span {
	s := h.leader()
	if s == nil {
		return nil
	}
	if s.start().After(at) || s.term.ValidUntil().After(at.Add(ttl-margin)) {
		return s
	}
	return nil
}

// waitFor waits until cond returns a non-nil span, re-checking after every
// callback and every 50ms (a term can also end by its deadline, which no
// callback announces at once). It fails the test after d.
func (h *history) waitFor(t *testing.T, d time.Duration, what string, cond func() *span) (*span, time.Time) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		if s := cond(); s != nil {
			return s, time.Now()
		}
		select {
		case <-h.wake:
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("no %s within %v", what, d)
		}
	}
}

// connect connects candidate i to every node, the (i mod n)th first, and
// returns the connection's JetStream context.
func connect(t *testing.T, urls []string, i int) jetstream.JetStream {
	t.Helper()
	first := i % len(urls)
	order := append(slices.Clone(urls[first:]), urls[:first]...)
	_, js := natstest.Connect(t, strings.Join(order, ","),
		nats.Name(fmt.Sprintf("cand-%d", i)),
		nats.DontRandomize(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectBufSize(-1),
	)
	return js
}

// TestElectionThroughBucketFailover runs candidates on a three-node cluster
// with an R3 bucket, stops and restarts the node leading the bucket's
// stream, then makes the bucket lose its quorum and regain it, and checks
// that there was never more than one leader, that callbacks alternated,
// that fencing tokens grew, and that a leader came back within bounds.
func TestElectionThroughBucketFailover(t *testing.T) {
	c := brokertest.StartCluster(t, 3, func(_ int, cfg *config.Config) {
		cfg.LeaderElectionTTL = ttl
		cfg.LeaderElectionReplicas = config.ClusterSizeReplicas // R3
	})
	urls := c.ClientURLs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	h := newHistory()
	begin := time.Now()
	log := brokertest.Logger(t)
	campaignCtx, stopCampaigns := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { stopCampaigns(); running.Wait() }() // also when the test fails early
	done := make([]chan error, candidates)
	for i := range candidates {
		js := connect(t, urls, i)
		opts := append(h.options(i), streams.WithLogger(log.WithField("candidate", i)))
		e, err := streams.NewElection(fmt.Sprintf("cand-%d", i), key, js, opts...)
		if err != nil {
			t.Fatal(err)
		}
		done[i] = make(chan error, 1)
		running.Go(func() { done[i] <- e.Start(campaignCtx) })
	}

	first, _ := h.waitFor(t, settle, "first leader", h.leader)
	// Wait for two renewals (each a third of the TTL) so the cluster is
	// steady before the failover.
	h.waitFor(t, settle, "renewals by the first leader", func() *span {
		if s := h.recovered(first.start().Add(2 * ttl / 3)); s == first {
			return s
		}
		return nil
	})

	node := c.BucketLeader()
	before := h.leader()
	if before == nil {
		t.Fatal("no leader just before the stop")
	}
	t.Logf("stopping node %d, the bucket's stream leader; cand-%d leads (token %d), candidates on node %d first: %v",
		node, before.cand, before.term.Token(), node, onNode(node, len(urls)))
	stopAt := time.Now()
	c.Stop(node)
	newNode := c.BucketLeader()
	t.Logf("node %d leads the bucket %v after the stop", newNode, time.Since(stopAt).Round(time.Millisecond))

	leader, recoveredAt := h.waitFor(t, leaderBound, "leader writing after the stop", func() *span { return h.recovered(stopAt) })
	recovery := recoveredAt.Sub(stopAt)
	t.Logf("cand-%d leads and writes %v after the stop (bound %v)", leader.cand, recovery.Round(time.Millisecond), leaderBound)

	// The leader from before the stop kept leading, or a new term began
	// once its term had ended.
	switch {
	case leader == before:
		t.Logf("cand-%d kept leading through the failover", before.cand)
	case !before.end().After(leader.start()):
		t.Logf("cand-%d's term ended (%v after the stop, %s); cand-%d took over (token %d)",
			before.cand, before.end().Sub(stopAt).Round(time.Millisecond), before.term.Cause(), leader.cand, leader.term.Token())
	default:
		t.Errorf("cand-%d leads from %v while cand-%d's term runs until %v", leader.cand, leader.start(), before.cand, before.end())
	}

	c.Restart(node)
	restartAt := time.Now()
	h.waitFor(t, leaderBound, "leader writing after the restart", func() *span { return h.recovered(restartAt) })
	// And it keeps doing so: one more TTL of renewals.
	h.waitFor(t, settle, "steady leader after the restart", func() *span { return h.recovered(restartAt.Add(ttl)) })

	// Then a worse outage: the bucket leader and one more node stop, so the
	// bucket has no quorum and no write succeeds. The leader must stand down
	// by its deadline (its last write's send time + ttl - margin, at most
	// that long after the stop), and nobody may lead until the nodes return.
	// quorum is when they started again.
	quorumStop, quorum := quorumLoss(t, c, h)
	back, backAt := h.waitFor(t, leaderBound, "leader writing after quorum returned", func() *span { return h.recovered(quorum) })
	t.Logf("cand-%d leads (token %d) %v after the nodes restarted (bound %v)", back.cand, back.term.Token(), backAt.Sub(quorum).Round(time.Millisecond), leaderBound)
	h.waitFor(t, settle, "steady leader after quorum returned", func() *span { return h.recovered(quorum.Add(ttl)) })

	stopCampaigns()
	for i, ch := range done {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("cand-%d: Start: %v", i, err)
			}
		case <-time.After(settle):
			t.Fatalf("cand-%d: Start did not return within %v of the cancel", i, settle)
		}
	}
	end := time.Now()

	spans := h.spansCopy()
	logTimeline(t, begin, spans, map[string]time.Time{
		"leader node stopped": stopAt, "two nodes stopped": quorumStop, "two nodes restarted": quorum,
	})
	checkCallbacks(t, h)
	checkTerms(t, spans)
	checkCoverage(t, spans, stopAt, quorum, end)
}

// quorumLoss stops the bucket's stream leader and one more node, checks
// that the election leader stands down by its deadline and that nobody
// leads until the nodes start again, restarts them, and returns when it
// started them.
func quorumLoss(t *testing.T, c *brokertest.Cluster, h *history) (stopAt, restartAt time.Time) {
	t.Helper()
	lead := c.BucketLeader()
	other := (lead + 1) % c.Len()
	before := h.leader()
	if before == nil {
		t.Fatal("no leader before the quorum loss")
	}
	stopAt = time.Now()
	c.Stop(lead, other)
	stopped := time.Now() // no write sent from here on can succeed
	t.Logf("stopped nodes %d and %d in %v: no quorum; cand-%d led", lead, other, stopped.Sub(stopAt).Round(time.Millisecond), before.cand)
	// Its deadline is at most ttl - margin after its last successful write,
	// sent before the nodes were down. Valid reads the clock, so the term
	// ends then even if the election's goroutine is slow to notice.
	_, downAt := h.waitFor(t, settle, "stand-down without quorum", func() *span {
		if h.leader() == nil {
			return before
		}
		return nil
	})
	if end := before.end(); end.After(stopped.Add(ttl - margin)) {
		t.Errorf("cand-%d led until %v after losing quorum, past its deadline (ttl - margin = %v)", before.cand, end.Sub(stopped), ttl-margin)
	}
	t.Logf("cand-%d stood down %v after the stop (%s)", before.cand, downAt.Sub(stopAt).Round(time.Millisecond), before.term.Cause())
	// Nobody may lead before the nodes start again. Quorum returns while
	// Restart runs (Restart returns only once each node has provisioned the
	// bucket, seconds later), so the check is against its start.
	restartAt = time.Now()
	if s := h.leader(); s != nil {
		t.Errorf("cand-%d leads without quorum (token %d, began %v after the stop)", s.cand, s.term.Token(), s.start().Sub(stopAt))
	}
	c.Restart(lead, other)
	t.Logf("nodes restarted %v after the stop, ready %v later", restartAt.Sub(stopAt).Round(time.Millisecond), time.Since(restartAt).Round(time.Millisecond))
	for _, s := range h.spansCopy() {
		if s.start().After(before.start()) && s.start().Before(restartAt) {
			t.Errorf("cand-%d began leading (token %d) %v before the nodes restarted", s.cand, s.term.Token(), restartAt.Sub(s.start()))
		}
	}
	return stopAt, restartAt
}

// onNode lists the candidates connected to node first.
func onNode(node, nodes int) []string {
	var names []string
	for i := range candidates {
		if i%nodes == node {
			names = append(names, fmt.Sprintf("cand-%d", i))
		}
	}
	return names
}

func logTimeline(t *testing.T, begin time.Time, spans []*span, marks map[string]time.Time) {
	t.Helper()
	var b strings.Builder
	b.WriteString("terms, in time from the start:\n")
	for _, s := range spans {
		fmt.Fprintf(&b, "  cand-%d token %-4d %9v – %9v  %s\n", s.cand, s.term.Token(),
			s.start().Sub(begin).Round(time.Millisecond), s.end().Sub(begin).Round(time.Millisecond), s.term.Cause())
	}
	names := slices.Collect(maps.Keys(marks))
	sort.Slice(names, func(a, b int) bool { return marks[names[a]].Before(marks[names[b]]) })
	for _, name := range names {
		fmt.Fprintf(&b, "  %s at %v\n", name, marks[name].Sub(begin).Round(time.Millisecond))
	}
	t.Log(b.String())
}

// checkCallbacks checks that every candidate's OnWon and OnLost alternate,
// starting with OnWon, and that every term it won has ended.
func checkCallbacks(t *testing.T, h *history) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	wins := 0
	for i, evs := range h.events {
		for k, ev := range evs {
			want := "won"
			if k%2 == 1 {
				want = "lost"
			}
			if ev != want {
				t.Errorf("cand-%d: callback %d is %s, want %s: %v", i, k, ev, want, evs)
				break
			}
		}
		if len(evs)%2 != 0 {
			t.Errorf("cand-%d: won without losing after Start returned: %v", i, evs)
		}
		wins += (len(evs) + 1) / 2
	}
	if wins != len(h.spans) {
		t.Errorf("%d wins but %d terms reported to OnLeading", wins, len(h.spans))
	}
}

// checkTerms checks that no two terms overlap and that fencing tokens grow
// from term to term.
func checkTerms(t *testing.T, spans []*span) {
	t.Helper()
	if len(spans) == 0 {
		t.Fatal("no terms")
	}
	sorted := slices.Clone(spans)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].start().Before(sorted[b].start()) })
	for k := 1; k < len(sorted); k++ {
		prev, next := sorted[k-1], sorted[k]
		if next.start().Before(prev.end()) {
			t.Errorf("two leaders at once: cand-%d (token %d) began %v before cand-%d's term (token %d) ended",
				next.cand, next.term.Token(), prev.end().Sub(next.start()), prev.cand, prev.term.Token())
		}
		if next.term.Token() <= prev.term.Token() {
			t.Errorf("fencing token %d (cand-%d) follows %d (cand-%d): tokens must grow across terms",
				next.term.Token(), next.cand, prev.term.Token(), prev.cand)
		}
	}
}

// checkCoverage checks that from the stop on, no period without a leader
// outlasted leaderBound, except while quorum was lost (until quorum, when
// the nodes were back). checkTerms already rules out two at once.
func checkCoverage(t *testing.T, spans []*span, stopAt, quorum, end time.Time) {
	t.Helper()
	sorted := slices.Clone(spans)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].start().Before(sorted[b].start()) })
	covered := stopAt // leadership is accounted for up to here
	for _, s := range sorted {
		if s.end().Before(covered) {
			continue
		}
		if s.start().After(quorum) && covered.Before(quorum) {
			covered = quorum // no leader is expected without quorum
		}
		if gap := s.start().Sub(covered); gap > leaderBound {
			t.Errorf("no leader for %v from %v after the stop, bound %v", gap.Round(time.Millisecond), covered.Sub(stopAt).Round(time.Millisecond), leaderBound)
		}
		covered = s.end()
	}
	// The last term ended when the candidates were stopped.
	if gap := end.Sub(covered); gap > settle {
		t.Errorf("no leader for the last %v of the test", gap.Round(time.Millisecond))
	}
}
