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

// Who is standing, the candidate's side (package standing has the wire and
// the asking side): each candidate answers questions of who stands, and
// announces itself as it starts, stops, changes health, and once per
// announcement interval. Only the leader, which moves leadership, and
// counting observers hear announcements. A candidate that does not answer
// is not standing.

// nextAnnouncement is when a candidate named identity announces itself
// next after now: on the boundaries of the interval every, shifted by an
// offset identity sets. A process's candidates share its identity, so
// they announce at one instant, in a few writes and system calls.
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
// each candidate's latest word, forgotten when it leaves or once silent
// for the announcement expiry. It is safe for concurrent use. A slice
// sorted by instance, then identity: smaller than a map for a few.
type roll struct {
	mu    sync.Mutex
	heard []heard
}

func newRoll() *roll { return &roll{} }

// learn notes what candidates said of themselves at now.
func (r *roll) learn(now time.Time, cs ...standing.Candidate) { r.learnSaid(now, now, cs...) }

// learnSaid notes what candidates said of themselves at said, heard at
// now: a candidate heard from after said keeps that newer word.
func (r *roll) learnSaid(now, said time.Time, cs ...standing.Candidate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		i, found := slices.BinarySearchFunc(r.heard, c, func(h heard, c standing.Candidate) int {
			return cmp.Or(cmp.Compare(h.Instance, c.Instance), cmp.Compare(h.Identity, c.Identity))
		})
		switch {
		case found && r.heard[i].at.After(said): // a newer word stands
		case found && c.Leaving:
			r.heard = slices.Delete(r.heard, i, i+1)
		case found:
			r.heard[i] = heard{Candidate: c, at: now}
		case !c.Leaving:
			r.heard = slices.Insert(r.heard, i, heard{Candidate: c, at: now})
		}
	}
	if len(r.heard) == 0 {
		r.heard = nil // an emptied roll gives its memory back
	}
}

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
		r.heard = nil
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
// is standing (only a refusal waits it out): long enough for a loaded host.
const targetWait = time.Second

// steward does what its stand says (announce, answer, check health, hear
// announcements while it leads, take hand-over requests, move leadership)
// and tells the stand what came of it. At rest it holds no goroutine and
// no timer: the stand's wake-up and pokes start a pass on stewardPasses,
// one at a time; a duty that waits on the network or the user runs on a
// goroutine of its own.
type steward struct {
	e      *Election
	nc     *nats.Conn
	bucket string
	born   time.Time // when the bucket was made (zero: unknown), for localCopies
	since  time.Time

	// ctx is the parent of the serving's context. Serving starts once the
	// campaign has read its key: a candidate that may not read it would
	// only add refusals of its subscriptions to the one Start reports.
	ctx context.Context
	// The campaign's own context, and its caller's: once either ends the
	// candidate is stopping.
	campaign, caller context.Context
	once             sync.Once
	cancel           context.CancelFunc
	passes           sync.WaitGroup // the pass and the duty under way, if any

	mu sync.Mutex
	st *stand
	// running: a pass is under way; again: something happened since it
	// began, so it makes another; closed: stop began, and no pass starts.
	running, again, closed bool
	wake                   *wakeup // on the campaign's scheduler

	// Only passes, and stop after the last, use these.
	runCtx        context.Context
	subs          []*muxSub     // nil where subscribing failed
	hearing       uint64        // the term whose announcements are heard; 0 for none
	announcements *muxSub       // while leading, and leaving after it led
	reported      standingCount // what the recorder was told last; zero: nothing
}

func newSteward(e *Election, nc *nats.Conn, bucket string, born time.Time) *steward {
	return &steward{e: e, nc: nc, bucket: bucket, born: born, since: e.opts.clock.Now(),
		st: newStand(e.identity, e.instance, e.opts.minTerm, e.opts.healthEvery, rand.Int64N)}
}

// now is the time on the election's clock.
func (s *steward) now() time.Time { return s.e.opts.clock.Now() }

// start starts serving, once, until stop, with its wake-up on sched, the
// campaign's scheduler (nil: the one of the election's clock).
func (s *steward) start(sched *scheduler) {
	s.once.Do(func() {
		// stop takes the same once first: it waits for this to return.
		if sched == nil {
			sched = schedulerFor(s.e.opts.clock)
		}
		ctx, cancel := context.WithCancel(s.ctx)
		s.mu.Lock()
		s.cancel, s.runCtx = cancel, ctx
		s.wake = sched.newWakeup(s.poke)
		s.st.open(s.now())
		s.running = true // the first pass, below, is ours
		s.passes.Add(1)
		s.mu.Unlock()
		stewardOpens.run(func() {
			s.open(ctx)
			s.work()
		})
	})
}

// stop ends serving, if it started, and waits for the pass and the duty
// under way.
func (s *steward) stop() {
	s.once.Do(func() {}) // never starts after this
	s.mu.Lock()
	s.closed = true
	cancel, w := s.cancel, s.wake // both set by start, or neither
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	w.stop()
	cancel()
	s.passes.Wait()
	s.close()
}

// open subscribes before the first pass. Every candidate takes hand-over
// requests, so that a leader takes them from its first moment.
func (s *steward) open(ctx context.Context) {
	b, k := s.bucket, s.e.key
	s.subs = []*muxSub{
		s.subscribe(standing.CandidatesSubject(b, k), "answer who is standing", s.onQuestion),
		s.subscribe(standing.HandOverSubject(b, k), "take hand-over requests",
			func(m *nats.Msg) { go s.onHandOver(ctx, m) }),
	}
	s.joinCopies()
}

// subscribe subscribes handle to subject through the mux, or warns that
// the candidate cannot do what, and returns nil.
func (s *steward) subscribe(subject, what string, handle func(*nats.Msg)) *muxSub {
	sub, err := muxSubscribe(s.nc, subject, handle)
	if err != nil {
		s.e.opts.log.Warnf("election %s: cannot %s: %v", s.e.key, what, err)
	}
	return sub
}

// close, after the last pass, unsubscribes, announces the candidate
// leaving and withdraws its count.
func (s *steward) close() {
	s.leaveCopies()
	for _, sub := range s.subs {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}
	s.listen(s.runCtx, 0)
	s.announce(true)
	if s.reported != (standingCount{}) {
		s.e.opts.recorder.StandingWithdrawn(s.e.key, s.reporter())
	}
}

// poke asks the steward to reconsider: it starts a pass, or has the one
// under way make another.
func (s *steward) poke() {
	s.mu.Lock()
	start := false
	switch {
	case s.closed || s.runCtx == nil:
	case s.running:
		s.again = true
	default:
		s.running, start = true, true
		s.passes.Add(1)
	}
	s.mu.Unlock()
	if start {
		stewardPasses.run(s.work)
	}
}

// stewardOpens and stewardPasses run the stewards' first opening (a
// fleet's keys are read together) and their passes (a process's
// candidates announce at one instant) a few at a time.
var stewardOpens, stewardPasses = &turns{max: 64}, &turns{max: 64}

// work makes passes until one ends with nothing new to do, then ends the
// count of passes under way.
func (s *steward) work() {
	defer s.passes.Done()
	for again := true; again; {
		s.pass(s.runCtx)
		s.mu.Lock()
		again = s.again && !s.closed
		s.running, s.again = again, false
		s.mu.Unlock()
	}
}

// pass tells the stand of the candidate's term, steps it, and does what
// it says.
func (s *steward) pass(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	var token uint64
	var started time.Time
	if t := s.e.Term(); t != nil && t.Valid() {
		token, started = t.Token(), t.Started()
	}
	in := s.standNow(token != 0) // only a leader's decisions read its copies
	now := s.now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.st.follow(now, token, started, in.self.Leaving)
	out := s.st.step(now, in)
	if out.wake.IsZero() {
		s.wake.stop()
	} else {
		s.wake.set(out.wake.Sub(now))
	}
	hears := s.st.hears
	s.mu.Unlock()
	if hears != s.hearing {
		s.listen(ctx, hears)
	}
	if out.announce {
		s.announce(false)
	}
	switch {
	case out.check:
		s.goDo(func() { s.runCheck(ctx) })
	case out.ask != noDuty:
		s.goDo(func() { s.ask(ctx, out.ask, token) })
	case out.move != nil:
		s.goDo(func() { s.move(ctx, *out.move) })
	}
	s.report()
}

// goDo runs a duty that waits on a goroutine of its own, counted with the
// passes, and pokes once it is done.
func (s *steward) goDo(f func()) {
	s.passes.Add(1)
	go func() {
		defer s.passes.Done()
		f()
		s.poke()
	}()
}

// standNow is the candidate as the stand reads it now, with the process's
// other copies when withCopies: only a leader's decisions read them.
func (s *steward) standNow(withCopies bool) standNow {
	in := standNow{self: s.self(), ttl: s.e.ttl()}
	if withCopies {
		in.copies = s.localCopies()
	}
	return in
}

// listen hears the announcements of the term token (none for 0) alone.
func (s *steward) listen(ctx context.Context, token uint64) {
	if s.announcements != nil {
		_ = s.announcements.Unsubscribe()
	}
	s.announcements, s.hearing = nil, token
	if token == 0 || ctx.Err() != nil {
		return
	}
	s.announcements = s.subscribe(standing.AnnounceSubject(s.bucket, s.e.key),
		"hear the candidates' announcements", func(m *nats.Msg) { s.onAnnouncement(token, m) })
}

// ask asks who is standing for duty d of the term token, and tells the
// stand the answers.
func (s *steward) ask(ctx context.Context, d duty, token uint64) {
	asked := s.now()
	answers, err := standing.Standing(ctx, s.nc, s.bucket, s.e.key, 0)
	if err != nil {
		s.e.opts.log.Debugf("election %s: cannot ask who is standing: %v", s.e.key, err)
	}
	in := s.standNow(true)
	s.mu.Lock()
	s.st.answered(s.now(), asked, d, token, answers, err, in)
	s.mu.Unlock()
}

// report tells the recorder, when it changed, how many candidates stand,
// this one included (Recorder.Standing): a leader counts every one it
// hears of, a standby itself alone. It runs in passes only, holding no
// lock, so that counts reach the recorder in order.
func (s *steward) report() {
	if _, none := s.e.opts.recorder.(nopRecorder); none {
		return
	}
	var n standingCount
	n.healthy, n.unhealthy = s.st.roll.count()
	if s.self().Healthy {
		n.healthy++
	} else {
		n.unhealthy++
	}
	if n == s.reported {
		return
	}
	s.reported = n
	s.e.opts.recorder.Standing(s.e.key, s.reporter(), n.healthy, n.unhealthy)
}

// reporter names the candidate to the recorder: identity/instance, so that
// copies under one identity in one process count apart.
func (s *steward) reporter() string {
	return s.e.identity + "/" + s.e.instance
}

// self is the candidate as it announces itself now: leaving while it
// stops, so that whoever asks neither counts it nor offers it the key.
func (s *steward) self() standing.Candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := standing.Candidate{Identity: s.e.identity, Instance: s.e.instance, Priority: s.e.opts.priority, Healthy: s.st.healthy, Since: s.since}
	if t := s.e.Term(); t != nil && t.Valid() {
		c.Leader, c.Token = true, t.Token()
	}
	c.Leaving = s.stopping()
	return c
}

// stopping reports whether the candidate's campaign ended or is ending.
// The caller's context is read too: when a process stops its copies by one
// context, a leader among them must not count on a copy whose own context
// has yet to end.
func (s *steward) stopping() bool {
	return s.campaign != nil && (s.caller.Err() != nil || s.campaign.Err() != nil)
}

// announce announces the candidate, as leaving if it is.
func (s *steward) announce(leaving bool) {
	c := s.self()
	c.Leaving = c.Leaving || leaving
	_ = s.nc.Publish(standing.AnnounceSubject(s.bucket, s.e.key), c.Encode())
}

// onQuestion answers who is standing.
func (s *steward) onQuestion(m *nats.Msg) {
	if m.Reply != "" {
		_ = m.Respond(s.self().Encode())
	}
}

// onAnnouncement takes in another candidate's announcement heard during
// the term token.
func (s *steward) onAnnouncement(token uint64, m *nats.Msg) {
	c, err := standing.DecodeCandidate(m.Data)
	if err != nil || s.st.isSelf(c) {
		return
	}
	s.mu.Lock()
	s.st.hear(s.now(), token, c)
	s.mu.Unlock()
	s.poke()
}

// successor names the standby a stopping leader offers the key to (see
// stand.successor), leaving out those named in but.
func (s *steward) successor(but ...handOver) handOver {
	in := s.standNow(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.successor(in, but...)
}

// names reports whether ho names candidate c: its instance, or, where ho
// names none, any candidate of its identity.
func (ho handOver) names(c standing.Candidate) bool {
	return c.Identity == ho.to && (ho.instance == "" || c.Instance == ho.instance)
}

// onHandOver takes a hand-over request: the leader hands over and answers,
// others stay silent. An offer of the key is answered, once taken up or
// not, by the candidate it names alone.
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

// offer offers the key, held at rev in the bucket created at epoch, to
// the candidate to, and returns nil once to answers that it took the key.
// Where to names no instance, every candidate of its identity may take it
// up and one write lands: a refusal is returned only once no answer taking
// the key came within offerSettle of it, or ctx ended.
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
			return cmp.Or(refused, ctx.Err())
		}
	}
}

// offerSettle is how long an offer's refusal waits for another candidate of
// the same identity to answer that it took the key: their writes race.
// offerAnswers bounds the answers kept meanwhile.
const (
	offerSettle  = 50 * time.Millisecond
	offerAnswers = 16
)

// check runs the health check once, under ctx, and, unless ctx ended
// first, tells the stand its error; it reports whether the candidate's
// health changed.
func (s *steward) check(ctx context.Context) (changed bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.e.opts.healthEvery)
	err = s.e.opts.healthCheck(cctx)
	cancel()
	if ctx.Err() != nil {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.checked(s.now(), err), err
}

// checkBeforeStart runs the health check before the campaign begins, and
// returns its error: an unhealthy candidate must not win at start.
func (s *steward) checkBeforeStart(ctx context.Context) error {
	_, err := s.check(ctx)
	if err != nil {
		s.e.opts.log.Warnf("election %s: %s is unhealthy (%v): not campaigning until its check passes", s.e.key, s.e.identity, err)
	}
	return err
}

// runCheck runs the health check, and passes a change of health on to the
// machine.
func (s *steward) runCheck(ctx context.Context) {
	e := s.e
	changed, err := s.check(ctx)
	if !changed {
		return
	}
	switch {
	case err == nil:
		e.opts.log.Infof("election %s: %s is healthy again: campaigning", e.key, e.identity)
	case e.IsLeader():
		e.opts.log.Warnf("election %s: %s is unhealthy (%v): it leads on, and hands over to a healthy candidate once one stands", e.key, e.identity, err)
	default:
		e.opts.log.Warnf("election %s: %s is unhealthy (%v): not campaigning until its check passes", e.key, e.identity, err)
	}
	e.tell(input{kind: inHealth, unhealthy: err})
}

// move hands the term over as policy p says, and tells the stand when to
// decide again.
func (s *steward) move(ctx context.Context, p policy) {
	e, to := s.e, p.to
	e.opts.log.Infof("election %s: handing over to %s: %s", e.key, to.Identity, p.why)
	err := e.handOver(ctx, handOver{to: to.Identity, instance: to.Instance})
	switch {
	case err == nil || ctx.Err() != nil:
		err = nil
	case errors.Is(err, ErrHandOverTooSoon):
		e.opts.log.Infof("election %s: not handing over to %s yet: %v", e.key, to.Identity, err)
	case errors.Is(err, ErrNotLeader):
		e.opts.log.Infof("election %s: not handing over to %s: %v", e.key, to.Identity, err)
	default:
		e.opts.log.Warnf("election %s: could not hand over to %s: %v", e.key, to.Identity, err)
	}
	s.mu.Lock()
	s.st.moved(s.now(), afterMove(err, e.ttl()))
	s.mu.Unlock()
}

// afterMove is how long a stand waits before it decides again after a
// move that ended with err (0: once something changes): half a TTL after
// one too soon, a TTL otherwise.
func afterMove(err error, ttl time.Duration) time.Duration {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrHandOverTooSoon):
		return ttl / 2
	}
	return ttl
}

// target asks who is standing and finds the candidate a hand-over to to
// goes to: the instance named to, or the best healthy candidate of the
// identity to other than this one. Where none can take the election over,
// the error wraps ErrHandOverRefused.
func (s *steward) target(ctx context.Context, to string) (standing.Candidate, error) {
	matches := func(c standing.Candidate) bool { return c.NamedBy(to) && !s.st.isSelf(c) }
	takes := func(c standing.Candidate) bool { return matches(c) && c.Healthy && !c.Leaving }
	answers, err := standing.StandingUntil(ctx, s.nc, s.bucket, s.e.key, targetWait, func(got []standing.Candidate) bool {
		return slices.ContainsFunc(got, takes)
	})
	if err != nil {
		return standing.Candidate{}, fmt.Errorf("%w: cannot ask who is standing: %w", ErrHandOverRefused, err)
	}
	if i := slices.IndexFunc(answers, takes); i >= 0 {
		return answers[i], nil
	}
	found := slices.DeleteFunc(answers, func(c standing.Candidate) bool { return !matches(c) })
	switch {
	case len(found) == 0 && to == s.e.identity:
		return standing.Candidate{}, fmt.Errorf("%w: %w: %q is this candidate, and no other candidate of that identity answers; name another", ErrHandOverRefused, ErrInvalidIdentity, to)
	case len(found) == 0:
		return standing.Candidate{}, fmt.Errorf("%w: %s is not standing (no candidate of that identity, instance or identity/instance answered within %v); see who stands with standing.Standing or `conclave election info`", ErrHandOverRefused, to, targetWait)
	case found[0].Leaving:
		return standing.Candidate{}, fmt.Errorf("%w: %s is stopping", ErrHandOverRefused, to)
	}
	return standing.Candidate{}, fmt.Errorf("%w: %s is unhealthy (its health check fails); hand over to a healthy candidate", ErrHandOverRefused, to)
}

// maxPriority is the highest priority a candidate can have: one that has it
// never hands over while healthy.
const maxPriority = 1 << 30
