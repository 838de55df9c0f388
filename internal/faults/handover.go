package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// The moves of leadership an operator or a ranking asks for: a hand-over to
// a named candidate (hand-over, hand-over-cut) and a better-ranked candidate
// joining (priority-move).

// handOverWindow is how long the other candidates leave a released key to
// the named one: a quarter TTL, between 0.5s and 5s (Election.HandOver).
func handOverWindow(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 500*time.Millisecond), 5*time.Second)
}

// standby returns a random live host other than leader.
func (h *harness) standby(leader *host) *host {
	var others []*host
	for _, o := range h.hosts {
		if o != leader && o.proc.alive() {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return others[h.intn(len(others))]
}

// handOver asks the leader to hand the election over to another host's
// identity through its hand-over subject, as `conclave election stand-down
// --to ID` does, and waits until a candidate leads: the named host's at
// once; for hand-over-cut (the named host's links blackholed just before)
// the leader refuses, since the host does not answer who is standing, and
// leads on.
func (h *harness) handOver(ctx context.Context, k Kind) error {
	hs, last, to, ok := h.leaderAndStandby(ctx, k)
	if !ok {
		return nil
	}
	h.begin(k, to.identity, fmt.Sprintf("from %s (%s), token %d", hs.identity, hs.procName, last.Token))
	if k == HandOverCut {
		h.setLinks(to, LinkCut)
	}
	healAt := time.Now().Add(h.cfg.TTL + h.between(500*time.Millisecond, h.cfg.TTL))
	heal := func() {
		if k == HandOverCut {
			sleep(ctx, time.Until(healAt))
			h.healLinks(to, false)
		}
	}
	asked := Mono()
	leader, err := h.requestHandOver(ctx, to.identity)
	if k == HandOverCut && errors.Is(err, streams.ErrHandOverRefused) {
		// The named host cannot answer who is standing: the leader refuses
		// before its term ends, and leads on.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		next, moved := h.fence.AwaitAccepted(wctx, asked, func(w WriteRecord) bool { return w.Token > last.Token })
		cancel()
		heal()
		if moved {
			h.end(k, to.identity, "%s refused to hand over to a host cut off, but %s wrote a new term %v later", leader, next.Cand, time.Duration(next.At-asked).Round(time.Millisecond))
		} else {
			h.end(k, to.identity, "%s refused to hand over to a host cut off, and led on", leader)
		}
		return nil
	}
	if err != nil {
		heal()
		h.skip(k, to.identity, "%v", err)
		return nil
	}
	h.event(HarnessEvent{Ev: HvHandOver, Target: to.identity, Detail: leader})
	within := handOverWindow(h.cfg.TTL) + h.params.AllowedGap() + 5*time.Second
	wctx, cancel := context.WithTimeout(ctx, within)
	next, took := h.fence.AwaitAccepted(wctx, asked, func(w WriteRecord) bool { return w.Token > last.Token })
	cancel()
	heal()
	switch {
	case !took:
		h.end(k, to.identity, "%s handed over; no new leader wrote within %v", leader, within)
	case HostOf(next.Cand) == to.name:
		h.end(k, to.identity, "%s handed over; %s wrote %v after the request", leader, next.Cand, time.Duration(next.At-asked).Round(time.Millisecond))
	default:
		h.end(k, to.identity, "%s handed over; fell back to %s, which wrote %v after the request", leader, next.Cand, time.Duration(next.At-asked).Round(time.Millisecond))
	}
	return nil
}

// leaderAndStandby returns the host leading (and its last write) and
// another live host to move leadership to, for fault k; when there is no
// such pair it records k as begun and skipped, and reports false.
func (h *harness) leaderAndStandby(ctx context.Context, k Kind) (*host, WriteRecord, *host, bool) {
	hs, last, ok := h.leader(ctx)
	to := h.standby(hs)
	if !ok || to == nil {
		target := "(none)"
		if to != nil {
			target = to.identity
		}
		h.begin(k, target, "")
		h.skip(k, target, "no leader writing, or no other host alive")
		return nil, WriteRecord{}, nil, false
	}
	return hs, last, to, true
}

// requestHandOver asks the election's leader, over a connection of the
// harness to any live broker, to hand over to identity to, and returns the
// identity of the leader that answered.
func (h *harness) requestHandOver(ctx context.Context, to string) (string, error) {
	nc, _, err := h.br.connect()
	if err != nil {
		return "", err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return standing.RequestHandOver(ctx, nc, Bucket, electionKey, to)
}

// priorityMove gives a standby host a priority above every other host's
// and restarts its process with it (SIGTERM, then a new incarnation), then
// waits until one of its candidates leads: the leader hands over once its
// term has lasted the minimum term.
func (h *harness) priorityMove(ctx context.Context) error {
	hs, last, to, ok := h.leaderAndStandby(ctx, PriorityMove)
	if !ok {
		return nil
	}
	top := 0
	for _, o := range h.hosts {
		top = max(top, o.priority)
	}
	to.priority = top + 1
	h.begin(PriorityMove, to.identity, fmt.Sprintf("priority %d; %s (priority %d) leads, token %d", to.priority, hs.identity, hs.priority, last.Token))
	p := to.proc
	p.expected.Store(true)
	h.event(HarnessEvent{Ev: HvProcTerm, Target: to.procName, Host: to.name})
	if !p.terminate(15 * time.Second) {
		h.note("%s did not exit cleanly after SIGTERM", p.name)
	}
	began := Mono()
	if err := h.startHost(to); err != nil {
		return err
	}
	within := h.cfg.MinTerm + h.params.AllowedGap() + 10*time.Second
	wctx, cancel := context.WithTimeout(ctx, within)
	next, took := h.fence.AwaitAccepted(wctx, began, func(w WriteRecord) bool { return w.Token > last.Token && HostOf(w.Cand) == to.name })
	cancel()
	if !took {
		h.end(PriorityMove, to.identity, "%s (priority %d) started; none of its candidates wrote within %v", to.procName, to.priority, within)
		return nil
	}
	h.end(PriorityMove, to.identity, "%s (priority %d) started; %s wrote %v later", to.procName, to.priority, next.Cand, time.Duration(next.At-began).Round(time.Millisecond))
	return nil
}
