package faults

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// History is every record of a run.
type History struct {
	Candidates []CandidateRecord // all candidate files, each in file order
	Writes     []WriteRecord     // the fencing resource's, in order of receipt
	Events     []HarnessEvent    // the harness's, in order
}

// LoadHistory reads the records of the run in dir.
func LoadHistory(dir string) (*History, error) {
	var h History
	var err error
	if h.Events, err = ReadJournal[HarnessEvent](filepath.Join(dir, "harness.jsonl")); err != nil {
		return nil, err
	}
	if h.Writes, err = ReadJournal[WriteRecord](filepath.Join(dir, "fence.jsonl")); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "candidates", "*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	for _, f := range files {
		recs, err := ReadJournal[CandidateRecord](f)
		if err != nil {
			return nil, err
		}
		h.Candidates = append(h.Candidates, recs...)
	}
	return &h, nil
}

// Params are the checker's bounds.
type Params struct {
	TTL time.Duration
	// Failover is how long the brokers may take to serve writes again after
	// losing the stream leader: 0 for a single broker.
	Failover time.Duration
	// Slack covers the broker's expiry lateness, a standby's safety-net
	// retry step (TTL/4) and scheduling.
	Slack time.Duration
	// RestartSlack is how long after the first process of a graceful full
	// restart (restart-all) started a new leader may take: the last leader
	// released the key, and a candidate that sees a release leads at once.
	RestartSlack time.Duration
}

// AllowedGap is the longest time without a leader the checker accepts, not
// counting time when no live candidate could reach a quorum: TTL + Failover
// + Slack.
func (p Params) AllowedGap() time.Duration { return p.TTL + p.Failover + p.Slack }

// AllowedGapWith is AllowedGap with another TTL in force: the TTL and the
// safety-net step (a quarter of it, in Slack) scale with it.
func (p Params) AllowedGapWith(ttl time.Duration) time.Duration {
	if ttl <= p.TTL {
		return p.AllowedGap()
	}
	return p.AllowedGap() + (ttl-p.TTL)*5/4
}

// Span is one term as its candidate's records show it: from Term.Started to
// the earlier of OnLost and the term's final ValidUntil; for a process that
// died leading, to the earlier of its death and its last recorded deadline.
type Span struct {
	Cand, Proc, Host, Identity string
	Token                      uint64
	Start, End                 int64 // CLOCK_MONOTONIC
	// Ended says how it ended: the OnLost cause, "killed", or "unended".
	Ended string
}

// Gap is a time without a leader.
type Gap struct {
	From, To int64
	// Counted is the part of it when some live candidate could reach a
	// quorum of brokers.
	Counted time.Duration
	// Allowed is the bound the checker held it to, and Bound says which
	// rule set it.
	Allowed time.Duration
	Bound   string
	After   string // who led before, "" at the start
	Next    string // who led next
}

// Report is what the checker found.
type Report struct {
	Mode      string
	Observed  time.Duration
	Faults    map[Kind]int
	Spans     []Span
	Elections int // leadership moved to another candidate
	// Overlaps are pairs of terms that overlapped; FencedOverlaps those of
	// them settled by fencing (one side stopped, its later writes rejected).
	Overlaps, FencedOverlaps int
	WorstGap                 Gap
	Allowed                  time.Duration
	Unavailable              time.Duration // time no candidate could reach a quorum
	Writes, Accepted         int
	Rejected                 int
	// StaleRejected counts writes that reached the resource after their
	// term ended and were rejected; PausedRejected those of them a
	// pause-mid-write produced.
	StaleRejected, PausedRejected, PausedWrites int
	// LateAccepted counts writes that arrived after their term ended but
	// before any newer leader had written: nothing to fence yet.
	LateAccepted int
	// Moves are, for each fault kind, how long after each fault began a
	// candidate other than the one leading then began a term; Stayed counts
	// the faults after which the same candidate led on (or led again first).
	Moves  map[Kind][]time.Duration
	Stayed map[Kind]int
	// GapByKind is, for each fault kind, the worst counted gap during one
	// of its faults (or beginning within SchedulingSlack of its end).
	GapByKind map[Kind]Gap
	// Campaigns counts the candidates' attempts to win; PeakCampaigns is the
	// most one candidate made in one second; StormSeconds counts the
	// candidate-seconds with more than StormRate attempts. Not failures:
	// they measure how hard standbys press on the broker.
	Campaigns, PeakCampaigns, StormSeconds int
	// HandOvers are the terms that ended by handing the election over, by
	// request (hand-over, hand-over-cut) or for a better-ranked candidate
	// (priority moves: after a priority-move fault, or when such a
	// candidate's process was restarted); see HandOverStats.
	HandOvers []HandOverResult
	// PromotedLed counts the priority-move faults after which a candidate
	// of the promoted host led before the next fault began.
	PromotedLed int
	// ShardSpans are the terms of the shard group's shards, by key and
	// start; ShardKeys counts the shards held at some time, ShardMoves the
	// terms that began on another host than the shard's term before, and
	// ShardOverlaps the pairs of terms of one shard that overlapped.
	ShardSpans                           []ShardSpan
	ShardKeys, ShardMoves, ShardOverlaps int
	Violations                           []string

	start int64 // run-start, CLOCK_MONOTONIC
}

// StormRate is the number of campaign attempts in a second above which a
// candidate counts as storming: a standby campaigns at a takeover and then
// backs off, so more than a few attempts a second means it is not.
const StormRate = 5

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Check checks a run's records: one leader at a time (except where a stopped
// process's late writes were fenced off), every OnLost after an OnWon, no
// leaderless gap longer than the allowed one while a quorum was reachable,
// tokens that grow from term to term, and a fencing resource that took writes
// only from the leader of their term and rejected stale ones.
// The shard group's terms are held to one holder per shard key at a time
// and growing tokens per key.
func Check(h *History, p Params) *Report {
	r := &Report{Faults: map[Kind]int{}, Allowed: p.AllowedGap(), Moves: map[Kind][]time.Duration{}, Stayed: map[Kind]int{}, GapByKind: map[Kind]Gap{}}
	c := newChecker(h, r)
	c.countFaults()
	c.buildSpans()
	c.measureMoves()
	c.countCampaigns()
	c.checkOverlaps()
	c.checkHandOvers(p)
	c.checkTokens()
	c.checkGaps(p)
	c.checkWrites()
	c.checkShards()
	return r
}

type interval struct{ from, to int64 }

type checker struct {
	h        *History
	events   []HarnessEvent // h.Events in time order
	r        *Report
	died     map[string]int64      // process → reaped
	killed   map[string]bool       // process → by the harness's SIGKILL
	stopped  map[string][]interval // process → stopped (SIGSTOP to SIGCONT)
	start    int64                 // run-start
	stop     int64                 // run-stop
	byTerm   map[termKey]*Span
	writesBy map[fenceKey]WriteRecord
}

type termKey struct {
	cand  string
	token uint64
}

func newChecker(h *History, r *Report) *checker {
	c := &checker{h: h, r: r, died: map[string]int64{}, killed: map[string]bool{}, stopped: map[string][]interval{},
		byTerm: map[termKey]*Span{}, writesBy: map[fenceKey]WriteRecord{}}
	// The harness records a process's exit when it reaps it, which may be
	// after later events were written: order by time.
	c.events = slices.Clone(h.Events)
	slices.SortStableFunc(c.events, func(a, b HarnessEvent) int { return cmp.Compare(a.At, b.At) })
	for _, e := range c.events {
		switch e.Ev {
		case HvRunStart:
			c.start = e.At
		case HvRunStop:
			c.stop = e.At
		case HvProcExit:
			c.died[e.Target] = e.At
		case HvProcKill:
			c.killed[e.Target] = true
		case HvProcStop:
			c.stopped[e.Target] = append(c.stopped[e.Target], interval{from: e.At, to: 1<<63 - 1})
		case HvProcCont:
			if s := c.stopped[e.Target]; len(s) > 0 {
				s[len(s)-1].to = e.At
			}
		}
	}
	if c.stop == 0 && len(c.events) > 0 {
		c.stop = c.events[len(c.events)-1].At
	}
	r.Observed = time.Duration(c.stop - c.start)
	r.start = c.start
	for _, w := range h.Writes {
		c.writesBy[fenceKey{w.Cand, w.Seq}] = w
	}
	return c
}

func (c *checker) countFaults() {
	for _, e := range c.events {
		switch e.Ev {
		case HvFaultBegin:
			c.r.Faults[Kind(e.Kind)]++
		case HvFaultSkip:
			c.r.Faults[Kind(e.Kind)]--
		}
	}
}

// buildSpans turns each candidate's callbacks into terms, checking that
// OnWon and OnLost alternate, starting with OnWon.
func (c *checker) buildSpans() {
	byCand := map[string][]CandidateRecord{}
	var order []string
	exited := map[string]int64{} // process → its own exit record
	for _, rec := range c.h.Candidates {
		if rec.Ev == EvExit {
			exited[rec.Proc] = rec.At
		}
		if rec.Cand == "" {
			continue
		}
		if _, ok := byCand[rec.Cand]; !ok {
			order = append(order, rec.Cand)
		}
		byCand[rec.Cand] = append(byCand[rec.Cand], rec)
	}
	identity := map[string]string{}
	for _, rec := range c.h.Candidates {
		if rec.Ev == EvStart {
			identity[rec.Proc] = rec.Identity
		}
	}
	for _, cand := range order {
		recs := byCand[cand]
		slices.SortStableFunc(recs, func(a, b CandidateRecord) int { return cmp.Compare(a.At, b.At) })
		proc := ProcOf(cand)
		var open *Span
		won := false
		for _, rec := range recs {
			switch rec.Ev {
			case EvWon:
				if won {
					c.r.fail("%s: OnWon at %s while already leading (OnWon twice without OnLost)", cand, c.at(rec.At))
				}
				won = true
			case EvLeading:
				if !won {
					c.r.fail("%s: OnLeading (token %d) at %s without OnWon", cand, rec.Token, c.at(rec.At))
				}
				if open != nil {
					c.r.fail("%s: a second term (token %d) began at %s before term %d ended", cand, rec.Token, c.at(rec.At), open.Token)
				}
				open = &Span{Cand: cand, Proc: proc, Host: HostOf(cand), Identity: identity[proc], Token: rec.Token, Start: rec.Started, End: rec.ValidUntil, Ended: "unended"}
			case EvRenewed:
				if open != nil && rec.Token == open.Token && rec.ValidUntil > open.End {
					open.End = rec.ValidUntil
				}
			case EvLost:
				if !won {
					c.r.fail("%s: OnLost (%s) at %s without OnWon: a loss without a win", cand, rec.Cause, c.at(rec.At))
					continue
				}
				won = false
				if open == nil {
					c.r.fail("%s: OnLost at %s after OnWon without OnLeading", cand, c.at(rec.At))
					continue
				}
				open.End = min(rec.At, rec.ValidUntil)
				open.Ended = rec.Cause
				c.addSpan(open)
				open = nil
			}
		}
		if open == nil {
			continue
		}
		// Leading when its records end: the process died, or failed to
		// report the end of its term.
		switch died, dead := c.died[proc]; {
		case dead && c.killed[proc]:
			open.End = min(open.End, died)
			open.Ended = "killed"
		case dead:
			open.End = min(open.End, died)
			c.r.fail("%s: term %d has no OnLost although its process exited (at %s, clean exit record: %v)", cand, open.Token, c.at(died), exited[proc] != 0)
		default:
			c.r.fail("%s: term %d has no OnLost and its process is not known to have exited", cand, open.Token)
		}
		c.addSpan(open)
	}
	slices.SortFunc(c.r.Spans, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
	for i := range c.r.Spans {
		s := &c.r.Spans[i]
		c.byTerm[termKey{s.Cand, s.Token}] = s
		if i > 0 && c.r.Spans[i-1].Cand != s.Cand {
			c.r.Elections++
		}
	}
	if len(c.r.Spans) > 0 {
		c.r.Elections++ // the first leader was elected too
	}
}

func (c *checker) addSpan(s *Span) {
	if s.End < s.Start {
		s.End = s.Start // a term that ended as it began
	}
	c.r.Spans = append(c.r.Spans, *s)
}

func (c *checker) countCampaigns() {
	for _, rec := range c.h.Candidates {
		if rec.Ev != EvCampaigns {
			continue
		}
		c.r.Campaigns += rec.Count
		c.r.PeakCampaigns = max(c.r.PeakCampaigns, rec.Count)
		if rec.Count > StormRate {
			c.r.StormSeconds++
		}
	}
}

// measureMoves finds, for each fault, the first term that began after it
// (before the next fault began) and whether it moved leadership.
func (c *checker) measureMoves() {
	var begins []HarnessEvent
	skipped := map[int64]bool{}
	for _, e := range c.events {
		switch e.Ev {
		case HvFaultBegin:
			begins = append(begins, e)
		case HvFaultSkip:
			if len(begins) > 0 {
				skipped[begins[len(begins)-1].At] = true
			}
		}
	}
	for i, f := range begins {
		if skipped[f.At] {
			continue
		}
		until := c.stop
		if i+1 < len(begins) {
			until = begins[i+1].At
		}
		leading := ""
		for _, s := range c.r.Spans {
			if s.Start <= f.At && f.At < s.End {
				leading = s.Cand
			}
		}
		for _, s := range c.r.Spans {
			if s.Start <= f.At || s.Start >= until {
				continue
			}
			if s.Cand == leading {
				c.r.Stayed[Kind(f.Kind)]++
			} else {
				c.r.Moves[Kind(f.Kind)] = append(c.r.Moves[Kind(f.Kind)], time.Duration(s.Start-f.At))
			}
			break
		}
	}
}

// at formats a CLOCK_MONOTONIC time as seconds since the run started.
func (c *checker) at(t int64) string { return fmt.Sprintf("+%.3fs", float64(t-c.start)/1e9) }

func (c *checker) describe(s Span) string {
	return fmt.Sprintf("%s (identity %s) term %d [%s, %s] (%s)", s.Cand, s.Identity, s.Token, c.at(s.Start), c.at(s.End), s.Ended)
}

// checkOverlaps fails any two terms that overlap, unless one side's process
// was stopped all through the overlap and every write of its term that
// arrived after the other term began was rejected: fencing settled it.
func (c *checker) checkOverlaps() {
	ss := c.r.Spans
	for i := range ss {
		for j := i + 1; j < len(ss) && ss[j].Start < ss[i].End; j++ {
			a, b := ss[i], ss[j]
			from, to := b.Start, min(a.End, b.End)
			if c.fenced(a, from, to) || c.fenced(b, from, to) {
				c.r.FencedOverlaps++
				continue
			}
			c.r.Overlaps++
			c.r.fail("overlap of %v: %s and %s led at once", time.Duration(to-from), c.describe(a), c.describe(b))
		}
	}
}

func (c *checker) fenced(s Span, from, to int64) bool {
	covered := false
	for _, iv := range c.stopped[s.Proc] {
		if iv.from <= from && to <= iv.to {
			covered = true
		}
	}
	if !covered {
		return false
	}
	for _, w := range c.h.Writes {
		if w.Cand == s.Cand && w.Token == s.Token && w.At >= from && w.Verdict == Accepted {
			return false
		}
	}
	return true
}

// checkTokens fails a token that does not exceed the one of the term
// before it.
func (c *checker) checkTokens() {
	ss := c.r.Spans
	for i := 1; i < len(ss); i++ {
		if ss[i].Token <= ss[i-1].Token {
			c.r.fail("token %d of %s does not exceed token %d of the term before it, %s", ss[i].Token, c.describe(ss[i]), ss[i-1].Token, c.describe(ss[i-1]))
		}
	}
}

// checkGaps measures the times without a leader, less the times no live
// candidate could reach a quorum, and fails those longer than allowed.
func (c *checker) checkGaps(p Params) {
	down := c.unavailable()
	for _, iv := range down {
		c.r.Unavailable += time.Duration(min(iv.to, c.stop) - max(iv.from, c.start))
	}
	b := c.gapBounds(p)
	ss := c.r.Spans
	if len(ss) == 0 {
		c.r.fail("no candidate ever led")
		return
	}
	covered, after := ss[0].End, ss[0].Cand
	for _, s := range ss[1:] {
		if s.Start >= c.stop {
			break // stopping: the candidates hand over as they go
		}
		if s.Start > covered {
			c.gap(Gap{From: covered, To: s.Start, After: after, Next: s.Cand}, down, b, p)
		}
		if s.End > covered {
			covered, after = s.End, s.Cand
		}
	}
	if covered < c.stop {
		c.gap(Gap{From: covered, To: c.stop, After: after, Next: "(end of run)"}, down, b, p)
	}
}

// faultSpan is one fault that was injected, from its begin to its end
// event.
type faultSpan struct {
	kind     Kind
	from, to int64
	// restarted is, for restart-all and kill-all, when the first process
	// started again (0: none did before the fault ended).
	restarted int64
}

// ttlStep is the bucket TTL in force from a moment on.
type ttlStep struct {
	at  int64
	ttl time.Duration
}

// gapBounds is what the fault records say about the bound of each gap.
type gapBounds struct {
	faults []faultSpan
	late   []interval // late-delivery faults: counting starts when they heal
	ttls   []ttlStep  // the bucket TTL over time, from the run's TTL
	maxTTL time.Duration
}

func (c *checker) gapBounds(p Params) gapBounds {
	b := gapBounds{faults: c.faultSpans(), late: c.lateDelivery(), ttls: []ttlStep{{c.start, p.TTL}}, maxTTL: p.TTL}
	for _, e := range c.events {
		if e.Ev != HvTTL {
			continue
		}
		ttl, err := time.ParseDuration(e.Detail)
		if err != nil || ttl <= 0 {
			c.r.fail("harness event %s at %s: TTL %q is not a duration", e.Ev, c.at(e.At), e.Detail)
			continue
		}
		b.ttls = append(b.ttls, ttlStep{e.At, ttl})
		b.maxTTL = max(b.maxTTL, ttl)
	}
	return b
}

// ttlFor returns the largest TTL in force from one TTL before from (the
// last term's last write, and the expiry its standbys predicted from it,
// may date from then) until to.
func (b gapBounds) ttlFor(from, to int64) time.Duration {
	from -= int64(b.maxTTL)
	var ttl time.Duration
	for i, st := range b.ttls {
		end := int64(1<<63 - 1)
		if i+1 < len(b.ttls) {
			end = b.ttls[i+1].at
		}
		if st.at <= to && end >= from {
			ttl = max(ttl, st.ttl)
		}
	}
	return ttl
}

// faultSpans returns every fault that was injected (not skipped), with its
// end (the end event of the same kind and target; the run's stop if none).
func (c *checker) faultSpans() []faultSpan {
	var out []faultSpan
	open := map[[2]string]int{}
	for _, e := range c.events {
		key := [2]string{e.Kind, e.Target}
		switch e.Ev {
		case HvFaultBegin:
			open[key] = len(out)
			out = append(out, faultSpan{kind: Kind(e.Kind), from: e.At, to: c.stop})
		case HvFaultEnd, HvFaultSkip:
			i, ok := open[key]
			if !ok {
				continue
			}
			delete(open, key)
			if e.Ev == HvFaultSkip {
				out[i].kind = "" // not injected
				continue
			}
			out[i].to = e.At
		case HvProcStart:
			for i := range out {
				f := &out[i]
				if (f.kind == RestartAll || f.kind == KillAll) && f.restarted == 0 && e.At >= f.from && f.to == c.stop {
					f.restarted = e.At
				}
			}
		}
	}
	return slices.DeleteFunc(out, func(f faultSpan) bool { return f.kind == "" })
}

// waitOutlasts lists the faults after which the next term may wait up to
// a TTL: a removal (its taker waits a TTL after it; a take released on
// stop leaves a removal too), or a leader lost without a release (its key
// expires).
var waitOutlasts = []Kind{Purge, StandDown, KillLeader, PauseLeader, PauseMidWrite, CutCandidate}

// gap checks one leaderless time against its bound:
//   - Not counted: time no live candidate could reach a quorum; time while a
//     late-delivery fault was active (a write given up on can land until
//     it heals); and, in a full restart (restart-all, kill-all), the time
//     until the first process started again.
//   - Allowed: TTL + Failover + Slack, with the largest TTL in force from one
//     TTL before the gap until its end (a TTL change raises the bound to the
//     larger of the old and the new TTL). A gap in a graceful full restart
//     with no other fault under way, nor one of waitOutlasts ended within
//     a TTL before it, is allowed only RestartSlack: the last leader
//     released the key, and the first new process leads at once.
//
// Rules combine so: uncounted times add up (each postpones the start of
// counting or is cut out), bounds take the maximum.
func (c *checker) gap(g Gap, down []interval, b gapBounds, p Params) {
	if g.To <= g.From {
		return
	}
	from := g.From
	for _, iv := range b.late {
		if iv.from < g.To && iv.to > from {
			from = min(max(from, iv.to), g.To)
		}
	}
	ttl := b.ttlFor(g.From, g.To)
	graceful, stopped, others := false, false, false
	for _, f := range b.faults {
		if f.from >= g.To || f.to+int64(ttl) < g.From {
			continue
		}
		if f.to < g.From {
			// Ended before the gap: a removal, or a leader lost without
			// a release, still makes the next term wait, up to a TTL.
			others = others || slices.Contains(waitOutlasts, f.kind)
			continue
		}
		switch f.kind {
		case StopLeader:
			stopped = true
			continue
		case RestartAll, KillAll:
			if f.restarted > 0 {
				from = min(max(from, f.restarted), g.To)
			}
			if f.kind == RestartAll {
				graceful = true
				continue
			}
		}
		others = true
	}
	excluded := from - g.From
	for _, iv := range down {
		excluded += max(0, min(iv.to, g.To)-max(iv.from, from))
	}
	g.Counted = time.Duration(g.To - g.From - excluded)
	g.Allowed, g.Bound = p.AllowedGapWith(ttl), fmt.Sprintf("TTL %v + failover %v + slack", ttl, p.Failover)
	switch {
	case graceful && !others:
		g.Allowed, g.Bound = p.RestartSlack, fmt.Sprintf("%v after the first process of a graceful full restart started", p.RestartSlack)
	case stopped && !others:
		g.Allowed, g.Bound = p.RestartSlack, fmt.Sprintf("%v after the leader's graceful stop", p.RestartSlack)
	}
	if g.Counted > c.r.WorstGap.Counted {
		c.r.WorstGap = g
	}
	// Attribute the gap to the faults under way during it, or that ended
	// just before it began (a stand-down's leader stops as the command
	// returns).
	for _, f := range b.faults {
		if f.from <= g.To && f.to+int64(SchedulingSlack) >= g.From && g.Counted > c.r.GapByKind[f.kind].Counted {
			c.r.GapByKind[f.kind] = g
		}
	}
	if g.Counted > g.Allowed {
		c.r.fail("no leader for %v (%v of it counted) from %s (after %s) to %s (%s), longer than the allowed %v (%s)",
			time.Duration(g.To-g.From).Round(time.Millisecond), g.Counted.Round(time.Millisecond), c.at(g.From), g.After, c.at(g.To), g.Next, g.Allowed, g.Bound)
	}
}

// lateDelivery returns the times a fault could deliver a candidate's
// requests late, after it gave up on them: links that stall (flap-link) or
// delay (delay-link) traffic.
func (c *checker) lateDelivery() []interval {
	var out []interval
	open := map[string]int64{}
	for _, e := range c.events {
		if Kind(e.Kind) != FlapLink && Kind(e.Kind) != DelayLink {
			continue
		}
		switch e.Ev {
		case HvFaultBegin:
			open[e.Target] = e.At
		case HvFaultEnd:
			if from, ok := open[e.Target]; ok {
				out = append(out, interval{from, e.At})
				delete(open, e.Target)
			}
		}
	}
	for _, from := range open {
		out = append(out, interval{from, c.stop})
	}
	return out
}

// unavailable returns the times no live candidate could reach a quorum: the
// brokers were down (or without quorum), or every candidate process was
// dead, stopped or cut off.
func (c *checker) unavailable() []interval {
	var out []interval
	type hostState struct {
		proc                string // the current incarnation
		alive, stopped, cut bool
	}
	hosts := map[string]*hostState{}
	var downSince, noneSince int64 = -1, -1
	avail := func() int {
		n := 0
		for _, s := range hosts {
			if s.alive && !s.stopped && !s.cut {
				n++
			}
		}
		return n
	}
	for _, e := range c.events {
		if e.At > c.stop {
			break // shutting down
		}
		switch e.Ev {
		case HvDown:
			downSince = e.At
			continue
		case HvUp:
			if downSince >= 0 {
				out = append(out, interval{downSince, e.At})
				downSince = -1
			}
			continue
		}
		if e.Host == "" {
			continue
		}
		s := hosts[e.Host]
		if s == nil {
			s = &hostState{}
			hosts[e.Host] = s
		}
		before := avail()
		switch e.Ev {
		case HvProcStart:
			s.proc, s.alive, s.stopped = e.Target, true, false
		case HvProcKill, HvProcExit:
			if e.Target == s.proc {
				s.alive = false
			}
		case HvProcStop:
			s.stopped = true
		case HvProcCont:
			s.stopped = false
		case HvLinkCut:
			s.cut = true
		case HvLinkHeal:
			s.cut = false
		default:
			continue
		}
		switch after := avail(); {
		case before > 0 && after == 0:
			noneSince = e.At
		case before == 0 && after > 0 && noneSince >= 0:
			out = append(out, interval{noneSince, e.At})
			noneSince = -1
		}
	}
	if downSince >= 0 {
		out = append(out, interval{downSince, c.stop})
	}
	if noneSince >= 0 {
		out = append(out, interval{noneSince, c.stop})
	}
	return out
}

// checkWrites checks the fencing resource's log against the terms: every
// accepted write came from its term's leader while the term was valid, no
// write that arrived after a newer term began was accepted, and no write of
// a term that was still valid was rejected. It also checks that the
// candidates' own records of their writes agree with the resource's.
func (c *checker) checkWrites() {
	paused := map[fenceKey]bool{}
	for _, rec := range c.h.Candidates {
		if rec.Ev == EvSelfStop {
			paused[fenceKey{rec.Cand, rec.Seq}] = true
		}
	}
	for _, w := range c.h.Writes {
		c.r.Writes++
		if w.Verdict == Accepted {
			c.r.Accepted++
		} else {
			c.r.Rejected++
		}
		s, ok := c.byTerm[termKey{w.Cand, w.Token}]
		if !ok {
			if w.Verdict == Accepted {
				c.r.fail("write %s#%d (token %d) at %s was accepted, but %s has no term with that token", w.Cand, w.Seq, w.Token, c.at(w.At), w.Cand)
			}
			continue
		}
		late := w.At > s.End
		newer := c.newerBegan(s.Token, w.At)
		if paused[fenceKey{w.Cand, w.Seq}] {
			c.r.PausedWrites++
			if w.Verdict == Rejected {
				c.r.PausedRejected++
			}
		}
		switch {
		case w.Verdict == Accepted && (w.Checked < s.Start || w.Checked > s.End):
			c.r.fail("write %s#%d accepted at %s was checked at %s, outside its term %s", w.Cand, w.Seq, c.at(w.At), c.at(w.Checked), c.describe(*s))
		case w.Verdict == Accepted && late && newer != nil:
			c.r.fail("stale write %s#%d (token %d) accepted at %s after %s began", w.Cand, w.Seq, w.Token, c.at(w.At), c.describe(*newer))
		case w.Verdict == Accepted && late:
			c.r.LateAccepted++
		case w.Verdict == Rejected && late:
			c.r.StaleRejected++
		case w.Verdict == Rejected:
			c.r.fail("write %s#%d (token %d) at %s rejected while its term was valid: token %d had been accepted; %s", w.Cand, w.Seq, w.Token, c.at(w.At), w.Highest, c.describe(*s))
		}
	}
	for _, rec := range c.h.Candidates {
		if rec.Ev != EvWrite || (rec.Verdict != Accepted && rec.Verdict != Rejected) {
			continue
		}
		w, ok := c.writesBy[fenceKey{rec.Cand, rec.Seq}]
		switch {
		case !ok:
			c.r.fail("%s recorded write #%d as %s, but the resource has no such write", rec.Cand, rec.Seq, rec.Verdict)
		case w.Verdict != rec.Verdict || w.Token != rec.Token:
			c.r.fail("%s recorded write #%d (token %d) as %s, the resource has token %d %s", rec.Cand, rec.Seq, rec.Token, rec.Verdict, w.Token, w.Verdict)
		}
	}
}

// newerBegan returns a term with a token above token that began before at.
func (c *checker) newerBegan(token uint64, at int64) *Span {
	for i := range c.r.Spans {
		s := &c.r.Spans[i]
		if s.Token > token && s.Start < at {
			return s
		}
	}
	return nil
}

// String summarises the report on one line.
func (r *Report) String() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(r.Violations))
	}
	return fmt.Sprintf("%s: %d terms, %d elections, %d overlaps, worst gap %v (allowed %v), %d accepted, %d stale rejected; %s: %s",
		r.Mode, len(r.Spans), r.Elections, r.Overlaps, r.WorstGap.Counted.Round(time.Millisecond), r.Allowed, r.Accepted, r.StaleRejected, r.shardSummary(), verdict)
}
