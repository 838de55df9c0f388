package streams

import (
	"slices"
	"time"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// stand is a candidate's side of who is standing, as a pure state on the
// election's clock: its health, the term it leads (if any), who else
// stands as that term heard, and when each duty falls due. It does no I/O,
// reads no clock and holds no lock: the steward and the simulator tell it
// what happened and when; step says what to do now and when to step again.
// At most one duty that waits on the network or the user is out at a time.
type stand struct {
	identity, instance string
	minTerm            time.Duration
	healthEvery        time.Duration       // 0: no health check
	random             func(n int64) int64 // draws a new term's question's delay (askDelay)

	healthy bool
	term    uint64    // the token of the term that runs; 0 while none does
	started time.Time // when that term began
	// hears is the term whose announcements the roll takes: term, or, once
	// it ended, the one a leaving candidate's stop offers the key after.
	hears uint64
	roll  roll // who else stands, as that term heard
	due   [duties]time.Time
	out   duty    // the duty whose outcome is awaited, or noDuty
	move  *policy // a move the answers to a question called for, to hand out
}

// duty is one of the things a stand does in its time.
type duty int

const (
	noDuty       duty = iota
	dutyHealth        // run the health check
	dutyAnnounce      // announce the candidate
	dutyAsk           // a new leader asks who stands: the others' announcements may be an interval away
	dutyConfirm       // ask who stands before a move the announcements call for
	dutyMove          // decide on a move: the minimum term has run, or a move came too soon
	dutyExpire        // forget the candidates silent for the announcement expiry
	duties
)

// standNow is what a step reads of the candidate as it is now.
type standNow struct {
	self   standing.Candidate // as it announces itself, but for its health: the stand's
	ttl    time.Duration      // the bucket's TTL in force
	copies []copyState        // this process's other copies (correctByCopies)
}

// standOut is what a step says to do now. At most one of check, ask and
// move is set.
type standOut struct {
	announce bool      // announce the candidate
	check    bool      // run the health check; then tell checked
	ask      duty      // dutyAsk or dutyConfirm: ask who stands; then tell answered
	move     *policy   // hand the term over as it says; then tell moved
	wake     time.Time // step again then; zero: once told something
}

func newStand(identity, instance string, minTerm, healthEvery time.Duration, random func(n int64) int64) *stand {
	return &stand{identity: identity, instance: instance, minTerm: minTerm, healthEvery: healthEvery, random: random, healthy: true}
}

// open starts the duties at now: announce at once, check health after the
// interval (the check before the campaign was the first).
func (st *stand) open(now time.Time) {
	st.due[dutyAnnounce] = now
	if st.healthEvery > 0 {
		st.due[dutyHealth] = now.Add(st.healthEvery)
	}
}

// follow tells the stand of the candidate's term at now: the token and
// start of the term that runs, or 0 while none does. A new term starts a
// roll of its own and asks who stands (askDelay); a term that ends drops
// its roll, unless the candidate is leaving: its stop offers the key by
// it, and it hears that term's announcements on, so that a standby heard
// leaving meanwhile is not offered the key.
func (st *stand) follow(now time.Time, token uint64, started time.Time, leaving bool) {
	if token == st.term {
		return
	}
	st.term, st.started, st.move = token, started, nil
	if token != 0 || !leaving {
		st.roll.reset()
		st.hears = token
	}
	st.due[dutyAsk], st.due[dutyMove] = time.Time{}, time.Time{}
	if token != 0 {
		st.due[dutyAsk] = now.Add(askDelay(st.minTerm, st.random))
	}
}

// hear takes in what candidates said of themselves at now, heard by the
// term token: a past term's word, or the candidate's own, is dropped.
func (st *stand) hear(now time.Time, token uint64, cs ...standing.Candidate) {
	st.heard(now, now, token, cs...)
}

// heard is hear for words said at said and taken in at now: a word heard
// after said is newer, and kept.
func (st *stand) heard(now, said time.Time, token uint64, cs ...standing.Candidate) {
	if token == 0 || token != st.hears {
		return
	}
	st.roll.learnSaid(now, said, slices.DeleteFunc(slices.Clone(cs), st.isSelf)...)
}

// isSelf reports whether c is this candidate: its instance, or, for an
// answer without one, its identity.
func (st *stand) isSelf(c standing.Candidate) bool {
	return c.Identity == st.identity && (c.Instance == "" || c.Instance == st.instance)
}

// checked takes the outcome of the health check at now, and reports
// whether the candidate's health changed: it then announces at once.
func (st *stand) checked(now time.Time, err error) (changed bool) {
	st.done(dutyHealth)
	if st.healthEvery > 0 {
		st.due[dutyHealth] = now.Add(st.healthEvery)
	}
	if changed = (err == nil) != st.healthy; changed {
		st.healthy = err == nil
		st.due[dutyAnnounce] = now
	}
	return changed
}

// answered takes the answers, at now, to the question asked at asked for
// duty d during the term token, or why it could not be asked (then asked
// again after askRetry). A move's question (dutyConfirm) gives a fresh
// roll, on which the policy decides again.
func (st *stand) answered(now, asked time.Time, d duty, token uint64, answers []standing.Candidate, err error, in standNow) {
	st.done(d)
	if token == 0 || token != st.term {
		return
	}
	switch {
	case err != nil && d == dutyAsk:
		st.due[dutyAsk] = now.Add(askRetry)
	case err != nil:
		st.due[dutyMove] = now.Add(askRetry)
	case d == dutyConfirm:
		st.roll.reset()
		st.hear(now, token, answers...)
		switch p := decide(st.policyInput(now, in, st.roll.list(), true)); {
		case p.moving:
			st.move = &p
		case p.wait > 0:
			st.due[dutyMove] = now.Add(p.wait)
		}
	default:
		st.heard(now, asked, token, answers...)
	}
}

// moved takes the outcome of a move: decide again after wait, if the
// term still runs (0: the move was made, or the term ended).
func (st *stand) moved(now time.Time, wait time.Duration) {
	st.done(dutyMove)
	if wait > 0 && st.term != 0 {
		st.due[dutyMove] = now.Add(wait)
	}
}

// done ends the wait for duty d's outcome.
func (st *stand) done(d duty) {
	if st.out == d {
		st.out = noDuty
	}
}

// step says what is due at now, and when to step again.
func (st *stand) step(now time.Time, in standNow) standOut {
	var out standOut
	if st.isDue(dutyAnnounce, now) {
		out.announce = true
		st.due[dutyAnnounce] = nextAnnouncement(now, standing.AnnouncementInterval(in.ttl), st.identity)
	}
	st.due[dutyExpire] = st.roll.expire(now, standing.AnnouncementExpiry(in.ttl))
	switch {
	case st.out != noDuty:
	case st.isDue(dutyHealth, now):
		st.due[dutyHealth], st.out, out.check = time.Time{}, dutyHealth, true
	case st.move != nil:
		st.out, out.move, st.move = dutyMove, st.move, nil
	case st.term != 0 && st.isDue(dutyAsk, now):
		st.due[dutyAsk], st.out, out.ask = time.Time{}, dutyAsk, dutyAsk
	case st.term != 0 && !st.due[dutyMove].After(now):
		st.due[dutyMove] = time.Time{}
		switch p := decide(st.policyInput(now, in, st.roll.list(), false)); {
		case p.confirm:
			st.out, out.ask = dutyConfirm, dutyConfirm
		case p.wait > 0:
			st.due[dutyMove] = now.Add(p.wait)
		}
	}
	for d, at := range st.due {
		// While a duty is out, the others fall due once its outcome is told.
		waits := st.out != noDuty && duty(d) != dutyAnnounce && duty(d) != dutyExpire
		if !waits && !at.IsZero() && (out.wake.IsZero() || at.Before(out.wake)) {
			out.wake = at
		}
	}
	return out
}

// isDue reports whether duty d is set and due at now.
func (st *stand) isDue(d duty, now time.Time) bool {
	return !st.due[d].IsZero() && !st.due[d].After(now)
}

// successor names the standby a stopping leader offers the key to, as
// decide says, leaving out the candidates but names (they refused the
// stop's offer): none on an empty roll, as a standby's.
func (st *stand) successor(in standNow, but ...handOver) handOver {
	roll := slices.DeleteFunc(st.roll.list(), func(c standing.Candidate) bool {
		return slices.ContainsFunc(but, func(ho handOver) bool { return ho.names(c) })
	})
	return decide(policyInput{self: st.self(in), roll: correctByCopies(roll, in.copies)}).successor
}

// self is the candidate as it announces itself, with its health.
func (st *stand) self(in standNow) standing.Candidate {
	c := in.self
	c.Healthy = st.healthy
	return c
}

// policyInput is what the hand-over policy decides on at now, with roll.
func (st *stand) policyInput(now time.Time, in standNow, roll []standing.Candidate, fresh bool) policyInput {
	p := policyInput{self: st.self(in), roll: correctByCopies(roll, in.copies), fresh: fresh, minTerm: st.minTerm}
	if st.term != 0 {
		p.leading, p.held = true, now.Sub(st.started)
	}
	return p
}

// askDelay is how long a new leader waits before it asks who is standing:
// a random time up to half its minimum term, so that the winners of a
// fleet's start do not all ask at once.
func askDelay(minTerm time.Duration, random func(n int64) int64) time.Duration {
	if minTerm <= 0 {
		return 0
	}
	return time.Duration(random(int64(minTerm/2) + 1))
}

// askRetry is how soon a leader whose question could not be sent asks again.
const askRetry = time.Second
