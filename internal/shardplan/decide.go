package shardplan

import "time"

// Peer is another member of the group as its latest announcement describes
// it.
type Peer struct {
	Member
	// Leaving: the member stops; it is given nothing and hands its shards
	// over.
	Leaving bool
	// Held lists the shards the member holds, with their terms' tokens.
	Held []Held
	// Standing lists the shards the member campaigns for without holding
	// them.
	Standing []int
}

// Held is a shard a member holds and its term's fencing token.
type Held struct {
	Shard int
	Token uint64
}

// State is what a member knows as it decides, in one pass.
type State struct {
	// N is the group's number of shards.
	N int
	// Self is this member; Leaving says it stops.
	Self    Member
	Leaving bool
	// Peers are the other members on the roll.
	Peers []Peer
	// Held maps the shards this member holds to when their terms began.
	Held map[int]time.Time
	// Won maps the shards whose election this member won but whose term it
	// has not yet taken in (not in Held) to when the term began: they are
	// handed over, never stopped, which would release them.
	Won map[int]time.Time
	// Running maps the shards whose election runs to whether it is being
	// stopped.
	Running map[int]bool
	// Handing holds the shards whose hand-over is in flight.
	Handing map[int]bool
	// RetryAt is, per shard, when a hand-over or a restart may be tried
	// again.
	RetryAt map[int]time.Time
	// MinHold is the least time a shard stays with its holder before it
	// moves to even the spread (WithMinHold).
	MinHold time.Duration
	Now     time.Time
}

// Reason says why a shard is handed over.
type Reason int

const (
	// Rebalance: to even the spread.
	Rebalance Reason = iota
	// Leave: the holder stops.
	Leave
	// Unhealthy: the holder's health check fails.
	Unhealthy
)

// Move is a hand-over the pass asks for.
type Move struct {
	Shard  int
	To     string
	Reason Reason
}

// Plan is what one pass decides.
type Plan struct {
	// Holders is who holds each shard, as this member knows it.
	Holders []string
	// Desired is the assignment (Assign) of the roll and Holders.
	Desired []string
	// Start lists the shards to start an election for, ascending.
	Start []int
	// Stop lists the shards whose election to stop, ascending.
	Stop []int
	// HandOver lists the hand-overs to begin, by shard.
	HandOver []Move
	// WakeAt is when a hand-over held back (by MinHold or RetryAt) may be
	// made; zero when none is.
	WakeAt time.Time
}

// Decide computes the assignment from s and what this member does about
// it: it stands for the shards the assignment gives it (unless a restart
// waits), stops standing for the others, and hands a shard it holds to the
// member the assignment names once that member stands for it (not before
// MinHold or RetryAt, unless it leaves).
func Decide(s State) Plan {
	var members []Member
	if !s.Leaving {
		members = append(members, s.Self)
	}
	holders := make([]string, s.N)
	tokens := make([]uint64, s.N)
	standing := map[string]map[int]bool{}
	for _, p := range s.Peers {
		if !p.Leaving {
			members = append(members, p.Member)
		}
		for _, h := range p.Held {
			if h.Shard >= 0 && h.Shard < s.N && h.Token > tokens[h.Shard] {
				holders[h.Shard], tokens[h.Shard] = p.Identity, h.Token
			}
		}
		set := make(map[int]bool, len(p.Standing))
		for _, sh := range p.Standing {
			set[sh] = true
		}
		standing[p.Identity] = set
	}
	for sh := range s.Held {
		if sh >= 0 && sh < s.N {
			holders[sh] = s.Self.Identity
		}
	}
	plan := Plan{Holders: holders, Desired: Assign(s.N, members, holders)}
	wake := func(t time.Time) {
		if plan.WakeAt.IsZero() || t.Before(plan.WakeAt) {
			plan.WakeAt = t
		}
	}
	for sh, d := range plan.Desired {
		stopping, running := s.Running[sh]
		if d == s.Self.Identity {
			if !running && !s.Now.Before(s.RetryAt[sh]) {
				plan.Start = append(plan.Start, sh)
			}
			continue
		}
		began, holds := s.Held[sh]
		if !holds && running {
			began, holds = s.Won[sh]
		}
		if holds {
			if s.Handing[sh] || d == "" || !standing[d][sh] {
				continue
			}
			reason := Rebalance
			switch {
			case s.Leaving:
				reason = Leave
			case !s.Self.Healthy:
				reason = Unhealthy
			}
			if reason != Leave {
				if until := began.Add(s.MinHold); s.Now.Before(until) {
					wake(until)
					continue
				}
				if at := s.RetryAt[sh]; s.Now.Before(at) {
					wake(at)
					continue
				}
			}
			plan.HandOver = append(plan.HandOver, Move{Shard: sh, To: d, Reason: reason})
			continue
		}
		// A leaving member keeps its candidates until it is done: one that
		// is winning as it is stopped would release the shard rather than
		// hand it over.
		if running && !stopping && !s.Handing[sh] && !s.Leaving {
			plan.Stop = append(plan.Stop, sh)
		}
	}
	return plan
}

// AnnounceInterval is how often a member announces itself for a bucket
// TTL ttl: a quarter TTL, between 250ms and 15s.
func AnnounceInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 250*time.Millisecond), 15*time.Second)
}

// RollSilence is how long a member may stay silent before the others drop
// it from their roll: about one TTL, and at least three announce
// intervals.
func RollSilence(ttl time.Duration) time.Duration {
	return max(ttl, 3*AnnounceInterval(ttl))
}
