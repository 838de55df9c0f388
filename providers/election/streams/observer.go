package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// Event says what changed in an election, as an Observer saw it.
type Event string

const (
	// EventCurrent is the state found when the observer started, or a
	// leader found after its watch restarted that it cannot tell from the
	// one it knew: the token is then unknown.
	EventCurrent Event = "current"
	// EventElected means a leader began a term. Where the term began by a
	// hand-over, Leadership.HandedOverBy names the leader that handed over.
	// A take of a released or handed-over key is reported as its write
	// lands: its term begins once its holder has read the bucket's TTL,
	// normally within a round trip (if that read fails, the holder's next
	// write says its term waits, reported as EventTaking).
	EventElected Event = "elected"
	// EventTaking means a candidate wrote the key after a forced removal
	// or an expiry, and its term waits until the previous holder's lease
	// has surely ended: Leader is that candidate, Token is 0, and no term
	// runs. EventElected follows as its term begins.
	EventTaking Event = "taking"
	// EventRenewed means the leader renewed its term.
	EventRenewed Event = "renewed"
	// EventReleased means the leader stepped down and marked the key free
	// (KeyReleased): a standby may lead at once. Leadership.ReleasedBy
	// names the leader that released it.
	EventReleased Event = "released"
	// EventRemoved means someone other than the leader removed the key
	// (KeyRemoved): a delete or purge, or an empty value written over it.
	// It is a forced stand-down: the next leader waits a TTL before acting.
	EventRemoved Event = "removed"
	// EventExpired means the leader stopped renewing and the key expired.
	// When a standby takes the key before the observer can tell, it is
	// reported just before the standby's write.
	EventExpired Event = "expired"
)

// Leadership is who leads an election, as an observer knows it.
type Leadership struct {
	// Key is the election.
	Key string
	// Event is what last changed.
	Event Event
	// State is what the key's latest message says (see ReadEntry): held,
	// released, removed, or absent (no message: never written or expired).
	State KeyState
	// Leader is the leader's identity, or "" when there is no leader.
	Leader string
	// Instance is the leader's instance (see Election.Instance), telling
	// apart copies that share an identity; "" when its writes do not say
	// (Choria's candidates, older versions).
	Instance string
	// HandedOverBy and HandedOverByInstance name the leader that handed the
	// election over, when the current term began by a hand-over the
	// observer saw.
	HandedOverBy, HandedOverByInstance string
	// ReleasedBy and ReleasedByInstance name the leader that stepped down,
	// when State is KeyReleased (the instance "" when its write does not say).
	ReleasedBy, ReleasedByInstance string
	// Token is the fencing token of the current term: the revision of the
	// write that began it. Conclave's leaders say it in every write (the
	// Conclave-Term header), so the observer knows it whatever it missed.
	// It is 0 while no term runs (EventTaking), and for a leader whose
	// writes do not say (Choria's) when the observer did not see the term
	// begin.
	Token uint64
	// Revision is the revision of the key's latest message.
	Revision uint64
	// Since is when the current term began, by the broker's clock, or zero
	// when the observer did not see it begin.
	Since time.Time
	// Renewed is when the key was last written, by the broker's clock.
	Renewed time.Time
	// ExpiresBy is when the key expires unless renewed again, by the
	// broker's clock: Renewed plus the bucket's current TTL. The broker may
	// expire it a little later.
	ExpiresBy time.Time

	handOverTo string // of a release
}

// HasLeader reports whether someone leads.
func (l Leadership) HasLeader() bool { return l.Leader != "" }

// String describes l in one line.
func (l Leadership) String() string {
	switch {
	case !l.HasLeader():
		return fmt.Sprintf("%s: no leader (%s)", l.Key, l.Event)
	case l.Event == EventTaking:
		return fmt.Sprintf("%s: %s holds the key, its term not yet begun (%s, revision %d)", l.Key, l.Leader, l.Event, l.Revision)
	case l.Token == 0:
		return fmt.Sprintf("%s: %s leads (%s, token unknown, revision %d)", l.Key, l.Leader, l.Event, l.Revision)
	}
	return fmt.Sprintf("%s: %s leads (%s, token %d, revision %d)", l.Key, l.Leader, l.Event, l.Token, l.Revision)
}

// ObserveStanding makes an observer follow who stands in the election
// too, over nc (the bucket's connection, or any to the same broker): it
// asks once as Run starts, then hears the candidates' announcements (one
// per candidate every two TTLs, between 2s and 2 min), and forgets a
// candidate silent for two and a half of them. Candidates then lists them,
// and a recorder (WithRecorder) is told how many stand.
func ObserveStanding(nc *nats.Conn) Option {
	return observerOption("ObserveStanding", func(o *options) error {
		if nc == nil {
			return fmt.Errorf("%w: ObserveStanding: the connection is nil", ErrInvalidOption)
		}
		o.standing = nc
		return nil
	})
}

// OnChange sets a function called with each change of leadership an
// observer sees, one call at a time and in order, never under a lock; Run
// returns after the last call. With ObserveRenewals, renewals are changes
// too.
func OnChange(cb func(Leadership)) Option {
	return observerOption("OnChange", func(o *options) error { o.onChange = cb; return nil })
}

// ObserveRenewals makes renewals count as changes for OnChange.
func ObserveRenewals() Option {
	return observerOption("ObserveRenewals", func(o *options) error { o.renewals = true; return nil })
}

// Observer follows one election without campaigning: who leads, since
// when, with which token, and when nobody does. It is the candidates' lease
// machine with writes off: it watches the key, reads it when a renewal is
// overdue (the broker expires keys silently), follows changes of the
// bucket's TTL and the bucket made again or deleted, and predicts expiries
// on its own clock from when it saw each write, never comparing the
// broker's clock with its own.
type Observer struct {
	key   string
	js    jetstream.JetStream
	store store   // set by Run once it opened the bucket (earlier by tests)
	opts  options // the clock is the system's: WithClock serves candidates

	mu      sync.Mutex
	current Leadership
	ttl     time.Duration

	standing *roll // with ObserveStanding: who stands

	// The rest is used only by the steps of the observer's machine.
	driver  driver
	n       *notifier // runs OnChange
	last    keyView   // the latest held write judged, and when it was seen
	judging *keyView  // a write held back until the TTL is read (needsTTL)
}

// NewObserver returns an observer of election key in the bucket
// CHORIA_LEADER_ELECTION (or the one InBucket names), over the JetStream
// context js of the connection to watch on, whose watches it shares with
// the process's candidates and observers on that connection. Run opens the
// bucket.
func NewObserver(key string, js jetstream.JetStream, opts ...Option) (*Observer, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	o, err := newOptions(js, opts, true)
	if err != nil {
		return nil, err
	}
	ob := &Observer{key: key, js: js, store: o.store, opts: o, current: Leadership{Key: key}}
	if o.standing != nil {
		ob.standing = newRoll()
	}
	return ob, nil
}

// Candidates returns who stands in the election as the observer last
// heard, best priority first, then by identity: each candidate's latest
// announcement or answer, Leaving ones excepted; nil without
// ObserveStanding, and empty until Run has asked.
func (o *Observer) Candidates() []standing.Candidate {
	if o.standing == nil {
		return nil
	}
	return o.standing.list()
}

// Leadership returns the latest state the observer knows.
func (o *Observer) Leadership() Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current
}

const (
	// expiryCheckDelay is how long past a predicted expiry the observer
	// checks the key: the broker expires keys up to a few hundred
	// milliseconds late.
	expiryCheckDelay = 400 * time.Millisecond
	// minCheckInterval is the least time between two reads of the key,
	// whatever the clocks say.
	minCheckInterval = 250 * time.Millisecond
	// observerRequestTimeout bounds each of the observer's requests.
	observerRequestTimeout = 5 * time.Second
)

// Run follows the election until ctx ends, then returns nil. It returns an
// error if the bucket cannot hold elections, or one wrapping
// nats.ErrConnectionClosed once the connection is closed for good (or
// ErrPermissionDenied when the broker refuses the observer's requests);
// while the broker is unreachable it retries.
func (o *Observer) Run(ctx context.Context) error {
	b := bucketAccess{js: o.js, name: o.opts.bucket, who: "observer " + o.key, timeout: observerRequestTimeout, log: o.opts.log}
	st, status, err := b.await(ctx, o.store)
	o.store = st
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, ErrPermissionDenied):
		return fatalError("observer "+o.key, err, "observe again with a new Observer")
	case errors.Is(err, ErrInvalidBucket):
		return fmt.Errorf("observer %s: %w", o.key, err)
	case err != nil:
		return nil // ctx ended
	case status.TTL() <= 0:
		return fmt.Errorf("observer %s: %w: bucket %s has no TTL, so a leader's key would never expire; set a TTL on the bucket", o.key, ErrInvalidBucket, status.Bucket())
	}
	tm, _ := observerTimings(status.TTL())
	o.mu.Lock()
	o.ttl = tm.ttl
	o.mu.Unlock()
	o.n = newNotifier()
	stopFollowing := func() {}
	if o.standing != nil {
		stopFollowing = o.followStanding(ctx)
	}
	cfg := machineConfig{key: o.key, timings: observerTimings}
	o.driver = driver{key: o.key, store: o.store, clock: o.opts.clock, m: newMachine(cfg, tm), tm: tm, log: o.opts.log, apply: o.apply}
	ended := make(chan struct{})
	o.driver.launch(ctx, input{kind: inStart, now: o.opts.clock.Now(), born: transport.StreamCreated(status)}, func() { close(ended) })
	<-ended
	stopFollowing()
	o.n.close()
	return fatalError("observer "+o.key, o.driver.fatal, "observe again with a new Observer")
}

// observerTimings are an observer's timings for a bucket TTL: none of a
// candidate's options apply.
func observerTimings(ttl time.Duration) (timings, error) {
	if ttl <= 0 {
		return timings{}, fmt.Errorf("%w: the bucket has no TTL", ErrInvalidBucket)
	}
	return timings{ttl: ttl, margin: ttl / 10, request: clamp(ttl/5, 200*time.Millisecond, observerRequestTimeout),
		retry: clamp(ttl/20, 10*time.Millisecond, 250*time.Millisecond), standby: observerBackoff(ttl)}, nil
}

// observerBackoff spaces out the checks of a write found still there after
// its predicted expiry (a late broker, or an unseen TTL change): from
// expiryCheckDelay, doubling, up to a TTL.
func observerBackoff(ttl time.Duration) Backoff {
	var steps []time.Duration
	for d := expiryCheckDelay; d < ttl; d *= 2 {
		steps = append(steps, d)
	}
	return backoff.Policy{Steps: append(steps, max(ttl, expiryCheckDelay)), Jitter: backoff.NoJitter}
}

// standingFollower keeps an observer's roll of who stands
// (ObserveStanding): announcements and the answers to one question go into
// the roll, a wake-up forgets the silent, and once the question is answered
// each change of the counts goes to the recorder through the notifier.
type standingFollower struct {
	o        *Observer
	reporter string
	wake     *wakeup
	mu       sync.Mutex
	due      time.Time // when the wake-up is set to fire; zero while it is not
	reported standingCount
	counted  bool
	asked    bool // the question was answered (or failed): counts are told from then on
	stopped  bool
}

// followStanding starts following who stands in the election, until the
// returned function is called (before o.n closes).
func (o *Observer) followStanding(ctx context.Context) (stop func()) {
	f := &standingFollower{o: o, reporter: fmt.Sprintf("observer %p", o)}
	f.wake = schedulerFor(o.opts.clock).newWakeup(f.recount)
	nc, bucket := o.opts.standing, o.opts.bucket
	sub, err := muxSubscribe(nc, standing.AnnounceSubject(bucket, o.key), func(m *nats.Msg) {
		c, err := standing.DecodeCandidate(m.Data)
		if err != nil {
			return // not an announcement
		}
		o.standing.learn(o.opts.clock.Now(), c)
		f.recount()
	})
	if err != nil {
		o.opts.log.Warnf("observer %s: cannot follow who is standing: %v", o.key, err)
		return func() {}
	}
	qctx, cancel := context.WithCancel(ctx)
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		if cs, err := standing.Standing(qctx, nc, bucket, o.key, 0); err == nil {
			o.standing.learn(o.opts.clock.Now(), cs...)
		}
		f.mu.Lock()
		f.asked = true
		f.mu.Unlock()
		f.recount()
	}()
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		<-asked
		f.mu.Lock()
		defer f.mu.Unlock()
		f.stopped = true
		f.wake.stop()
		if f.counted {
			o.n.post(func() { o.opts.recorder.StandingWithdrawn(o.key, f.reporter) })
		}
	}
}

// recount forgets the candidates fallen silent, sets the wake-up for the
// next, and tells the recorder the counts when they changed (under f.mu, so
// that they come in order).
func (f *standingFollower) recount() {
	o := f.o
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	now := o.opts.clock.Now()
	if !f.due.IsZero() && !f.due.After(now) {
		f.due = time.Time{} // it fired
	}
	o.mu.Lock()
	ttl := o.ttl
	o.mu.Unlock()
	if next := o.standing.expire(now, standing.AnnouncementExpiry(ttl)); !next.IsZero() && !next.Equal(f.due) {
		f.due = next
		f.wake.set(next.Sub(now))
	}
	var n standingCount
	n.healthy, n.unhealthy = o.standing.count()
	if !f.asked || f.counted && n == f.reported {
		return
	}
	f.counted, f.reported = true, n
	o.n.post(func() { o.opts.recorder.Standing(o.key, f.reporter, n.healthy, n.unhealthy) })
}

// apply reports what the machine learned.
func (o *Observer) apply(notes []note) (next input, ok bool) {
	for _, n := range notes {
		switch n.kind {
		case noteTimings:
			o.mu.Lock()
			o.ttl = n.timings.ttl
			if o.current.HasLeader() {
				o.current.ExpiresBy = o.current.Renewed.Add(o.ttl)
			}
			o.mu.Unlock()
		case noteTTLRead:
			if v := o.judging; v != nil {
				o.judging = nil
				o.judge(*v)
			}
		case noteViewChanged:
			v := *n.view
			if o.needsTTL(v) {
				o.judging = &v
				next, ok = input{kind: inAskTTL, now: n.at}, true
				continue
			}
			o.judge(v)
		}
	}
	return next, ok
}

// needsTTL reports whether v, a write by the leader last seen, came so long
// after that one (over 0.8 TTL: Conclave leaders renew within half of it,
// Choria's every 0.75) that only the TTL in force tells whether the key
// expired between them: a TTL lowered unseen, by up to a fifth, would make
// a new term look like a renewal.
func (o *Observer) needsTTL(v keyView) bool {
	cur := o.Leadership()
	soon := o.driver.tm.ttl * 4 / 5
	return v.State == KeyHeld && v.live && !v.term.said() && cur.HasLeader() && cur.Leader == v.Leader &&
		(v.Written.Sub(cur.Renewed) > soon || v.seenAt.Sub(o.last.seenAt) > soon)
}

// judge reports v, the key's latest message as the machine took it.
func (o *Observer) judge(v keyView) {
	prev := o.Leadership()
	first := prev.Event == ""
	ttl := o.driver.tm.ttl
	l := Leadership{Key: o.key, State: v.State, Revision: v.Revision, Renewed: v.Written}
	switch v.State {
	case KeyReleased:
		l.Event, l.ReleasedBy = EventReleased, v.ReleasedBy
		l.handOverTo, l.ReleasedByInstance = v.HandOverTo, v.Instance
	case KeyRemoved:
		l.Event = EventRemoved
	case KeyAbsent:
		switch {
		case !first && !prev.HasLeader():
			return // nobody led: the key's expiry changes nothing
		case !first:
			l.Event, l.Revision = EventExpired, prev.Revision
		}
	case KeyHeld:
		l.Leader, l.Instance, l.ExpiresBy = v.Leader, v.Instance, v.Written.Add(ttl)
		switch {
		case v.term.said():
			o.judgeMarked(&l, prev, v)
		case first, !v.live && prev.HasLeader() && prev.Leader == v.Leader:
			// Mid-term, or the same leader after a gap (a renewal or a new
			// term begun unseen): it does not vouch for a token.
			l.Event = EventCurrent
		case !v.live:
			l.Event = EventElected // someone else leads, since an unseen write
		case o.renews(prev, v, ttl):
			l.Event, l.Token, l.Since = EventRenewed, prev.Token, prev.Since
		default:
			l.Event, l.Token, l.Since = EventElected, v.Revision, v.Written
		}
		if o.expiredUnseen(prev, l, v) {
			o.publish(Leadership{Key: o.key, Event: EventExpired, State: KeyAbsent, Revision: prev.Revision}, true)
		}
		o.last = v
	}
	if first && l.Event != EventTaking {
		l.Event, l.HandedOverBy, l.HandedOverByInstance = EventCurrent, "", ""
	}
	quiet := l.Event == EventRenewed || l.Event == EventTaking && prev.Event == EventTaking && prev.Instance == l.Instance
	o.publish(l, !quiet || o.opts.renewals)
}

// judgeMarked judges v, a held write that says its term (a Conclave
// candidate's), into l: exactly, whatever the observer missed before it.
func (o *Observer) judgeMarked(l *Leadership, prev Leadership, v keyView) {
	t := v.term
	switch {
	case t.waits:
		l.Event = EventTaking
	case t.begins:
		l.Event, l.Token, l.Since = EventElected, v.Revision, v.Written
		switch {
		case prev.State == KeyHeld && prev.Event != EventTaking && prev.HasLeader() && prev.Revision < v.Revision &&
			v.Written.Before(prev.ExpiresBy):
			// Over a running term's key, a term begins only by taking up
			// its holder's offer, within the holder's lease. Written
			// later, the key expired first (expiredUnseen).
			l.HandedOverBy, l.HandedOverByInstance = prev.Leader, prev.Instance
		case prev.State == KeyReleased && prev.handOverTo != "":
			l.HandedOverBy, l.HandedOverByInstance = prev.ReleasedBy, prev.ReleasedByInstance
		}
	case prev.Token == t.token && prev.Event != EventTaking && prev.HasLeader():
		l.Event, l.Token, l.Since = EventRenewed, prev.Token, prev.Since
		l.HandedOverBy, l.HandedOverByInstance = prev.HandedOverBy, prev.HandedOverByInstance
	default:
		l.Event, l.Token = EventElected, t.token
		if prev.Event == EventTaking && prev.Instance == v.Instance {
			l.Since = v.Written // a term that waited writes as it begins
		}
	}
}

// expiredUnseen reports whether l, judged from v, is a new term or a take
// written, with nothing between, over prev's running term once its lease
// had run out by the broker's clock: the key expired and a standby took it
// before the observer's view could tell, so the expiry is reported first.
func (o *Observer) expiredUnseen(prev, l Leadership, v keyView) bool {
	newTerm := l.Event == EventTaking || l.Event == EventElected && l.HandedOverBy == ""
	return newTerm && prev.HasLeader() && prev.Event != EventTaking && v.live &&
		o.last.known && o.last.Revision == prev.Revision && !v.Written.Before(prev.ExpiresBy)
}

// renews reports whether v, a write by the leader of prev delivered live,
// renews prev's term: it came less than a TTL (the one in force, see
// needsTTL) after prev's write by the observer's clock and by the broker's,
// never comparing the two. In doubt it says no: a new term taken for a
// renewal would vouch for the old token, which is unsafe.
func (o *Observer) renews(prev Leadership, v keyView, ttl time.Duration) bool {
	return prev.HasLeader() && prev.Leader == v.Leader && o.last.known && o.last.Revision == prev.Revision &&
		v.seenAt.Sub(o.last.seenAt) < ttl &&
		v.Written.Sub(prev.Renewed) < ttl
}

// publish records l and, if notify, tells OnChange.
func (o *Observer) publish(l Leadership, notify bool) {
	o.mu.Lock()
	o.current = l
	o.mu.Unlock()
	if cb := o.opts.onChange; notify && cb != nil {
		o.n.post(func() { cb(l) })
	}
}
