package shards

import (
	"context"
	"fmt"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/shardplan"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// MaxWeight is the largest weight a member may have. Assign counts a
// weight above it as MaxWeight, and members ignore an announcement whose
// weight is outside 1 to MaxWeight.
const MaxWeight = shardplan.MaxWeight

// Option configures a Group. Options check their arguments and make
// NewGroup fail with an error wrapping ErrInvalidOption when one is
// unusable.
type Option func(*options) error

type options struct {
	bucket      string
	onAssigned  func(shard int, term *streams.Term)
	onRevoked   func(shard int)
	weight      int
	health      func(context.Context) error
	healthEvery time.Duration
	minHold     time.Duration
	log         streams.Logger
	recorder    Recorder
	leaveWithin time.Duration
}

func defaultOptions() options {
	return options{bucket: bucket.Name, weight: 1, leaveWithin: 5 * time.Second}
}

// OnAssigned sets a function called when this member begins to hold a
// shard, with the shard's term: its fencing token (term.Token()), and a
// context (term.Context()) that ends when the member stops holding it.
// Calls for one shard run one at a time, in order (OnAssigned, then
// OnRevoked, then perhaps OnAssigned again), on a goroutine of the shard's
// own, never under a lock of the group's; calls for different shards may
// run at the same time. It may call any method of the Group.
func OnAssigned(cb func(shard int, term *streams.Term)) Option {
	return func(o *options) error {
		if cb == nil {
			return fmt.Errorf("%w: OnAssigned: nil function", ErrInvalidOption)
		}
		o.onAssigned = cb
		return nil
	}
}

// OnRevoked sets a function called when this member stops holding a shard
// it was given with OnAssigned, for whatever reason: handed over, lost,
// or stopped. It runs like OnAssigned. When the shard is handed over, the
// next holder's term begins only after it returns, if it returns within the
// shard's lease (about a TTL; see streams.OnLost), so stop the shard's work
// before returning, well within a TTL; work that may outlive that needs the
// term's fencing token, or a wait like shards run's --grace.
func OnRevoked(cb func(shard int)) Option {
	return func(o *options) error {
		if cb == nil {
			return fmt.Errorf("%w: OnRevoked: nil function", ErrInvalidOption)
		}
		o.onRevoked = cb
		return nil
	}
}

// WithWeight sets this member's share of the shards relative to the other
// members' weights, from 1 to MaxWeight (default 1): a member of weight 2
// holds about twice the shards of one of weight 1 (between the floor and
// the ceiling of its exact share).
func WithWeight(w int) Option {
	return func(o *options) error {
		if w < 1 || w > MaxWeight {
			return fmt.Errorf("%w: WithWeight(%d): the weight must be between 1 and %d", ErrInvalidOption, w, MaxWeight)
		}
		o.weight = w
		return nil
	}
}

// WithHealthCheck runs check every every (and once before the member
// joins), each run bounded by every: a check still running when its
// context ends counts as failing, and no other starts until it returns,
// so a check that ignores its context delays neither Start nor the
// member's stop. What such a check returns late is not taken as the
// verdict: the round it returns in runs a fresh check, within what is left
// of its bound. While it fails the member is
// unhealthy: it is given no shard, and hands those it holds over to the
// healthy members (after the minimum hold, WithMinHold). When no member of
// the group is healthy, the unhealthy ones keep and take shards: an
// unhealthy holder is better than none.
func WithHealthCheck(check func(ctx context.Context) error, every time.Duration) Option {
	return func(o *options) error {
		if check == nil {
			return fmt.Errorf("%w: WithHealthCheck: nil check", ErrInvalidOption)
		}
		if every <= 0 {
			return fmt.Errorf("%w: WithHealthCheck: interval %v is not positive", ErrInvalidOption, every)
		}
		o.health, o.healthEvery = check, every
		return nil
	}
}

// WithMinHold sets how long a member holds a shard before it hands it over
// to rebalance the group or because it turned unhealthy (default 0: at
// once). It damps flapping health checks: each shard moves at most once per
// minimum hold. A member that stops hands its shards over at once, and a
// member that crashes loses them when their keys expire, whatever it is.
func WithMinHold(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: WithMinHold(%v): negative", ErrInvalidOption, d)
		}
		o.minHold = d
		return nil
	}
}

// WithLeaveTimeout bounds how long a member that stops waits for the other
// members to stand for its shards before it hands them over (default 5s).
// Shards whose next holder does not stand by then are released: any member
// may take them at once.
func WithLeaveTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithLeaveTimeout(%v): not positive", ErrInvalidOption, d)
		}
		o.leaveWithin = d
		return nil
	}
}

// WithLogger sets where the group and its shards' elections log.
func WithLogger(l streams.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger: nil logger", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// InBucket names the KV bucket the shard keys live in (default
// CHORIA_LEADER_ELECTION), as streams.InBucket does for an election.
func InBucket(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("%w: InBucket: empty name", ErrInvalidOption)
		}
		o.bucket = name
		return nil
	}
}

// WithRecorder sets a Recorder told how many shards this member holds and
// of the moves it makes, for metrics. See package metrics for a Prometheus
// one.
func WithRecorder(r Recorder) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("%w: WithRecorder: nil recorder", ErrInvalidOption)
		}
		o.recorder = r
		return nil
	}
}

// MoveCause says why a shard moved.
type MoveCause string

const (
	// MoveRebalance is a hand-over to even out the spread, as a member
	// joins or a weight changes.
	MoveRebalance MoveCause = "rebalance"
	// MoveLeave is a hand-over by a member that stops.
	MoveLeave MoveCause = "leave"
	// MoveUnhealthy is a hand-over by a member whose health check fails.
	MoveUnhealthy MoveCause = "unhealthy"
	// MoveTakeover is a shard taken without a hand-over: free at the start,
	// or orphaned by a member that vanished, once its key expired.
	MoveTakeover MoveCause = "takeover"
)

// Recorder is told what a member does, for metrics. Its methods are called
// from the member's goroutines and must not block.
type Recorder interface {
	// Holding says that member (identity/instance, as Group.Member names
	// it) holds shards shards of group now.
	Holding(group, member string, shards int)
	// Left says that member stopped, holding nothing: it is gone for good
	// (a Group runs once, and its instance is its own), so what is kept of
	// it may go. It comes after the member's last Holding.
	Left(group, member string)
	// Moved counts a shard of group that this member began to hold, by
	// why it moved here: from a member that leaves, is unhealthy, or held
	// more than its share (a hand-over), or from nobody (a takeover).
	Moved(group string, cause MoveCause)
}
