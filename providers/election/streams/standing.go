package streams

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Candidate is one candidate standing in an election, as it announces
// itself.
type Candidate struct {
	// Identity is the candidate's name.
	Identity string `json:"identity"`
	// Priority ranks candidates: a leader hands over to a healthy candidate
	// of a higher priority (see WithPriority). Default 0.
	Priority int `json:"priority"`
	// Healthy is false while the candidate's health check fails (see
	// WithHealthCheck); such a candidate does not campaign.
	Healthy bool `json:"healthy"`
	// Leader is true for the candidate that leads, as it knows.
	Leader bool `json:"leader"`
	// Since is when the candidate started campaigning.
	Since time.Time `json:"since"`
	// Leaving is set in the announcement a candidate makes as it stops.
	Leaving bool `json:"leaving,omitempty"`
}

// Who is standing costs the broker nothing at rest: each candidate
// subscribes to its election's candidates subject, answers requests there
// with its Candidate, and publishes it there when it starts, when its
// health or leadership changes, and as it stops. Nothing of it is in the
// election bucket, which Choria's tools list; it needs no JetStream, and
// dies with the process: a candidate that does not answer is not standing.

// CandidatesSubject is the subject on which the candidates of election key
// in bucket announce themselves and answer who is standing.
func CandidatesSubject(bucket, key string) string { return "conclave.candidates." + bucket + "." + key }

// HandOverSubject is the subject on which the leader of election key in
// bucket takes requests to hand over (see RequestHandOver).
func HandOverSubject(bucket, key string) string { return "conclave.handover." + bucket + "." + key }

// standingWait is how long Standing collects answers by default.
const standingWait = 250 * time.Millisecond

// Standing asks who is standing in election key of bucket over nc: the
// candidates that answer within wait (0: 250ms), sorted by priority, best
// first, then by identity. Candidates of older versions, and Choria's, do
// not answer.
func Standing(ctx context.Context, nc *nats.Conn, bucket, key string, wait time.Duration) ([]Candidate, error) {
	if wait <= 0 {
		wait = standingWait
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("election %s: asking who is standing: %w", key, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(CandidatesSubject(bucket, key), inbox, nil); err != nil {
		return nil, fmt.Errorf("election %s: asking who is standing: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	seen := map[string]Candidate{}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		var c Candidate
		if json.Unmarshal(msg.Data, &c) == nil && c.Identity != "" {
			seen[c.Identity] = c
		}
	}
	out := make([]Candidate, 0, len(seen))
	for _, c := range seen {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Identity, b.Identity))
	})
	return out, nil
}

// ErrNoLeaderAnswered means a hand-over request reached no leader: the
// election has none, or its leader is of a version or library (Choria's)
// that does not take such requests.
var ErrNoLeaderAnswered = errors.New("election: no leader answered the hand-over request")

// handOverRequest and handOverAnswer are the messages of RequestHandOver.
type handOverRequest struct {
	To string `json:"to"`
}

type handOverAnswer struct {
	Leader string `json:"leader"`
	Error  string `json:"error,omitempty"`
}

// RequestHandOver asks the leader of election key in bucket, over nc, to
// hand the election over to the candidate to (see Election.HandOver), and
// returns the leader's identity once it has released the key. It returns
// ErrNoLeaderAnswered when no leader answers within ctx's deadline (5s if
// it has none), and the leader's refusal otherwise.
func RequestHandOver(ctx context.Context, nc *nats.Conn, bucket, key, to string) (leader string, err error) {
	if err := validateIdentity(to); err != nil {
		return "", fmt.Errorf("election %s: hand over: %w", key, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	body, _ := json.Marshal(handOverRequest{To: to})
	msg, err := nc.RequestWithContext(ctx, HandOverSubject(bucket, key), body)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "", fmt.Errorf("election %s: %w", key, ErrNoLeaderAnswered)
	case err != nil:
		return "", fmt.Errorf("election %s: hand over: %w", key, err)
	}
	var ans handOverAnswer
	if err := json.Unmarshal(msg.Data, &ans); err != nil {
		return "", fmt.Errorf("election %s: hand over: unreadable answer %q: %w", key, msg.Data, err)
	}
	if ans.Error != "" {
		return ans.Leader, fmt.Errorf("election %s: %s refused to hand over to %s: %s", key, ans.Leader, to, ans.Error)
	}
	return ans.Leader, nil
}

// steward announces a running candidate, answers who is standing and
// hand-over requests, runs its health check, and moves leadership where it
// should go: a leader hands over to a healthy candidate of a higher
// priority, or, while unhealthy itself, to any healthy candidate, once its
// term has lasted the minimum term. Equal priorities never move, so
// leadership does not go back and forth between them.
type steward struct {
	e      *Election
	nc     *nats.Conn
	bucket string
	since  time.Time

	// The steward starts once the campaign has read its key: a candidate
	// that may not read it would only add refusals of its subscriptions
	// to the refusal Start reports.
	ctx      context.Context
	once     sync.Once
	cancel   context.CancelFunc
	finished chan struct{}

	mu      sync.Mutex
	healthy bool
	known   map[string]Candidate // the other candidates as they last announced themselves or answered
	subs    []*nats.Subscription
	wake    chan struct{} // something changed that may call for a move
}

func newSteward(e *Election, nc *nats.Conn, bucket string) *steward {
	return &steward{e: e, nc: nc, bucket: bucket, since: time.Now(), healthy: true, known: map[string]Candidate{}, wake: make(chan struct{}, 1)}
}

// start starts serving, once, until stop.
func (s *steward) start() {
	s.once.Do(func() {
		ctx, cancel := context.WithCancel(s.ctx)
		s.mu.Lock()
		s.cancel, s.finished = cancel, make(chan struct{})
		s.mu.Unlock()
		go func() {
			defer close(s.finished)
			s.run(ctx)
		}()
	})
}

// stop ends serving, if it started, and waits for it.
func (s *steward) stop() {
	s.once.Do(func() {}) // never starts after this
	s.mu.Lock()
	cancel, finished := s.cancel, s.finished
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-finished
	}
}

// run serves until ctx ends.
func (s *steward) run(ctx context.Context) {
	e := s.e
	log := e.opts.log
	candidates, err := s.nc.Subscribe(CandidatesSubject(s.bucket, e.key), s.onCandidates)
	if err != nil {
		log.Warnf("election %s: cannot answer who is standing: %v", e.key, err)
	} else {
		s.subs = append(s.subs, candidates)
	}
	handOver, err := s.nc.Subscribe(HandOverSubject(s.bucket, e.key), func(m *nats.Msg) { go s.onHandOver(ctx, m) })
	if err != nil {
		log.Warnf("election %s: cannot take hand-over requests: %v", e.key, err)
	} else {
		s.subs = append(s.subs, handOver)
	}
	s.announce(false)
	if s.ranked() {
		// Those who stood before us: a candidate of a set priority or
		// health may have to move leadership for them.
		if standing, err := Standing(ctx, s.nc, s.bucket, e.key, 0); err == nil {
			s.learn(standing...)
		}
	}
	defer func() {
		for _, sub := range s.subs {
			_ = sub.Unsubscribe()
		}
		s.announce(true)
	}()

	var health <-chan time.Time
	if e.opts.healthCheck != nil {
		t := time.NewTicker(e.opts.healthEvery)
		defer t.Stop()
		health = t.C
	}
	var moveAt <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-health:
			s.checkHealth(ctx)
		case <-s.wake:
		case <-moveAt:
		}
		moveAt = nil
		if wait := s.considerMove(ctx); wait > 0 {
			moveAt = time.After(wait)
		}
	}
}

// poke asks the steward to reconsider.
func (s *steward) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// self is the candidate as it announces itself now.
func (s *steward) self() Candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Candidate{Identity: s.e.identity, Priority: s.e.opts.priority, Healthy: s.healthy, Leader: s.e.IsLeader(), Since: s.since}
}

func (s *steward) announce(leaving bool) {
	c := s.self()
	c.Leaving = leaving
	body, _ := json.Marshal(c)
	_ = s.nc.Publish(CandidatesSubject(s.bucket, s.e.key), body)
}

// onCandidates answers who is standing, and takes in other candidates'
// announcements: one of a higher priority may call for a move.
func (s *steward) onCandidates(m *nats.Msg) {
	if m.Reply != "" {
		body, _ := json.Marshal(s.self())
		_ = m.Respond(body)
		return
	}
	var c Candidate
	if json.Unmarshal(m.Data, &c) == nil && c.Identity != "" && c.Identity != s.e.identity {
		s.mu.Lock()
		_, known := s.known[c.Identity]
		s.mu.Unlock()
		s.learn(c)
		if !known && !c.Leaving && s.ranked() {
			s.announce(false) // so that a newcomer that leads learns of us
		}
		if s.e.IsLeader() {
			s.poke()
		}
	}
}

// ranked reports whether the candidate has a priority or a health check
// set: only such candidates ask who stands as they start, and announce
// themselves again to newcomers. Candidates of the default rank never
// move leadership among themselves, so a fleet of them costs one
// announcement each as it starts, and nothing more.
func (s *steward) ranked() bool { return s.e.opts.priority != 0 || s.e.opts.healthCheck != nil }

// learn notes what other candidates said of themselves.
func (s *steward) learn(cs ...Candidate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		switch {
		case c.Identity == s.e.identity:
		case c.Leaving:
			delete(s.known, c.Identity)
		default:
			s.known[c.Identity] = c
		}
	}
}

// betterKnown reports whether a candidate self should hand over to may be
// standing, as far as announcements tell: a healthy one of a higher
// priority, or, while self is unhealthy, any healthy one.
func (s *steward) betterKnown(self Candidate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.known {
		if c.Healthy && (!self.Healthy || c.Priority > self.Priority) {
			return true
		}
	}
	return false
}

// onHandOver takes a hand-over request: the leader hands over and
// answers; other candidates stay silent.
func (s *steward) onHandOver(ctx context.Context, m *nats.Msg) {
	if !s.e.IsLeader() || m.Reply == "" {
		return
	}
	var req handOverRequest
	ans := handOverAnswer{Leader: s.e.identity}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		ans.Error = fmt.Sprintf("unreadable request %q: %v", m.Data, err)
	} else if err := s.e.HandOver(ctx, req.To); err != nil {
		ans.Error = err.Error()
	} else {
		s.e.opts.log.Infof("election %s: handed over to %s as asked", s.e.key, req.To)
	}
	body, _ := json.Marshal(ans)
	_ = m.Respond(body)
}

// checkHealth runs the health check once and passes a change on.
func (s *steward) checkHealth(ctx context.Context) {
	e := s.e
	cctx, cancel := context.WithTimeout(ctx, e.opts.healthEvery)
	err := e.opts.healthCheck(cctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	healthy := err == nil
	s.mu.Lock()
	changed := healthy != s.healthy
	s.healthy = healthy
	s.mu.Unlock()
	if !changed {
		return
	}
	if healthy {
		e.opts.log.Infof("election %s: %s is healthy again: campaigning", e.key, e.identity)
	} else {
		e.opts.log.Warnf("election %s: %s is unhealthy (%v): not campaigning; a leader hands over to a healthy candidate if one stands", e.key, e.identity, err)
	}
	e.tell(input{kind: inHealth, healthy: healthy})
	s.announce(false)
	s.poke()
}

// considerMove hands the term over when a better candidate stands, and
// returns when to look again (0: when something changes).
func (s *steward) considerMove(ctx context.Context) time.Duration {
	e := s.e
	term := e.Term()
	if term == nil || !term.Valid() {
		return 0
	}
	self := s.self()
	if !s.betterKnown(self) {
		return 0
	}
	if held := time.Since(term.Started()); held < e.opts.minTerm {
		return e.opts.minTerm - held
	}
	// Ask afresh: a candidate that died without a word does not answer.
	standing, err := Standing(ctx, s.nc, s.bucket, e.key, 0)
	if err != nil || !term.Valid() {
		return 0
	}
	s.mu.Lock()
	clear(s.known)
	s.mu.Unlock()
	s.learn(standing...)
	var best *Candidate
	for i, c := range standing {
		if c.Identity == e.identity || !c.Healthy || c.Leaving {
			continue
		}
		if self.Healthy && c.Priority <= self.Priority {
			continue
		}
		best = &standing[i] // sorted best first
		break
	}
	if best == nil {
		return 0
	}
	why := fmt.Sprintf("%s has a higher priority (%d > %d)", best.Identity, best.Priority, self.Priority)
	if !self.Healthy {
		why = fmt.Sprintf("%s is unhealthy and %s is healthy", e.identity, best.Identity)
	}
	e.opts.log.Infof("election %s: handing over to %s: %s", e.key, best.Identity, why)
	if err := e.HandOver(ctx, best.Identity); err != nil && ctx.Err() == nil {
		e.opts.log.Warnf("election %s: could not hand over to %s: %v", e.key, best.Identity, err)
	}
	return 0
}

// maxPriority is the highest priority a candidate can have: one that has it
// never hands over while healthy.
const maxPriority = 1 << 30
