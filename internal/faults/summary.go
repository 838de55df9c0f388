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
	for _, res := range results {
		var extra []string
		if res.Report.WorstGap.Counted > 0 {
			g := res.Report.WorstGap
			extra = append(extra, fmt.Sprintf("worst gap: %v counted of %v, after %s, until %s",
				g.Counted.Round(time.Millisecond), time.Duration(g.To-g.From).Round(time.Millisecond), orNone(g.After), g.Next))
		}
		extra = append(extra, fmt.Sprintf("seed %d, records in %s", res.Config.Seed, res.Config.Dir))
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
