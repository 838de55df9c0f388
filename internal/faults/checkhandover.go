package faults

import (
	"fmt"
	"slices"
	"time"
)

// causeHandedOver is how a candidate records a term that ended by handing
// the election over (streams.CauseHandedOver).
const causeHandedOver = "handed over"

// HandOverResult is one term that ended by handing the election over: a
// named hand-over the harness asked for (Kind HandOver or HandOverCut), or
// a priority move its leader made on its own for a better-ranked candidate
// (Kind PriorityMove).
type HandOverResult struct {
	Kind Kind
	// From is the term that handed over; Next the term that followed it
	// (Next.Cand is "" when none began before the run stopped).
	From, Next Span
	// To is the identity a named hand-over named; "" for a priority move.
	To string
	// Asked is when the harness asked for a named hand-over; 0 for a
	// priority move.
	Asked int64
	// Landed says whether the next term went where the hand-over meant it
	// to: to a candidate of To, or, for a priority move, to one of a higher
	// priority than From's.
	Landed bool
	// Took is how long after Asked (a priority move: after From ended) the
	// next term began; Gap how long after From ended.
	Took, Gap time.Duration
	// Interfered says what else happened between the request (or From's
	// end) and the next term that may have kept the hand-over from
	// landing: the named host's process killed, stopped or cut off,
	// another fault under way. "" when nothing did.
	Interfered string
	// Overlap is set when the next term began before From ended (a
	// violation, reported by the overlap check).
	Overlap bool
}

// HandOverStats sums up hand-overs of some kinds.
type HandOverStats struct {
	// N hand-overs; Landed of them where they were meant to go;
	// Interfered fell back while something else interfered; Missed fell
	// back with nothing else under way.
	N, Landed, Interfered, Missed int
	// Took and Gap of the landed ones, sorted.
	Took, Gap []time.Duration
}

// HandOverStats sums up the hand-overs of the given kinds.
func (r *Report) HandOverStats(kinds ...Kind) HandOverStats {
	var s HandOverStats
	for _, h := range r.HandOvers {
		if !slices.Contains(kinds, h.Kind) {
			continue
		}
		s.N++
		switch {
		case h.Landed:
			s.Landed++
			s.Took = append(s.Took, h.Took)
			s.Gap = append(s.Gap, h.Gap)
		case h.Interfered != "":
			s.Interfered++
		default:
			s.Missed++
		}
	}
	slices.Sort(s.Took)
	slices.Sort(s.Gap)
	return s
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of sorted durations, by the
// nearest rank; 0 for none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// handOverAsk is a named hand-over the leader answered.
type handOverAsk struct {
	kind            Kind
	to, leader      string
	asked, answered int64
	used            bool
}

// checkHandOvers finds every term that ended by handing over, says where
// leadership went next and how soon, and what may have kept it from going
// where it was meant to. A leader that answered a named hand-over must have
// a term that ended by handing over: anything else breaks
// Election.HandOver's contract.
func (c *checker) checkHandOvers(p Params) {
	var asks []*handOverAsk
	var begin HarnessEvent
	for _, e := range c.events {
		switch {
		case e.Ev == HvFaultBegin && (Kind(e.Kind) == HandOver || Kind(e.Kind) == HandOverCut):
			begin = e
		case e.Ev == HvHandOver:
			asks = append(asks, &handOverAsk{kind: Kind(begin.Kind), to: e.Target, leader: e.Detail, asked: begin.At, answered: e.At})
		}
	}
	priority, hostOf := map[string]int{}, map[string]string{}
	for _, rec := range c.h.Candidates {
		if rec.Ev == EvStart {
			priority[rec.Proc] = rec.Priority
			hostOf[rec.Identity] = HostOf(rec.Proc)
		}
	}
	ss := c.r.Spans
	for i, s := range ss {
		if s.Ended != causeHandedOver || s.End >= c.stop {
			continue
		}
		res := HandOverResult{Kind: PriorityMove, From: s}
		for _, a := range asks {
			// The term ends before the release, the answer comes after it;
			// the OnLost that ends the span may be recorded a little later.
			if !a.used && a.leader == s.Identity && a.asked <= s.End && s.End <= a.answered+int64(2*time.Second) {
				a.used = true
				res.Kind, res.To, res.Asked = a.kind, a.to, a.asked
				break
			}
		}
		until := c.stop
		if i+1 < len(ss) && ss[i+1].Start < c.stop {
			res.Next = ss[i+1]
			until = res.Next.Start
			res.Overlap = res.Next.Start < s.End
			res.Gap = time.Duration(max(0, res.Next.Start-s.End))
			res.Took = res.Gap
			if res.Asked != 0 {
				res.Took = time.Duration(res.Next.Start - res.Asked)
			}
			if res.To != "" {
				res.Landed = res.Next.Identity == res.To
			} else {
				res.Landed = priority[res.Next.Proc] > priority[s.Proc]
			}
		}
		if !res.Landed {
			from := s.End
			if res.Asked != 0 {
				from = res.Asked
			}
			res.Interfered = c.interference(res.Kind, from, until, hostOf[res.To], p.AllowedGap())
		}
		c.r.HandOvers = append(c.r.HandOvers, res)
	}
	for _, a := range asks {
		if !a.used {
			c.r.fail("%s answered at %s that it handed over to %s, but none of its terms ended by handing over", a.leader, c.at(a.answered), a.to)
		}
	}
	c.countPromotions()
}

// interference says what happened from from to to that may have kept a
// hand-over of kind k from landing: a harness action on host target (any
// host, when target is ""), the brokers going down, or another fault under
// way or ended less than settle before from (watches it broke may not be
// back). "" when nothing did.
func (c *checker) interference(k Kind, from, to int64, target string, settle time.Duration) string {
	for _, e := range c.events {
		if e.At < from-int64(SchedulingSlack) || e.At > to {
			continue
		}
		switch e.Ev {
		case HvProcKill, HvProcExit, HvProcStop, HvProcTerm, HvLinkCut, HvLinkDelay:
			if target == "" || e.Host == target {
				return fmt.Sprintf("%s %s at %s", e.Ev, e.Target, c.at(e.At))
			}
		case HvDown, HvBrokerKill, HvPurge, HvStandDown, HvTTL:
			return fmt.Sprintf("%s %s at %s", e.Ev, e.Target, c.at(e.At))
		}
	}
	for _, f := range c.faultSpans() {
		if f.from >= to || f.to <= from-int64(settle) || f.kind == k || f.kind == PriorityMove || f.from == from {
			continue
		}
		if f.to <= from {
			return fmt.Sprintf("%s ended at %s, %v before", f.kind, c.at(f.to), time.Duration(from-f.to).Round(time.Millisecond))
		}
		return fmt.Sprintf("%s under way from %s", f.kind, c.at(f.from))
	}
	return ""
}

// countPromotions counts the priority-move faults after which a candidate
// of the promoted host led before the next fault began.
func (c *checker) countPromotions() {
	var begins []HarnessEvent
	skipped := map[int]bool{}
	for _, e := range c.events {
		switch e.Ev {
		case HvFaultBegin:
			begins = append(begins, e)
		case HvFaultSkip:
			skipped[len(begins)-1] = true
		}
	}
	hostOf := map[string]string{}
	for _, rec := range c.h.Candidates {
		if rec.Ev == EvStart {
			hostOf[rec.Identity] = HostOf(rec.Proc)
		}
	}
	for i, f := range begins {
		if Kind(f.Kind) != PriorityMove || skipped[i] {
			continue
		}
		until := c.stop
		if i+1 < len(begins) {
			until = begins[i+1].At
		}
		for _, s := range c.r.Spans {
			if s.Start > f.At && s.Start < until && s.Host == hostOf[f.Target] {
				c.r.PromotedLed++
				break
			}
		}
	}
}
