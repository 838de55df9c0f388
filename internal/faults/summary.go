package faults

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteSummary prints, as Markdown tables with one column per run, the
// faults injected by kind and what the checker measured, then every
// violation and harness note.
func WriteSummary(w io.Writer, results []*Result) {
	head := "| fault |"
	rule := "|---|"
	for _, res := range results {
		head += " " + string(res.Config.Mode) + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, k := range AllKinds() {
		row := "| " + string(k) + " |"
		used := false
		for _, res := range results {
			n := res.Report.Faults[k]
			used = used || n > 0
			row += fmt.Sprintf(" %d |", n)
		}
		if used {
			fmt.Fprintln(w, row)
		}
	}
	total := "| **total** |"
	for _, res := range results {
		n := 0
		for _, c := range res.Report.Faults {
			n += c
		}
		total += fmt.Sprintf(" **%d** |", n)
	}
	fmt.Fprintln(w, total)
	fmt.Fprintln(w)

	rows := []struct {
		name string
		val  func(*Result) string
	}{
		{"brokers", func(r *Result) string {
			if r.Config.Mode == Cluster {
				return "3 nodes, R3"
			}
			return "1 node"
		}},
		{"candidates (processes x workers)", func(r *Result) string {
			return fmt.Sprintf("%d x %d", r.Config.Hosts, r.Config.Workers)
		}},
		{"TTL", func(r *Result) string { return r.Config.TTL.String() }},
		{"source tree", func(r *Result) string { return orNone(r.Config.Bin.Tree) }},
		{"observed (run wall time)", func(r *Result) string {
			return fmt.Sprintf("%v (%v)", r.Report.Observed.Round(time.Second), r.Elapsed.Round(time.Second))
		}},
		{"elections (leadership moved)", func(r *Result) string { return fmt.Sprint(r.Report.Elections) }},
		{"terms", func(r *Result) string { return fmt.Sprint(len(r.Report.Spans)) }},
		{"overlaps", func(r *Result) string { return fmt.Sprint(r.Report.Overlaps) }},
		{"overlaps settled by fencing", func(r *Result) string { return fmt.Sprint(r.Report.FencedOverlaps) }},
		{"shard group beside the elections: terms over shards (moves to another host)", func(r *Result) string {
			return fmt.Sprintf("%d over %d (%d)", len(r.Report.ShardSpans), r.Report.ShardKeys, r.Report.ShardMoves)
		}},
		{"shard overlaps (one holder per shard key)", func(r *Result) string { return fmt.Sprint(r.Report.ShardOverlaps) }},
		{"worst leaderless gap (allowed)", func(r *Result) string {
			allowed := r.Report.WorstGap.Allowed
			if allowed == 0 {
				allowed = r.Report.Allowed
			}
			return fmt.Sprintf("%v (%v)", r.Report.WorstGap.Counted.Round(time.Millisecond), allowed)
		}},
		{"time no quorum was reachable (not counted)", func(r *Result) string {
			return r.Report.Unavailable.Round(time.Millisecond).String()
		}},
		{"accepted writes", func(r *Result) string { return fmt.Sprint(r.Report.Accepted) }},
		{"rejected stale writes (of them paused mid-write)", func(r *Result) string {
			return fmt.Sprintf("%d (%d of %d)", r.Report.StaleRejected, r.Report.PausedRejected, r.Report.PausedWrites)
		}},
		{"late writes accepted before a newer leader wrote", func(r *Result) string { return fmt.Sprint(r.Report.LateAccepted) }},
		{"campaign attempts (most by one candidate in a second)", func(r *Result) string {
			return fmt.Sprintf("%d (%d)", r.Report.Campaigns, r.Report.PeakCampaigns)
		}},
		{fmt.Sprintf("campaign storms: candidate-seconds with more than %d attempts", StormRate), func(r *Result) string {
			return fmt.Sprint(r.Report.StormSeconds)
		}},
		{"violations", func(r *Result) string { return fmt.Sprint(len(r.Report.Violations)) }},
		{"verdict", func(r *Result) string {
			if r.Report.OK() {
				return "**PASS**"
			}
			return "**FAIL**"
		}},
	}
	head = "| |"
	rule = "|---|"
	for _, res := range results {
		head += " " + string(res.Config.Mode) + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, row := range rows {
		line := "| " + row.name + " |"
		for _, res := range results {
			line += " " + row.val(res) + " |"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	writeMoves(w, results)
	fmt.Fprintln(w)
	writeGaps(w, results)
	fmt.Fprintln(w)
	writeHandOvers(w, results)
	for _, res := range results {
		var extra []string
		if res.Report.WorstGap.Counted > 0 {
			g := res.Report.WorstGap
			extra = append(extra, fmt.Sprintf("worst gap: %v counted of %v, after %s, until %s",
				g.Counted.Round(time.Millisecond), time.Duration(g.To-g.From).Round(time.Millisecond), orNone(g.After), g.Next))
		}
		extra = append(extra, fmt.Sprintf("seed %d, records in %s", res.Config.Seed, res.Config.Dir))
		for _, ho := range res.Report.HandOvers {
			if ho.Kind != PriorityMove || !ho.Landed {
				extra = append(extra, describeHandOver(res.Report, ho))
			}
		}
		for _, v := range res.Report.Violations {
			extra = append(extra, "VIOLATION: "+v)
		}
		for _, n := range res.Notes {
			extra = append(extra, "note: "+n)
		}
		fmt.Fprintf(w, "\n%s:\n  %s\n", res.Config.Mode, strings.Join(extra, "\n  "))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// writeMoves prints, per fault kind and run, how soon after the fault began
// another candidate led: "n: median / max", and how often nobody else did.
func writeMoves(w io.Writer, results []*Result) {
	head, rule := "| leadership moved after the fault began: faults, median / max |", "|---|"
	for _, res := range results {
		head += " " + string(res.Config.Mode) + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, k := range AllKinds() {
		line, used := "| "+string(k)+" |", false
		for _, res := range results {
			moves, stayed := slices.Clone(res.Report.Moves[k]), res.Report.Stayed[k]
			if res.Report.Faults[k] == 0 {
				line += " |"
				continue
			}
			used = true
			cell := "—"
			if len(moves) > 0 {
				slices.Sort(moves)
				cell = fmt.Sprintf("%d: %v / %v", len(moves), moves[len(moves)/2].Round(10*time.Millisecond), moves[len(moves)-1].Round(10*time.Millisecond))
			}
			if stayed > 0 {
				cell += fmt.Sprintf(" (same leader after %d)", stayed)
			}
			line += " " + cell + " |"
		}
		if used {
			fmt.Fprintln(w, line)
		}
	}
}

// writeGaps prints, per fault kind and run, the worst leaderless gap
// counted during or within a TTL after one of its faults, and the bound it
// was held to.
func writeGaps(w io.Writer, results []*Result) {
	head, rule := "| worst leaderless gap near the fault: counted (allowed) |", "|---|"
	for _, res := range results {
		head += " " + string(res.Config.Mode) + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, k := range AllKinds() {
		line, used := "| "+string(k)+" |", false
		for _, res := range results {
			if res.Report.Faults[k] == 0 {
				line += " |"
				continue
			}
			used = true
			cell := "—"
			if g, ok := res.Report.GapByKind[k]; ok {
				cell = fmt.Sprintf("%v (%v)", g.Counted.Round(time.Millisecond), g.Allowed)
			}
			line += " " + cell + " |"
		}
		if used {
			fmt.Fprintln(w, line)
		}
	}
}

// writeHandOvers prints, per run, the named hand-overs and the priority
// moves: how many, how many landed where they were meant to, how many fell
// back (while another fault interfered, or with none), and how long the
// landed ones took.
func writeHandOvers(w io.Writer, results []*Result) {
	head, rule := "| hand-overs |", "|---|"
	for _, res := range results {
		head += " " + string(res.Config.Mode) + " |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	rows := []struct {
		name string
		val  func(*Report) string
	}{
		{"named (hand-over): landed on the named host / asked", func(r *Report) string { return landed(r.HandOverStats(HandOver)) }},
		{"named to a host cut off (hand-over-cut): landed / asked", func(r *Report) string { return landed(r.HandOverStats(HandOverCut)) }},
		{"named, landed: request → named host leads, p50 / p99 / max", func(r *Report) string { return quantiles(r.HandOverStats(HandOver, HandOverCut).Took) }},
		{"named, landed: release → named host leads, p50 / p99 / max", func(r *Report) string { return quantiles(r.HandOverStats(HandOver, HandOverCut).Gap) }},
		{"priority moves: to a higher priority / moves", func(r *Report) string { return landed(r.HandOverStats(PriorityMove)) }},
		{"priority moves: release → next leader, p50 / p99 / max", func(r *Report) string { return quantiles(r.HandOverStats(PriorityMove).Gap) }},
		{"priority-move faults after which the promoted host led", func(r *Report) string {
			return fmt.Sprintf("%d of %d", r.PromotedLed, r.Faults[PriorityMove])
		}},
	}
	for _, row := range rows {
		line := "| " + row.name + " |"
		for _, res := range results {
			line += " " + row.val(res.Report) + " |"
		}
		fmt.Fprintln(w, line)
	}
}

// landed formats "landed / n", with the fall-backs.
func landed(s HandOverStats) string {
	out := fmt.Sprintf("%d / %d", s.Landed, s.N)
	if s.Interfered > 0 {
		out += fmt.Sprintf(", %d fell back while interfered with", s.Interfered)
	}
	if s.Missed > 0 {
		out += fmt.Sprintf(", **%d fell back with nothing else under way**", s.Missed)
	}
	return out
}

func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "—"
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("%v / %v / %v", r(Quantile(d, 0.5)), r(Quantile(d, 0.99)), r(d[len(d)-1]))
}

// describeHandOver says in a line where a hand-over went.
func describeHandOver(r *Report, ho HandOverResult) string {
	at := func(t int64) string { return fmt.Sprintf("+%.3fs", float64(t-r.start)/1e9) }
	what := fmt.Sprintf("%s at %s: %s → %s", ho.Kind, at(ho.From.End), ho.From.Identity, orNone(ho.To))
	if ho.To == "" {
		what = fmt.Sprintf("%s at %s: %s → a higher priority", ho.Kind, at(ho.From.End), ho.From.Identity)
	}
	switch {
	case ho.Next.Cand == "":
		return what + ": no leader before the run stopped"
	case ho.Landed:
		return fmt.Sprintf("%s: landed on %s in %v (%v after the release)", what, ho.Next.Cand, ho.Took.Round(100*time.Microsecond), ho.Gap.Round(100*time.Microsecond))
	case ho.Interfered != "":
		return fmt.Sprintf("%s: fell back to %s after %v; interfered: %s", what, ho.Next.Cand, ho.Gap.Round(time.Millisecond), ho.Interfered)
	}
	return fmt.Sprintf("%s: fell back to %s after %v with nothing else under way", what, ho.Next.Cand, ho.Gap.Round(time.Millisecond))
}
