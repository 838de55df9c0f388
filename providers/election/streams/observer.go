package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
)

// Event says what changed in an election, as an Observer saw it.
type Event string

const (
	// EventCurrent is the state found when the observer started.
	EventCurrent Event = "current"
	// EventElected means a leader began a term.
	EventElected Event = "elected"
	// EventRenewed means the leader renewed its term.
	EventRenewed Event = "renewed"
	// EventReleased means the leader stepped down and handed the key over.
	EventReleased Event = "released"
	// EventRemoved means the key was deleted or purged: a forced stand-down,
	// or a release that no standby took over.
	EventRemoved Event = "removed"
	// EventExpired means the leader stopped renewing and the key expired.
	EventExpired Event = "expired"
)

// Leadership is who leads an election, as an observer knows it.
type Leadership struct {
	// Key is the election.
	Key string
	// Event is what last changed.
	Event Event
	// Leader is the leader's identity, or "" when there is no leader.
	Leader string
	// Token is the fencing token of the current term: the revision of the
	// write that began it. It is 0 when the observer did not see the term
	// begin (it started watching mid-term).
	Token uint64
	// Revision is the revision of the key's latest write.
	Revision uint64
	// Since is when the current term began, by the broker's clock, or zero
	// when the observer did not see it begin.
	Since time.Time
	// Renewed is when the key was last written, by the broker's clock.
	Renewed time.Time
	// ExpiresBy is when the key expires unless renewed again: Renewed plus
	// the bucket's TTL. The broker may expire it a little later.
	ExpiresBy time.Time
}

// HasLeader reports whether someone leads.
func (l Leadership) HasLeader() bool { return l.Leader != "" }

// String describes l in one line.
func (l Leadership) String() string {
	if !l.HasLeader() {
		return fmt.Sprintf("%s: no leader (%s)", l.Key, l.Event)
	}
	token := "token unknown"
	if l.Token != 0 {
		token = fmt.Sprintf("token %d", l.Token)
	}
	return fmt.Sprintf("%s: %s leads (%s, %s, revision %d)", l.Key, l.Leader, l.Event, token, l.Revision)
}

// ObserverOption configures an Observer.
type ObserverOption func(*observerOptions) error

type observerOptions struct {
	onChange func(Leadership)
	renewals bool
	log      Logger
}

// OnChange sets a function called with each change of leadership, on the
// observer's goroutine. With ObserveRenewals, renewals are changes too.
func OnChange(cb func(Leadership)) ObserverOption {
	return func(o *observerOptions) error { o.onChange = cb; return nil }
}

// ObserveRenewals makes renewals count as changes for OnChange.
func ObserveRenewals() ObserverOption {
	return func(o *observerOptions) error { o.renewals = true; return nil }
}

// ObserverLogger sets where the observer logs.
func ObserverLogger(l Logger) ObserverOption {
	return func(o *observerOptions) error {
		if l == nil {
			return fmt.Errorf("%w: ObserverLogger(nil)", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// Observer follows one election without campaigning: who leads, since when,
// with which token, and when nobody does. It learns of changes from a watch
// of the key, and notices expiries (which the broker does not announce) by
// checking the key when the leader's renewal is overdue.
type Observer struct {
	key    string
	bucket jetstream.KeyValue
	opts   observerOptions

	mu      sync.Mutex
	current Leadership
	ttl     time.Duration
}

// NewObserver returns an observer of election key in bucket.
func NewObserver(key string, bucket jetstream.KeyValue, opts ...ObserverOption) (*Observer, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if bucket == nil {
		return nil, fmt.Errorf("%w: bucket is nil", ErrInvalidOption)
	}
	o := observerOptions{log: nopLogger{}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Observer{key: key, bucket: bucket, opts: o, current: Leadership{Key: key}}, nil
}

// Leadership returns the latest state the observer knows.
func (o *Observer) Leadership() Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current
}

// expiryCheckDelay is how long past a predicted expiry the observer checks
// the key: the broker expires keys up to a few hundred milliseconds late.
const expiryCheckDelay = 400 * time.Millisecond

// Run follows the election until ctx ends, then returns nil. It returns an
// error if the bucket cannot hold elections; while the broker is unreachable
// it retries.
func (o *Observer) Run(ctx context.Context) error {
	var st jetstream.KeyValueStatus
	err := backoff.FiveSec.For(ctx, func(try int) error {
		var err error
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err = o.bucket.Status(rctx)
		if err != nil && ctx.Err() == nil {
			o.opts.log.Warnf("observer %s: cannot read bucket %s (try %d), retrying: %v", o.key, o.bucket.Bucket(), try+1, err)
		}
		return err
	})
	if err != nil {
		return nil // ctx ended
	}
	if st.TTL() == 0 {
		return fmt.Errorf("%w: bucket %s has no TTL", ErrInvalidBucket, st.Bucket())
	}
	o.mu.Lock()
	o.ttl = st.TTL()
	o.mu.Unlock()

	for ctx.Err() == nil {
		err := o.follow(ctx)
		if err != nil && ctx.Err() == nil {
			o.opts.log.Warnf("observer %s: watch failed, restarting: %v", o.key, err)
			_ = backoff.Sleep(ctx, backoff.FiveSec.Duration(0))
		}
	}
	return nil
}

// follow runs one watch until it ends.
func (o *Observer) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := o.bucket.Watch(wctx, o.key)
	if err != nil {
		return err
	}
	defer func() {
		_ = w.Stop()
		for range w.Updates() {
		}
	}()
	check := time.NewTimer(time.Hour)
	defer check.Stop()
	initial, sawInitial := true, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ent, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if ent == nil {
				if initial && !sawInitial {
					o.noValue()
				}
				initial = false
				continue
			}
			sawInitial = sawInitial || initial
			if ent.Revision() <= o.Leadership().Revision {
				continue // seen already: the watch restarted
			}
			l := o.apply(ent, initial)
			o.publish(l, l.Event != EventRenewed || o.opts.renewals)
			check.Reset(o.untilCheck(l))
		case <-check.C:
			o.checkExpiry(ctx, check)
		}
	}
}

// noValue handles a watch that starts with the key absent.
func (o *Observer) noValue() {
	prev := o.Leadership()
	switch {
	case prev.Revision == 0:
		o.publish(Leadership{Key: o.key, Event: EventCurrent}, true)
	case prev.HasLeader():
		o.publish(Leadership{Key: o.key, Event: EventExpired, Revision: prev.Revision}, true)
	}
}

// apply works out the new leadership from a watch entry.
func (o *Observer) apply(ent jetstream.KeyValueEntry, initial bool) Leadership {
	prev := o.Leadership()
	ttl := o.bucketTTL()
	l := Leadership{Key: o.key, Revision: ent.Revision(), Renewed: ent.Created()}
	switch {
	case ent.Operation() != jetstream.KeyValuePut:
		l.Event = EventRemoved
		return l
	case len(ent.Value()) == 0:
		l.Event = EventReleased
		return l
	}
	l.Leader = string(ent.Value())
	l.ExpiresBy = ent.Created().Add(ttl)
	switch {
	case initial && prev.Revision == 0:
		// Mid-term: the write that began the term is gone.
		l.Event = EventCurrent
	case prev.HasLeader() && prev.Leader == l.Leader && ent.Created().Sub(prev.Renewed) <= ttl+time.Second:
		// The same leader within a TTL of its last write: a renewal (a
		// renewal can only succeed while the previous write is alive).
		l.Event, l.Token, l.Since = EventRenewed, prev.Token, prev.Since
	default:
		l.Event, l.Token, l.Since = EventElected, ent.Revision(), ent.Created()
	}
	return l
}

func (o *Observer) bucketTTL() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ttl
}

// untilCheck is how long to wait before checking whether l's key expired.
func (o *Observer) untilCheck(l Leadership) time.Duration {
	if !l.HasLeader() {
		return time.Hour
	}
	return max(time.Until(l.ExpiresBy), 0) + expiryCheckDelay
}

// checkExpiry reads the key when its renewal is overdue: the broker expires
// keys silently.
func (o *Observer) checkExpiry(ctx context.Context, check *time.Timer) {
	cur := o.Leadership()
	if !cur.HasLeader() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ent, err := o.bucket.Get(rctx, o.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		o.publish(Leadership{Key: o.key, Event: EventExpired, Revision: cur.Revision}, true)
	case err != nil:
		o.opts.log.Warnf("observer %s: cannot check for expiry: %v", o.key, err)
		check.Reset(time.Second)
	case ent.Revision() == cur.Revision:
		check.Reset(expiryCheckDelay) // the broker is late expiring it
	default:
		l := o.apply(ent, false) // the watch is behind: take the newer value
		o.publish(l, l.Event != EventRenewed || o.opts.renewals)
		check.Reset(o.untilCheck(l))
	}
}

// publish records l and, if notify, tells OnChange.
func (o *Observer) publish(l Leadership, notify bool) {
	o.mu.Lock()
	o.current = l
	o.mu.Unlock()
	if notify && o.opts.onChange != nil {
		o.opts.onChange(l)
	}
}
