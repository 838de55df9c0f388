package faults

// Kind is a kind of fault the harness injects.
type Kind string

// The fault kinds. Those about candidates run in both modes; the others in
// the mode whose brokers they disturb.
const (
	// KillLeader sends SIGKILL to the leader's process and starts a
	// replacement (same host, same identity, new incarnation).
	KillLeader Kind = "kill-leader"
	// StopLeader sends SIGTERM to the leader's process, a graceful stop:
	// the leader offers the key to the standby it ranks best, or releases
	// it, and the process is started again once it has exited.
	StopLeader Kind = "stop-leader"
	// PauseLeader stops the leader's process with SIGSTOP, at an arbitrary
	// instant, for longer than the TTL, then continues it.
	PauseLeader Kind = "pause-leader"
	// PauseMidWrite stops the leader's process between its check that its
	// term is valid and its write to the fencing resource, holds it until
	// another leader has written, then continues it: its write arrives
	// stale and must be rejected.
	PauseMidWrite Kind = "pause-mid-write"
	// CutCandidate blackholes one candidate process's links to every
	// broker (the leader's, mostly) for longer than the TTL, then heals.
	CutCandidate Kind = "cut-candidate"
	// DelayLink delays every byte of the leader's links for several
	// seconds, by up to about the request timeout each way.
	DelayLink Kind = "delay-link"
	// FlapLink cuts or stalls the leader's links and heals them quickly and
	// repeatedly, sometimes resetting its connections.
	FlapLink Kind = "flap-link"
	// StandDown forces the leader to stand down from outside, with
	// `conclave election stand-down NAME --force --no-wait`.
	StandDown Kind = "stand-down"
	// HandOver asks the leader, as `conclave election stand-down --to ID`
	// does (standing.RequestHandOver), to hand the election over to another
	// host's identity, and waits until a candidate of that host leads.
	HandOver Kind = "hand-over"
	// HandOverCut asks the leader to hand over to a host whose links it
	// has just blackholed, for longer than the TTL: the named candidate
	// does not answer who is standing, so the leader refuses before its
	// term ends (streams.ErrHandOverRefused) and leads on.
	HandOverCut Kind = "hand-over-cut"
	// PriorityMove restarts a standby host's process (SIGTERM) with a
	// priority above every other host's, which it keeps from then on
	// (its replacements too): the leader hands over to it once its term
	// has lasted the minimum term.
	PriorityMove Kind = "priority-move"
	// RestartBroker sends SIGKILL to the single broker and restarts it.
	RestartBroker Kind = "restart-broker"
	// KillStreamLeader sends SIGKILL to the cluster node that leads the
	// election stream and restarts it.
	KillStreamLeader Kind = "kill-stream-leader"
	// KillFollower sends SIGKILL to a cluster node that does not lead the
	// election stream and restarts it.
	KillFollower Kind = "kill-follower"
	// RestartCluster sends SIGKILL to every cluster node and restarts them.
	RestartCluster Kind = "restart-cluster"

	// TTLLower lowers the bucket's TTL (the stream's MaxAge) to half, at
	// least 1s, as an operator would, and restores it some TTLs later.
	TTLLower Kind = "ttl-lower"
	// TTLRaise doubles the bucket's TTL and restores it some TTLs later.
	TTLRaise Kind = "ttl-raise"
	// RestartAll stops every candidate process at once with SIGTERM (a
	// graceful stop: the leader releases) and, once all have exited,
	// starts them all again.
	RestartAll Kind = "restart-all"
	// KillAll sends SIGKILL to every candidate process at once and starts
	// them all again.
	KillAll Kind = "kill-all"
	// RefuseConsumers lowers the election stream's consumer limit to a
	// little above the consumers in use and fills it, so that
	// the broker refuses every new watch, restarts every candidate process
	// (SIGKILL) so that none has a watch, holds for several TTLs, then
	// deletes its consumers and restores the limit.
	RefuseConsumers Kind = "refuse-consumers"
	// Purge purges the election key while someone leads (a KV purge
	// marker, `nats kv purge`): a removal that is not the holder's own.
	Purge Kind = "purge"
	// Double injects two compatible faults that overlap (see doublePairs).
	Double Kind = "double"
)

var candidateKinds = []Kind{KillLeader, StopLeader, PauseLeader, PauseMidWrite, CutCandidate, DelayLink, FlapLink, StandDown, HandOver, HandOverCut, PriorityMove}

// operationKinds are what operators do to a running election, in both modes.
var operationKinds = []Kind{TTLLower, TTLRaise, RestartAll, KillAll, RefuseConsumers, Purge, Double}

// Kinds returns the fault kinds a mode injects.
func Kinds(m Mode) []Kind {
	ks := append([]Kind(nil), candidateKinds...)
	if m == Cluster {
		ks = append(ks, KillStreamLeader, KillFollower, RestartCluster)
	} else {
		ks = append(ks, RestartBroker)
	}
	return append(ks, operationKinds...)
}

// AllKinds returns every fault kind in documentation order.
func AllKinds() []Kind {
	ks := append(append([]Kind(nil), candidateKinds...), RestartBroker, KillStreamLeader, KillFollower, RestartCluster)
	return append(ks, operationKinds...)
}

// Describe says in a few words what a fault does.
func (k Kind) Describe() string {
	switch k {
	case KillLeader:
		return "SIGKILL the leader's process, start a replacement"
	case StopLeader:
		return "SIGTERM the leader's process (it hands the key to its best standby or releases it), start it again"
	case PauseLeader:
		return "SIGSTOP the leader's process for TTL+, then SIGCONT"
	case PauseMidWrite:
		return "SIGSTOP the leader between its validity check and its write, until another leader wrote"
	case CutCandidate:
		return "blackhole a candidate's links (the leader's, mostly) for TTL+, then heal"
	case DelayLink:
		return "delay the leader's links by 50–450ms each way for 2–3 TTLs"
	case FlapLink:
		return "cut or stall the leader's links for 0.1–0.7s, heal, 6–10 times"
	case StandDown:
		return "force a stand-down: conclave election stand-down --force --no-wait"
	case HandOver:
		return "ask the leader to hand over to another host (stand-down --to), wait until it leads"
	case HandOverCut:
		return "ask the leader to hand over to a host whose links were just cut for TTL+: it refuses and leads on"
	case PriorityMove:
		return "restart a standby host with the highest priority: the leader hands over after its min term"
	case RestartBroker:
		return "SIGKILL the broker, restart it after 0.2s–2 TTLs"
	case KillStreamLeader:
		return "SIGKILL the election stream's leader node, restart it"
	case KillFollower:
		return "SIGKILL a follower node, restart it"
	case RestartCluster:
		return "SIGKILL all three nodes, restart them"
	case TTLLower:
		return "lower the bucket's TTL to half (at least 1s), restore it 3–4 new TTLs later"
	case TTLRaise:
		return "double the bucket's TTL, restore it 1–1.5 new TTLs later, wait one more"
	case RestartAll:
		return "SIGTERM every candidate process at once, start them all again"
	case KillAll:
		return "SIGKILL every candidate process at once, start them all again"
	case RefuseConsumers:
		return "fill the stream's consumer limit, SIGKILL and restart every candidate process, hold 3 TTLs, free it"
	case Purge:
		return "purge the election key (a KV purge marker) while someone leads"
	case Double:
		return "two compatible faults at once, overlapping"
	}
	return string(k)
}
