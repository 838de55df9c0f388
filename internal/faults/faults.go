package faults

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// electionKey is the election every candidate of a run campaigns in.
const electionKey = "faults"

// fault injects one fault of kind k and returns once it is healed. Errors
// are failures of the harness, not findings.
func (h *harness) fault(ctx context.Context, k Kind) error {
	switch k {
	case KillLeader:
		return h.killLeader(ctx)
	case StopLeader:
		return h.stopLeader(ctx)
	case PauseLeader:
		return h.pauseLeader(ctx)
	case PauseMidWrite:
		return h.pauseMidWrite(ctx)
	case CutCandidate:
		return h.cutCandidate(ctx)
	case DelayLink:
		return h.delayLink(ctx)
	case FlapLink:
		return h.flapLink(ctx)
	case StandDown:
		return h.standDown(ctx)
	case HandOver, HandOverCut:
		return h.handOver(ctx, k)
	case PriorityMove:
		return h.priorityMove(ctx)
	case RestartBroker, RestartCluster:
		return h.restartBrokers(ctx, k)
	case KillStreamLeader, KillFollower:
		return h.killNode(ctx, k)
	case TTLLower, TTLRaise:
		return h.changeTTL(ctx, k)
	case RestartAll, KillAll:
		return h.restartAll(ctx, k)
	case RefuseConsumers:
		return h.refuseConsumers(ctx)
	case Purge:
		return h.purge(ctx)
	case Double:
		return h.double(ctx)
	}
	return fmt.Errorf("unknown fault kind %q", k)
}

// leader returns the leader's host and its latest accepted write, or a random
// host when no leader is working.
func (h *harness) leader(ctx context.Context) (*host, WriteRecord, bool) {
	hs, ok := h.awaitLeader(ctx, time.Second)
	if ok {
		if w, ok := h.fence.LastAccepted(); ok && h.hostOf(w.Cand) == hs {
			return hs, w, true
		}
	}
	return h.hosts[h.intn(len(h.hosts))], WriteRecord{}, false
}

// beginOnLeader begins fault k on the leader's process, naming the token
// of its latest accepted write, and reports whether a leader is working;
// when none is, the fault is recorded as skipped, saying why.
func (h *harness) beginOnLeader(ctx context.Context, k Kind, why string) (*host, WriteRecord, bool) {
	hs, last, ok := h.leader(ctx)
	h.begin(k, hs.procName, fmt.Sprintf("token %d", last.Token))
	if !ok {
		h.skip(k, hs.procName, "%s", why)
	}
	return hs, last, ok
}

func (h *harness) begin(k Kind, target, detail string) {
	h.event(HarnessEvent{Ev: HvFaultBegin, Kind: string(k), Target: target, Detail: detail})
}

// skip records that a fault that began could not be injected after all.
func (h *harness) skip(k Kind, target, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.event(HarnessEvent{Ev: HvFaultSkip, Kind: string(k), Target: target, Detail: msg})
	h.note("%s %s skipped: %s", k, target, msg)
	h.mu.Lock()
	if h.skipped == nil {
		h.skipped = map[Kind]int{}
	}
	h.skipped[k]++
	h.mu.Unlock()
}

func (h *harness) end(k Kind, target, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.event(HarnessEvent{Ev: HvFaultEnd, Kind: string(k), Target: target, Detail: msg})
	h.progress("%-18s %-8s %s", k, target, msg)
}

func (h *harness) killLeader(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	victim := hs.procName
	h.begin(KillLeader, victim, "")
	hs.proc.expected.Store(true)
	h.event(HarnessEvent{Ev: HvProcKill, Target: victim, Host: hs.name})
	hs.proc.kill()
	wait := h.between(200*time.Millisecond, time.Second)
	sleep(ctx, wait)
	if err := h.startHost(hs); err != nil {
		return err
	}
	h.end(KillLeader, victim, "killed; %s started %v later", hs.procName, wait.Round(time.Millisecond))
	return nil
}

// stopLeader sends SIGTERM to the leader's process, which stops
// gracefully, notes which host's candidate wrote next and whether it is
// the best-ranked of the others (highest priority, then identity: whom a
// leader that had heard every standby offers the key to), and starts the
// process again once it has exited.
func (h *harness) stopLeader(ctx context.Context) error {
	hs, last, ok := h.beginOnLeader(ctx, StopLeader, "no leader is working")
	if !ok {
		return nil
	}
	target := hs.procName
	var best *host
	for _, o := range h.hosts {
		if o != hs && (best == nil || o.priority > best.priority || (o.priority == best.priority && o.identity < best.identity)) {
			best = o
		}
	}
	p := hs.proc
	p.expected.Store(true)
	h.event(HarnessEvent{Ev: HvProcTerm, Target: target, Host: hs.name})
	began := Mono()
	_ = p.signal(syscall.SIGTERM)
	wctx, cancel := context.WithTimeout(ctx, h.params.AllowedGap()+5*time.Second)
	next, took := h.fence.AwaitAccepted(wctx, began, func(w WriteRecord) bool { return w.Token > last.Token })
	cancel()
	if !p.terminate(15 * time.Second) {
		h.note("%s did not exit cleanly after SIGTERM", p.name)
	}
	wait := h.between(200*time.Millisecond, time.Second)
	sleep(ctx, wait)
	if err := h.startHost(hs); err != nil {
		return err
	}
	if !took {
		h.end(StopLeader, target, "stopped; no new leader wrote within %v; %s started %v later", h.params.AllowedGap()+5*time.Second, hs.procName, wait.Round(time.Millisecond))
		return nil
	}
	ranked := "the best-ranked standby"
	if best != nil && HostOf(next.Cand) != best.name {
		ranked = "not the best-ranked standby, " + best.name
	}
	h.end(StopLeader, target, "stopped; %s (%s) wrote %v after SIGTERM; %s started %v later",
		next.Cand, ranked, time.Duration(next.At-began).Round(time.Millisecond), hs.procName, wait.Round(time.Millisecond))
	return nil
}

func (h *harness) pauseLeader(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	target := hs.procName
	h.begin(PauseLeader, target, "")
	if err := hs.proc.signal(syscall.SIGSTOP); err != nil || !hs.proc.awaitStopped(time.Second) {
		_ = hs.proc.signal(syscall.SIGCONT)
		h.skip(PauseLeader, target, "did not stop: %v", err)
		return nil
	}
	h.event(HarnessEvent{Ev: HvProcStop, Target: target, Host: hs.name})
	hold := h.cfg.TTL + h.between(500*time.Millisecond, h.cfg.TTL)
	sleep(ctx, hold)
	h.event(HarnessEvent{Ev: HvProcCont, Target: target, Host: hs.name})
	_ = hs.proc.signal(syscall.SIGCONT)
	h.end(PauseLeader, target, "stopped for %v", hold.Round(time.Millisecond))
	return nil
}

// pauseMidWrite arms the leader's process to stop itself right after its
// next validity check, holds it stopped until another leader's write was
// accepted (and at least a TTL), then lets it go on with its stale write.
func (h *harness) pauseMidWrite(ctx context.Context) error {
	hs, last, ok := h.beginOnLeader(ctx, PauseMidWrite, "no leader writing")
	if !ok {
		return nil
	}
	target := hs.procName
	_ = hs.proc.signal(syscall.SIGUSR1)
	if !hs.proc.awaitStopped(2 * time.Second) {
		_ = hs.proc.signal(syscall.SIGUSR2)
		if !hs.proc.awaitStopped(100 * time.Millisecond) {
			h.skip(PauseMidWrite, target, "no write within 2s")
			return nil
		}
	}
	stopped := h.event(HarnessEvent{Ev: HvProcStop, Target: target, Host: hs.name, Detail: "mid-write"})
	hctx, cancel := context.WithTimeout(ctx, 3*h.cfg.TTL+h.params.Failover+5*time.Second)
	newer, took := h.fence.AwaitAccepted(hctx, stopped, func(w WriteRecord) bool { return w.Token > last.Token })
	cancel()
	if !took {
		h.note("pause-mid-write: no other leader wrote while %s was stopped", target)
	}
	if rest := h.cfg.TTL - time.Duration(Mono()-stopped); rest > 0 {
		sleep(ctx, rest)
	}
	sleep(ctx, h.jitter(500*time.Millisecond))
	held := time.Duration(Mono() - stopped)
	h.event(HarnessEvent{Ev: HvProcCont, Target: target, Host: hs.name})
	_ = hs.proc.signal(syscall.SIGCONT)
	h.end(PauseMidWrite, target, "stopped for %v; token %d superseded by %d of %s", held.Round(time.Millisecond), last.Token, newer.Token, newer.Cand)
	return nil
}

// cutCandidate blackholes a host's links, the leader's three times in four.
func (h *harness) cutCandidate(ctx context.Context) error {
	hs, _, ok := h.leader(ctx)
	role := "leader"
	if !ok || h.intn(4) == 0 {
		others := make([]*host, 0, len(h.hosts))
		for _, o := range h.hosts {
			if o != hs || !ok {
				others = append(others, o)
			}
		}
		hs, role = others[h.intn(len(others))], "standby"
	}
	target := hs.procName
	h.begin(CutCandidate, target, role)
	h.setLinks(hs, LinkCut)
	hold := h.cfg.TTL + h.between(500*time.Millisecond, h.cfg.TTL)
	sleep(ctx, hold)
	h.healLinks(hs, false)
	h.end(CutCandidate, target, "%s cut off for %v", role, hold.Round(time.Millisecond))
	return nil
}

func (h *harness) setLinks(hs *host, s LinkState) {
	for _, p := range hs.proxies {
		if s == LinkCut {
			p.Cut()
		} else {
			p.Stall()
		}
	}
	h.event(HarnessEvent{Ev: HvLinkCut, Target: hs.name, Host: hs.name, Detail: s.String()})
}

func (h *harness) healLinks(hs *host, reset bool) {
	for _, p := range hs.proxies {
		p.Heal(reset)
	}
	detail := ""
	if reset {
		detail = "reset"
	}
	h.event(HarnessEvent{Ev: HvLinkHeal, Target: hs.name, Host: hs.name, Detail: detail})
}

func (h *harness) delayLink(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	target := hs.procName
	d := h.between(50*time.Millisecond, 450*time.Millisecond).Round(time.Millisecond)
	h.begin(DelayLink, target, d.String())
	for _, p := range hs.proxies {
		p.SetDelay(d)
	}
	h.event(HarnessEvent{Ev: HvLinkDelay, Target: hs.name, Host: hs.name, Detail: d.String()})
	hold := h.between(2*h.cfg.TTL, 3*h.cfg.TTL)
	sleep(ctx, hold)
	for _, p := range hs.proxies {
		p.SetDelay(0)
	}
	h.event(HarnessEvent{Ev: HvLinkDelay, Target: hs.name, Host: hs.name, Detail: "0s"})
	h.end(DelayLink, target, "%v each way for %v", d, hold.Round(time.Millisecond))
	return nil
}

func (h *harness) flapLink(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	target := hs.procName
	n := 6 + h.intn(5)
	h.begin(FlapLink, target, fmt.Sprintf("%d cycles", n))
	resets := 0
	for range n {
		state := LinkStall
		if h.intn(2) == 0 {
			state = LinkCut
		}
		h.setLinks(hs, state)
		sleep(ctx, h.between(100*time.Millisecond, 700*time.Millisecond))
		reset := h.intn(2) == 0
		if reset {
			resets++
		}
		h.healLinks(hs, reset)
		sleep(ctx, h.between(100*time.Millisecond, 500*time.Millisecond))
	}
	h.end(FlapLink, target, "%d cut/stall cycles, %d with connection resets", n, resets)
	return nil
}

func (h *harness) standDown(ctx context.Context) error {
	hs, _, _ := h.leader(ctx)
	target := hs.procName
	h.begin(StandDown, target, "")
	if err := h.forceStandDown(ctx); err != nil {
		h.skip(StandDown, target, "%v", err)
		return nil
	}
	h.event(HarnessEvent{Ev: HvStandDown, Target: target})
	h.end(StandDown, target, "conclave election stand-down --force --no-wait")
	return nil
}

// forceStandDown runs `conclave election stand-down` against a live node.
func (h *harness) forceStandDown(ctx context.Context) error {
	var live []int
	for i, nd := range h.br.nodes {
		if nd.proc != nil && nd.proc.alive() {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		return fmt.Errorf("no broker running")
	}
	url := h.br.urls(live[h.intn(len(live))])[0]
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, h.cfg.Bin.Conclave, "election", "stand-down", electionKey, "--force", "--no-wait", "--server", url).CombinedOutput()
	if err != nil {
		return fmt.Errorf("conclave election stand-down: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// restartBrokers kills every broker, waits, and starts them again: the
// single broker, or the whole cluster.
func (h *harness) restartBrokers(ctx context.Context, k Kind) error {
	target := "all nodes"
	if h.cfg.Mode == Single {
		target = h.br.nodes[0].name
	}
	h.begin(k, target, "")
	h.event(HarnessEvent{Ev: HvDown, Target: target})
	for i := range h.br.nodes {
		h.killBroker(i)
	}
	down := h.between(200*time.Millisecond, 2*h.cfg.TTL)
	if k == RestartCluster {
		down = h.between(500*time.Millisecond, h.cfg.TTL)
	}
	sleep(ctx, down)
	for i := range h.br.nodes {
		if err := h.startBroker(i); err != nil {
			return err
		}
	}
	began := time.Now()
	if _, err := h.br.awaitLeader(ctx, 90*time.Second); err != nil {
		return err
	}
	h.event(HarnessEvent{Ev: HvUp, Target: target})
	h.end(k, target, "down %v, serving again %v after the restart", down.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	return nil
}

// killNode kills one cluster node, the stream leader or a follower, and
// restarts it.
func (h *harness) killNode(ctx context.Context, k Kind) error {
	leader, err := h.br.awaitLeader(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	i := leader
	if k == KillFollower {
		i = (leader + 1 + h.intn(len(h.br.nodes)-1)) % len(h.br.nodes)
	}
	target := h.br.nodes[i].name
	h.begin(k, target, "")
	h.killBroker(i)
	down := h.between(h.cfg.TTL/3, 2*h.cfg.TTL)
	sleep(ctx, down)
	if err := h.startBroker(i); err != nil {
		return err
	}
	began := time.Now()
	now, err := h.br.awaitLeader(ctx, 90*time.Second, i)
	if err != nil {
		return err
	}
	h.end(k, target, "down %v, rejoined %v after the restart; stream leader now %s", down.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), h.br.nodes[now].name)
	return nil
}
