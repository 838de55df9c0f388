package streams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// Who is standing costs the broker little, and grows with the candidates of
// an election, not with their square. Each candidate subscribes to its
// election's candidates subject and answers the requests there
// (standing.Standing) with its standing.Candidate. It announces itself on
// the announcement subject when it starts, when its health changes, as it
// stops, and again once per announcement interval (two bucket TTLs, between
// 2s and 2 min), so that those who hear it can count it and forget it when
// its process dies without a word. Only the leader listens there, with the
// observers that count candidates: a leader is the one that moves
// leadership, and a standby has nothing to do with who stands. A candidate
// that wins asks who is standing once, within half its minimum term
// (askDelay), since the others' next announcements may be an interval away.
// Every candidate also subscribes to the hand-over subject, which carries
// nothing at rest: the leader acts on requests to hand over, and the
// candidate a leader offers the key to takes the offer up. The candidates
// of a process announce themselves together (see nextAnnouncement). The
// wire (subjects, messages) and the asking side (Standing, RequestHandOver)
// are package standing's; the candidate's side is here. A candidate that
// does not answer is not standing, and one not heard from within the
// announcement expiry (standing.AnnouncementExpiry) is no longer counted.

// nextAnnouncement is when a candidate named identity announces itself
// again after now: on the boundaries of the interval every (counted from
// the zero time, so the same in every process), shifted by an offset that
// identity sets. The candidates of a process, which share its identity,
// thus announce at one instant: its connection sends their announcements
// in a few writes, and the broker reads them and delivers them to each
// listening connection in a few system calls rather than some for each
// announcement, which is most of what a message costs it. Processes of
// other identities announce at other instants.
func nextAnnouncement(now time.Time, every time.Duration, identity string) time.Time {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity))
	next := now.Truncate(every).Add(time.Duration(h.Sum64() % uint64(every)))
	for !next.After(now) {
		next = next.Add(every)
	}
	return next
}

// heard is a candidate as it last announced itself or answered, and when.
type heard struct {
	standing.Candidate
	at time.Time
}

// roll is who stands in an election, as announcements and answers tell:
// each candidate's latest word, forgotten when it leaves or once it has
// been silent for the announcement expiry. It is safe for concurrent use.
//
// The candidates are kept in a slice sorted by name (see nameOrder): an
// election has a few, and a map's smallest table costs a leader about a
// kilobyte where three candidates take a third of that.
type roll struct {
	mu    sync.Mutex
	heard []heard
}

func newRoll() *roll { return &roll{} }

// learn notes what candidates said of themselves at now.
func (r *roll) learn(now time.Time, cs ...standing.Candidate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		i, found := slices.BinarySearchFunc(r.heard, c, func(h heard, c standing.Candidate) int { return nameOrder(h.Candidate, c) })
		switch {
		case c.Leaving && found:
			if r.heard = slices.Delete(r.heard, i, i+1); len(r.heard) == 0 {
				r.heard = nil // a roll emptied gives its memory back
			}
		case c.Leaving:
		case found:
			r.heard[i] = heard{Candidate: c, at: now}
		default:
			r.heard = slices.Insert(r.heard, i, heard{Candidate: c, at: now})
		}
	}
}

// nameOrder orders candidates by what tells them apart on the roll: their
// instance, then their identity (versions without instances have none).
func nameOrder(a, b standing.Candidate) int {
	if c := cmp.Compare(a.Instance, b.Instance); c != 0 {
		return c
	}
	return cmp.Compare(a.Identity, b.Identity)
}

// named reports whether c is the candidate a hand-over names by to: its
// instance, or its identity.
func named(c standing.Candidate, to string) bool { return c.Instance == to || c.Identity == to }

// reset forgets every candidate.
func (r *roll) reset() {
	r.mu.Lock()
	r.heard = nil
	r.mu.Unlock()
}

// expire forgets the candidates not heard from since now minus expiry, and
// returns when the next one expires unless heard from (zero: none left).
func (r *roll) expire(now time.Time, expiry time.Duration) (next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heard = slices.DeleteFunc(r.heard, func(h heard) bool { return !h.at.Add(expiry).After(now) })
	for _, h := range r.heard {
		if ends := h.at.Add(expiry); next.IsZero() || ends.Before(next) {
			next = ends
		}
	}
	if len(r.heard) == 0 {
		r.heard = nil // a roll emptied gives its memory back
	}
	return next
}

// list returns the candidates on the roll, ranked as standing.Rank does.
func (r *roll) list() []standing.Candidate {
	r.mu.Lock()
	out := make([]standing.Candidate, 0, len(r.heard))
	for _, h := range r.heard {
		out = append(out, h.Candidate)
	}
	r.mu.Unlock()
	standing.Rank(out)
	return out
}

// count returns how many candidates on the roll are healthy and unhealthy.
func (r *roll) count() (healthy, unhealthy int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.heard {
		if h.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	return healthy, unhealthy
}

// standingCount is what the recorder was last told (Recorder.Standing).
type standingCount struct{ healthy, unhealthy int }

// targetWait is how long a hand-over waits for its target to answer who
// is standing. The question ends as soon as the target answers, so only a
// refusal waits it out; it is longer than standing.Standing's default
// (250ms) so that a loaded host's slow answer does not refuse a hand-over
// to a candidate that stands.
const targetWait = time.Second

// steward announces a running candidate, answers who is standing, runs
// its health check, and, while the candidate leads, hears the others'
// announcements, takes hand-over requests and moves leadership where it
// should go: a leader hands over to a healthy candidate of a higher
// priority, or, while unhealthy itself, to any healthy candidate, once its
// term has lasted the minimum term. Equal priorities never move, so
// leadership does not go back and forth between them.
//
// It holds no goroutine and no timer at rest: its wake-ups wait in its
// process's scheduler (wakeup), and they and pokes start a pass of its
// work (pass) on a goroutine that ends when nothing more is due; one pass
// runs at a time. Every instant it reads or sets is on the election's
// clock, as the term's.
type steward struct {
	e      *Election
	nc     *nats.Conn
	bucket string
	since  time.Time

	// The steward starts once the campaign has read its key: a candidate
	// that may not read it would only add refusals of its subscriptions
	// to the refusal Start reports.
	ctx context.Context
	// campaign is the campaign's own context, and caller the one its
	// caller started it with: once either ends the candidate is stopping
	// (see stopping).
	campaign, caller context.Context
	once             sync.Once
	cancel           context.CancelFunc
	passes           sync.WaitGroup // the pass under way, if any

	known *roll // while leading: the other candidates, as they last announced themselves or answered

	mu      sync.Mutex
	healthy bool
	hearing *Term // the term whose announcements the roll takes in; nil while a standby
	// running: a pass is under way; again: something happened since it
	// began, so it makes another; closed: stop began, and no pass starts.
	running, again, closed bool
	// What is due at the next pass, set by the timers.
	healthDue, announceDue, askDue bool
	timers                         stewardTimers
	sched                          *scheduler // the campaign's, whose loop fires the timers

	// Only passes (and stop, after the last) use these.
	runCtx        context.Context
	subs          []*muxSub
	leading       *Term         // the term the announcements serve; nil while a standby
	announcements *muxSub       // while leading
	counted       bool          // the recorder has been told a count
	reported      standingCount // what it was told last
}

// stewardTimers are the steward's timers, wake-ups on its scheduler, by
// stewardTimer; each starts a pass. A timer is made when first set: a
// standby never sets the leader's (expire, move, ask).
type stewardTimers [timerCount]*wakeup

// stewardTimer names one of a steward's timers.
type stewardTimer int

const (
	timerHealth   stewardTimer = iota // run the health check
	timerAnnounce                     // announce the candidate again
	timerExpire                       // forget candidates silent for the expiry
	timerMove                         // consider a move once the minimum term has run
	timerAsk                          // ask who is standing
	timerCount
)

func newSteward(e *Election, nc *nats.Conn, bucket string) *steward {
	return &steward{e: e, nc: nc, bucket: bucket, since: e.opts.clock.Now(), healthy: true, known: newRoll()}
}

// now is the time on the election's clock.
func (s *steward) now() time.Time { return s.e.opts.clock.Now() }

// start starts serving, once, until stop, with its timers on sched, the
// campaign's scheduler (nil: the one of the election's clock).
func (s *steward) start(sched *scheduler) {
	s.once.Do(func() {
		// stop, which takes the same once first, never finds it closed
		// here: it waits for this to return.
		if sched == nil {
			sched = schedulerFor(s.e.opts.clock)
		}
		ctx, cancel := context.WithCancel(s.ctx)
		s.mu.Lock()
		s.cancel, s.runCtx, s.sched = cancel, ctx, sched
		s.running = true // the first pass, below, is ours
		s.passes.Add(1)
		s.mu.Unlock()
		// Opened a few at a time: a fleet's keys are read together. The
		// first pass is quick (nothing is due yet); passes asked for
		// meanwhile that wait on the network (a health check) go on on a
		// goroutine of their own.
		stewardOpens.run(func() {
			s.open(ctx)
			s.work(true)
		})
	})
}

// stop ends serving, if it started, and waits for the pass under way.
func (s *steward) stop() {
	s.once.Do(func() {}) // never starts after this
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	t := s.timers
	s.mu.Unlock()
	for _, w := range t {
		if w != nil {
			w.stop()
		}
	}
	if cancel == nil {
		return
	}
	cancel()
	s.passes.Wait()
	s.close()
}

// open subscribes, announces the candidate and sets the timers, before
// the first pass.
func (s *steward) open(ctx context.Context) {
	e := s.e
	log := e.opts.log
	candidates, err := muxSubscribe(s.nc, standing.CandidatesSubject(s.bucket, e.key), s.onQuestion)
	if err != nil {
		log.Warnf("election %s: cannot answer who is standing: %v", e.key, err)
	} else {
		s.subs = append(s.subs, candidates)
	}
	// Hand-over requests reach every candidate, which costs nothing at
	// rest, so that a leader takes them from its first moment, even while
	// a pass runs a health check; only a leader acts on them, and only the
	// candidate named on a leader's offer of the key.
	handOver, err := muxSubscribe(s.nc, standing.HandOverSubject(s.bucket, e.key), func(m *nats.Msg) { go s.onHandOver(ctx, m) })
	if err != nil {
		log.Warnf("election %s: cannot take hand-over requests: %v", e.key, err)
	} else {
		s.subs = append(s.subs, handOver)
	}
	s.joinCopies()
	s.announce(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if e.opts.healthCheck != nil {
		s.resetLocked(timerHealth, e.opts.healthEvery)
	}
	s.resetLocked(timerAnnounce, s.untilAnnouncement())
}

// untilAnnouncement is how long, on the election's clock, until the
// candidate announces itself again (nextAnnouncement).
func (s *steward) untilAnnouncement() time.Duration {
	now := s.now()
	return nextAnnouncement(now, standing.AnnouncementInterval(s.e.ttl()), s.e.identity).Sub(now)
}

// close unsubscribes, ends the roll, says the candidate leaves and
// withdraws its count, once the last pass has ended.
func (s *steward) close() {
	s.leaveCopies()
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.follow(s.runCtx, nil)
	s.announce(true)
	if s.counted {
		s.e.opts.recorder.StandingWithdrawn(s.e.key, s.e.identity)
	}
}

// due returns a timer's function: it marks *flag (guarded by mu) due and
// starts a pass.
func (s *steward) due(flag *bool) func() {
	return func() {
		s.mu.Lock()
		*flag = true
		s.mu.Unlock()
		s.poke()
	}
}

// poke asks the steward to reconsider: it starts a pass, or has the one
// under way make another.
func (s *steward) poke() {
	s.mu.Lock()
	if s.closed || s.runCtx == nil {
		s.mu.Unlock()
		return
	}
	if s.running {
		s.again = true
		s.mu.Unlock()
		return
	}
	s.running = true
	s.passes.Add(1)
	waits := s.waitsLocked()
	s.mu.Unlock()
	if waits {
		go s.work(false)
		return
	}
	stewardPasses.run(func() { s.work(true) })
}

// stewardPasses runs the stewards' quick passes (an announcement, a term
// to follow, candidates to forget) a few at a time: a process's candidates
// announce at one instant, and a goroutine each would make tens of
// thousands at once, whose descriptors the runtime keeps. A pass that
// waits on the network or the user (a health check, a question of who
// stands, a move) goes on on a goroutine of its own.
var stewardPasses = &turns{max: 64}

// waitsLocked reports whether the next pass waits on the network or the
// user from its start: a health check or a question of who stands is due.
func (s *steward) waitsLocked() bool { return s.healthDue || s.askDue }

// work makes passes until one ends with nothing new to do, then ends the
// count of passes under way. On a turn of stewardPasses (onTurn) it makes
// only quick ones: it goes on on a goroutine of its own, still counted,
// for one that would wait.
func (s *steward) work(onTurn bool) {
	for {
		if !s.pass(s.runCtx, !onTurn) {
			go s.work(false)
			return
		}
		s.mu.Lock()
		if !s.again || s.closed {
			s.running, s.again = false, false
			s.mu.Unlock()
			s.passes.Done()
			return
		}
		s.again = false
		s.mu.Unlock()
	}
}

// pass does what is due, follows the candidate's term, considers a move,
// and sets the timers for what comes next. Unless it may wait (on the
// network or the user), it stops short and reports false where it would:
// the caller makes the pass again where it may.
func (s *steward) pass(ctx context.Context, mayWait bool) (whole bool) {
	if ctx.Err() != nil {
		return true
	}
	e := s.e
	s.mu.Lock()
	if !mayWait && s.waitsLocked() {
		s.mu.Unlock()
		return false
	}
	health, announce, ask := s.healthDue, s.announceDue, s.askDue
	s.healthDue, s.announceDue, s.askDue = false, false, false
	s.mu.Unlock()
	if health {
		s.checkHealth(ctx)
		s.reset(timerHealth, e.opts.healthEvery)
	}
	if announce {
		s.announce(false)
		s.reset(timerAnnounce, s.untilAnnouncement())
	}
	if ask && s.leading != nil {
		if !s.askWhoStands(ctx) && ctx.Err() == nil {
			s.reset(timerAsk, askRetry)
		}
	}
	if s.follow(ctx, e.Term()) {
		s.reset(timerAsk, askDelay(e.opts.minTerm))
	} else if s.leading == nil {
		s.halt(timerAsk)
	}
	wait, asks := s.considerMove(ctx, mayWait)
	if asks {
		return false
	}
	if wait > 0 {
		s.reset(timerMove, wait)
	}
	now := s.now()
	if next := s.known.expire(now, standing.AnnouncementExpiry(e.ttl())); !next.IsZero() {
		s.reset(timerExpire, next.Sub(now))
	}
	s.report()
	return true
}

// reset sets timer t to fire after d on the election's clock (at once if
// d is not positive), unless the steward is stopping; it makes the timer
// when first set.
func (s *steward) reset(t stewardTimer, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked(t, d)
}

// resetLocked is reset, with s.mu held.
func (s *steward) resetLocked(t stewardTimer, d time.Duration) {
	if s.closed || s.sched == nil {
		return
	}
	w := s.timers[t]
	if w == nil {
		w = s.sched.newWakeup(s.fire(t))
		s.timers[t] = w
	}
	w.set(d)
}

// fire is what timer t does when it fires: mark its work due, if it has
// any of its own, and start a pass.
func (s *steward) fire(t stewardTimer) func() {
	switch t {
	case timerHealth:
		return s.due(&s.healthDue)
	case timerAnnounce:
		return s.due(&s.announceDue)
	case timerAsk:
		return s.due(&s.askDue)
	}
	return s.poke
}

// halt stops timer t, if it was ever set.
func (s *steward) halt(t stewardTimer) {
	s.mu.Lock()
	w := s.timers[t]
	s.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// askDelay is how long a new leader waits before it asks who is standing:
// a random time up to half its minimum term, before which it moves
// leadership nowhere, so that the winners of a fleet's start do not all
// ask at once.
func askDelay(minTerm time.Duration) time.Duration {
	if minTerm <= 0 {
		return 0
	}
	return rand.N(minTerm/2 + 1)
}

// askRetry is how soon a leader whose question could not be sent asks
// again.
const askRetry = time.Second

// askWhoStands asks who is standing, as the leader, and takes the answers
// in: the others' next announcements may be an interval away. It reports
// false when the question could not be sent.
func (s *steward) askWhoStands(ctx context.Context) bool {
	term := s.leading
	if term == nil {
		return true
	}
	answers, err := standing.Standing(ctx, s.nc, s.bucket, s.e.key, 0)
	if err != nil {
		s.e.opts.log.Debugf("election %s: cannot ask who is standing: %v", s.e.key, err)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hearing == term {
		s.learn(answers...)
	}
	return true
}

// follow holds the leader's subscription to the other candidates'
// announcements while term is valid, and drops it, with what it told,
// once it is not. It reports whether a new term began, which is to ask who
// is standing (askDelay).
func (s *steward) follow(ctx context.Context, term *Term) (began bool) {
	if term != nil && !term.Valid() {
		term = nil
	}
	if term == s.leading {
		return false
	}
	if s.announcements != nil {
		_ = s.announcements.Unsubscribe()
	}
	s.announcements, s.leading = nil, term
	s.mu.Lock()
	s.hearing = term // a late announcement of a past term is not taken in
	if term != nil || !s.stopping() {
		// A leader that stops keeps whom it heard: its stop offers the key
		// by it after the term ended (driver.offerOnward).
		s.known.reset()
	}
	s.mu.Unlock()
	if term == nil || ctx.Err() != nil {
		return false
	}
	sub, err := muxSubscribe(s.nc, standing.AnnounceSubject(s.bucket, s.e.key), func(m *nats.Msg) { s.onAnnouncement(term, m) })
	if err != nil {
		s.e.opts.log.Warnf("election %s: cannot hear the candidates' announcements: %v", s.e.key, err)
	}
	s.announcements = sub
	return true
}

// report tells the recorder how many candidates stand, this one included,
// when that changed (Recorder.Standing): a leader counts every candidate
// it hears of, a standby itself alone. It runs in passes only (one at a
// time), holding no lock, so that counts reach the recorder in order. An
// election given no recorder counts nothing.
func (s *steward) report() {
	if _, none := s.e.opts.recorder.(nopRecorder); none {
		return
	}
	var n standingCount
	n.healthy, n.unhealthy = s.known.count()
	if s.self().Healthy {
		n.healthy++
	} else {
		n.unhealthy++
	}
	if s.counted && n == s.reported {
		return
	}
	s.counted, s.reported = true, n
	s.e.opts.recorder.Standing(s.e.key, s.e.identity, n.healthy, n.unhealthy)
}

// self is the candidate as it announces itself now.
func (s *steward) self() standing.Candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := standing.Candidate{Identity: s.e.identity, Instance: s.e.instance, Priority: s.e.opts.priority, Healthy: s.healthy, Since: s.since}
	if t := s.e.Term(); t != nil && t.Valid() {
		c.Leader, c.Token = true, t.Token()
	}
	// A stopping candidate answers, until it has wound down, as leaving:
	// whoever asks must not count it, nor offer it the key.
	c.Leaving = s.stopping()
	return c
}

// stopping reports whether the candidate's campaign ended or is ending.
// The caller's context is read too: when a process stops its copies by
// one context, its end is seen before the copies' own contexts end, one
// after another, and a leader among them, stopping first, must not count
// on a copy that is about to stop.
func (s *steward) stopping() bool {
	return s.campaign != nil && (s.caller.Err() != nil || s.campaign.Err() != nil)
}

func (s *steward) announce(leaving bool) {
	c := s.self()
	c.Leaving = c.Leaving || leaving
	_ = s.nc.Publish(standing.AnnounceSubject(s.bucket, s.e.key), c.Encode())
}

// onQuestion answers who is standing.
func (s *steward) onQuestion(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	_ = m.Respond(s.self().Encode())
}

// onAnnouncement takes in another candidate's announcement heard during
// term: a new count, and maybe a move.
func (s *steward) onAnnouncement(term *Term, m *nats.Msg) {
	c, err := standing.DecodeCandidate(m.Data)
	if err != nil || s.isSelf(c) {
		return
	}
	s.mu.Lock()
	if s.hearing == term {
		s.known.learn(s.now(), c)
	}
	s.mu.Unlock()
	s.poke()
}

// learn notes what other candidates said of themselves.
func (s *steward) learn(cs ...standing.Candidate) {
	others := slices.DeleteFunc(slices.Clone(cs), s.isSelf)
	s.known.learn(s.now(), others...)
}

// isSelf reports whether c is this candidate: its instance, or, for an
// answer without one, its identity.
func (s *steward) isSelf(c standing.Candidate) bool {
	if c.Instance != "" {
		return c.Instance == s.e.instance && c.Identity == s.e.identity
	}
	return c.Identity == s.e.identity
}

// successor names the standby a stopping leader offers the key to, as the
// hand-over policy says (decide): the best-ranked healthy candidate on the
// roll, or none when the roll has none, as for a standby, or a leader that
// has not yet asked who is standing or heard an announcement. The
// candidates but names are left out: they refused the stop's offer.
func (s *steward) successor(but ...handOver) handOver {
	roll := slices.DeleteFunc(s.known.list(), func(c standing.Candidate) bool {
		return slices.ContainsFunc(but, func(ho handOver) bool { return ho.names(c) })
	})
	return decide(s.policyInput(nil, roll, false)).successor
}

// names reports whether ho names candidate c: its instance, or, where ho
// names none, any candidate of its identity.
func (ho handOver) names(c standing.Candidate) bool {
	return c.Identity == ho.to && (ho.instance == "" || c.Instance == ho.instance)
}

// policyInput is what the hand-over policy decides on for this candidate,
// leading term (nil while a standby), with roll: the term's age is counted
// on the election's clock, as the term's start.
func (s *steward) policyInput(term *Term, roll []standing.Candidate, fresh bool) policyInput {
	in := policyInput{self: s.self(), roll: s.withLocalCopies(roll), fresh: fresh, minTerm: s.e.opts.minTerm}
	if term != nil && term.Valid() {
		in.leading, in.held = true, s.e.opts.clock.Now().Sub(term.Started())
	}
	return in
}

// onHandOver takes a hand-over request: the leader hands over and
// answers; other candidates stay silent. An offer of the key is taken up
// by the candidate it names alone, which answers once it took the key or
// could not.
func (s *steward) onHandOver(ctx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	req, err := standing.DecodeHandOverRequest(m.Data)
	if err == nil && req.Revision != 0 {
		if req.To == s.e.identity && (req.Instance == "" || req.Instance == s.e.instance) {
			ans := standing.HandOverAnswer{Leader: req.From}
			if s.stopping() {
				// Refused at once, so that the leader offers the key on.
				ans.Error = "the candidate is stopping"
			} else if err := s.e.takeOver(ctx, req); err != nil {
				ans.Error = err.Error()
			}
			_ = m.Respond(ans.Encode())
		}
		return
	}
	if !s.e.IsLeader() {
		return
	}
	ans := standing.HandOverAnswer{Leader: s.e.identity}
	if err != nil {
		ans.Error = err.Error()
	} else if err := s.e.HandOver(ctx, req.To); err != nil {
		ans.Error, ans.Refused = err.Error(), errors.Is(err, ErrHandOverRefused)
	} else {
		s.e.opts.log.Infof("election %s: handed over to %s as asked", s.e.key, req.To)
	}
	_ = m.Respond(ans.Encode())
}

// offer offers the key, held at rev in the bucket created at epoch, to the
// candidate to, and returns nil once to answers that it took the key. The
// instance named takes the offer up, or, where none is named, every
// candidate of that identity (a host may run several), and one write lands: a refusal is returned only once no other answer
// taking the key came within offerSettle of it, or ctx ended.
func (s *steward) offer(ctx context.Context, to handOver, rev uint64, epoch time.Time) error {
	body := standing.HandOverRequest{To: to.to, Instance: to.instance, From: s.e.identity, Revision: rev, Epoch: epoch}.Encode()
	inbox := s.nc.NewRespInbox()
	answers := make(chan *nats.Msg, offerAnswers)
	sub, err := s.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest(standing.HandOverSubject(s.bucket, s.e.key), inbox, body); err != nil {
		return err
	}
	var refused error
	var settle <-chan time.Time
	for {
		select {
		case msg := <-answers:
			if msg.Header.Get("Status") == "503" {
				return nats.ErrNoResponders
			}
			switch ans, err := standing.DecodeHandOverAnswer(msg.Data); {
			case err != nil:
				refused = err
			case ans.Error == "":
				return nil
			default:
				refused = errors.New(ans.Error)
			}
			if settle == nil {
				timer := time.NewTimer(offerSettle)
				defer timer.Stop()
				settle = timer.C
			}
		case <-settle:
			return refused
		case <-ctx.Done():
			if refused != nil {
				return refused
			}
			return ctx.Err()
		}
	}
}

// offerSettle is how long an offer's refusal waits for another candidate of
// the same identity to answer that it took the key: their writes race, and
// their answers come within milliseconds of each other. offerAnswers bounds
// the answers kept meanwhile.
const (
	offerSettle  = 50 * time.Millisecond
	offerAnswers = 16
)

// checkHealth runs the health check once, passes a change on, and returns
// the check's error: nil when it passed, or when ctx ended first.
func (s *steward) checkHealth(ctx context.Context) error {
	e := s.e
	cctx, cancel := context.WithTimeout(ctx, e.opts.healthEvery)
	err := e.opts.healthCheck(cctx)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	healthy := err == nil
	s.mu.Lock()
	changed := healthy != s.healthy
	s.healthy = healthy
	s.mu.Unlock()
	if !changed {
		return err
	}
	if healthy {
		e.opts.log.Infof("election %s: %s is healthy again: campaigning", e.key, e.identity)
	} else {
		if e.IsLeader() {
			e.opts.log.Warnf("election %s: %s is unhealthy (%v): it leads on, and hands over to a healthy candidate once one stands", e.key, e.identity, err)
		} else {
			e.opts.log.Warnf("election %s: %s is unhealthy (%v): not campaigning until its check passes", e.key, e.identity, err)
		}
	}
	e.tell(input{kind: inHealth, unhealthy: err})
	s.announce(false)
	s.poke()
	return err
}

// considerMove hands the term over where the hand-over policy says, and
// returns when to look again (0: when something changes). A move the
// announcements call for is confirmed by asking who stands first: the
// policy decides again on the answers. Unless it may ask (mayAsk), it
// reports asks instead, doing nothing.
func (s *steward) considerMove(ctx context.Context, mayAsk bool) (wait time.Duration, asks bool) {
	e := s.e
	term := e.Term()
	if term == nil || !term.Valid() {
		return 0, false
	}
	p := decide(s.policyInput(term, s.known.list(), false))
	if !p.confirm {
		return p.wait, false
	}
	if !mayAsk {
		return 0, true
	}
	// Ask afresh: a candidate that died without a word does not answer.
	answers, err := standing.Standing(ctx, s.nc, s.bucket, e.key, 0)
	if err != nil || !term.Valid() {
		return 0, false
	}
	s.known.reset()
	s.learn(answers...)
	if p = decide(s.policyInput(term, s.known.list(), true)); !p.moving {
		return p.wait, false
	}
	return s.move(ctx, p), false
}

// move hands the term over as policy p says, and returns when to look
// again (0: when something changes).
func (s *steward) move(ctx context.Context, p policy) time.Duration {
	e, to := s.e, p.to
	e.opts.log.Infof("election %s: handing over to %s: %s", e.key, to.Identity, p.why)
	switch err := e.handOver(ctx, handOver{to: to.Identity, instance: to.Instance}); {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, ErrHandOverTooSoon):
		e.opts.log.Infof("election %s: not handing over to %s yet: %v", e.key, to.Identity, err)
		return e.ttl() / 2 // look again; it is at most a TTL away
	case errors.Is(err, ErrNotLeader):
		// The term ended meanwhile, as when the candidate stops.
		e.opts.log.Infof("election %s: not handing over to %s: %v", e.key, to.Identity, err)
	default:
		e.opts.log.Warnf("election %s: could not hand over to %s: %v", e.key, to.Identity, err)
	}
	return 0
}

// target finds the candidate a hand-over to to would go to, asking who is
// standing: the instance named to, or the best healthy candidate of the
// identity to other than this one. It returns an error wrapping
// ErrHandOverRefused when there is none that can take the election over:
// none answers, or the one named is unhealthy or leaving.
func (s *steward) target(ctx context.Context, to string) (standing.Candidate, error) {
	matches := func(c standing.Candidate) bool { return named(c, to) && !s.isSelf(c) }
	answers, err := standing.StandingUntil(ctx, s.nc, s.bucket, s.e.key, targetWait, func(got []standing.Candidate) bool {
		for _, c := range got {
			if matches(c) && c.Healthy && !c.Leaving {
				return true
			}
		}
		return false
	})
	if err != nil {
		return standing.Candidate{}, fmt.Errorf("%w: cannot ask who is standing: %w", ErrHandOverRefused, err)
	}
	var found []standing.Candidate
	for _, c := range answers {
		if matches(c) {
			found = append(found, c)
		}
	}
	for _, c := range found {
		if c.Healthy && !c.Leaving {
			return c, nil
		}
	}
	switch {
	case len(found) == 0 && to == s.e.identity:
		return standing.Candidate{}, fmt.Errorf("%w: %w: %q is this candidate, and no other candidate of that identity answers; name another", ErrHandOverRefused, ErrInvalidIdentity, to)
	case len(found) == 0:
		return standing.Candidate{}, fmt.Errorf("%w: %s is not standing (no candidate of that identity or instance answered within %v); see who stands with standing.Standing or `conclave election info`", ErrHandOverRefused, to, targetWait)
	case found[0].Leaving:
		return standing.Candidate{}, fmt.Errorf("%w: %s is stopping", ErrHandOverRefused, to)
	}
	return standing.Candidate{}, fmt.Errorf("%w: %s is unhealthy (its health check fails); hand over to a healthy candidate", ErrHandOverRefused, to)
}

// maxPriority is the highest priority a candidate can have: one that has it
// never hands over while healthy.
const maxPriority = 1 << 30
