package faults

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// ShardSpan is one term of one shard of the shard group beside the
// elections.
type ShardSpan struct {
	Key        string
	Proc       string
	Token      uint64
	Start, End int64
	Ended      string
}

// checkShards turns the shard group's records into terms per shard key and
// applies the elections' checks to each key: OnAssigned and OnRevoked
// alternate, no two holders of a key overlap (a shard's holder writes no
// fence, so no overlap is settled by fencing), and tokens grow from term
// to term.
func (c *checker) checkShards() {
	type open struct {
		span ShardSpan
		ok   bool
	}
	type pk struct{ proc, key string }
	byProc := map[pk]*open{}
	var order []pk
	recs := slices.Clone(c.h.Candidates)
	slices.SortStableFunc(recs, func(a, b CandidateRecord) int { return cmp.Compare(a.At, b.At) })
	var spans []ShardSpan
	for _, rec := range recs {
		if rec.Key == "" {
			continue
		}
		k := pk{rec.Proc, rec.Key}
		o := byProc[k]
		if o == nil {
			o = &open{}
			byProc[k] = o
			order = append(order, k)
		}
		switch rec.Ev {
		case EvShardLeading:
			if o.ok {
				c.r.fail("%s shard %s: a second term (token %d) began at %s before term %d ended", rec.Proc, rec.Key, rec.Token, c.at(rec.At), o.span.Token)
			}
			o.span, o.ok = ShardSpan{Key: rec.Key, Proc: rec.Proc, Token: rec.Token, Start: rec.Started, End: rec.ValidUntil, Ended: "unended"}, true
		case EvShardRenewed:
			if o.ok && rec.Token == o.span.Token && rec.ValidUntil > o.span.End {
				o.span.End = rec.ValidUntil
			}
		case EvShardLost:
			if !o.ok {
				c.r.fail("%s shard %s: OnRevoked at %s without OnAssigned", rec.Proc, rec.Key, c.at(rec.At))
				continue
			}
			o.span.End, o.span.Ended = min(rec.At, rec.ValidUntil), rec.Cause
			spans = append(spans, o.span)
			o.ok = false
		}
	}
	for _, k := range order {
		o := byProc[k]
		if !o.ok {
			continue
		}
		// Holding when its records end: the process died, or failed to
		// report the end of the term.
		switch died, dead := c.died[k.proc]; {
		case dead && c.killed[k.proc]:
			o.span.End, o.span.Ended = min(o.span.End, died), "killed"
		case dead:
			o.span.End = min(o.span.End, died)
			c.r.fail("%s shard %s: term %d has no OnRevoked although its process exited (at %s)", k.proc, k.key, o.span.Token, c.at(died))
		default:
			c.r.fail("%s shard %s: term %d has no OnRevoked and its process is not known to have exited", k.proc, k.key, o.span.Token)
		}
		spans = append(spans, o.span)
	}
	for i := range spans {
		spans[i].End = max(spans[i].End, spans[i].Start)
	}
	slices.SortStableFunc(spans, func(a, b ShardSpan) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start))
	})
	c.r.ShardSpans = spans
	keys := map[string]bool{}
	for i, s := range spans {
		keys[s.Key] = true
		for j := i + 1; j < len(spans) && spans[j].Key == s.Key && spans[j].Start < s.End; j++ {
			b := spans[j]
			c.r.ShardOverlaps++
			c.r.fail("shard %s: overlap of %v: %s term %d [%s, %s] (%s) and %s term %d [%s, %s] (%s) held it at once", s.Key,
				time.Duration(min(s.End, b.End)-b.Start), s.Proc, s.Token, c.at(s.Start), c.at(s.End), s.Ended, b.Proc, b.Token, c.at(b.Start), c.at(b.End), b.Ended)
		}
		if i > 0 && spans[i-1].Key == s.Key {
			prev := spans[i-1]
			if s.Token <= prev.Token {
				c.r.fail("shard %s: token %d of %s does not exceed token %d of the term before it, %s's", s.Key, s.Token, s.Proc, prev.Token, prev.Proc)
			}
			if HostOf(prev.Proc) != HostOf(s.Proc) {
				c.r.ShardMoves++
			}
		}
	}
	c.r.ShardKeys = len(keys)
}

// shardSummary says what the shard group did, for the report's line.
func (r *Report) shardSummary() string {
	return fmt.Sprintf("%d shard terms over %d shards, %d moves to another host, %d shard overlaps", len(r.ShardSpans), r.ShardKeys, r.ShardMoves, r.ShardOverlaps)
}
