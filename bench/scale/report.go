package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// printReport prints the tables of every scenario that ran.
func printReport(w io.Writer, s settings, results []*result, took time.Duration) {
	fmt.Fprintf(w, "\nConclave at fleet scale: `conclave broker run` (nats-server %s) as provisioned, loopback, %d CPUs;\n", server.VERSION, runtime.NumCPU())
	fmt.Fprintf(w, "%d candidate processes each campaigning in every election; TTL %v; steady state over %v after %v; run took %v.\n",
		s.procs, s.ttl, s.window, s.settle, took.Round(time.Second))
	fmt.Fprintf(w, "The observer is this program: one watch over the whole bucket (one consumer, counted below).\n\n")

	fmt.Fprintln(w, "Election and steady state:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| elections | brokers | all led after | p50 first leader | consumers | broker CPU (cores) | broker RSS (MB) | msgs in/s | msgs out/s | candidate CPU (cores, each) | candidate RSS (MB, each) | leader changes in window |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		all := dur(r.allLed)
		if r.led < r.elections {
			all = fmt.Sprintf("**%d of %d led**", r.led, r.elections)
		}
		st := r.steady
		if st == nil {
			fmt.Fprintf(w, "| %s | %d | %s | %s | – | – | – | – | – | – | – | – |\n", num(r.elections), r.nodes, all, dur(r.p50Led))
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.3f | %s | %s | %s | %s | %s | %d |\n",
			num(r.elections), r.nodes, all, dur(r.p50Led), num(st.consumers), st.brokerCores, floats(st.brokerRSS, "%.0f"),
			num(int(st.inPerSec+0.5)), num(int(st.outPerSec+0.5)), floats(st.procCores, "%.3f"), floats(st.procRSS, "%.0f"), st.changes)
	}

	fmt.Fprintln(w, "\nCost per election (flat across sizes means cost follows elections):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| elections | brokers | broker cores per 1,000 elections | msgs in/s per election | msgs out/s per election | consumers per election | candidate cores per 1,000 elections (each, mean) | candidate MB per 1,000 elections (each, mean, above its RSS before any election) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		st := r.steady
		if st == nil {
			continue
		}
		n := float64(r.elections)
		fmt.Fprintf(w, "| %s | %d | %.4f | %.3f | %.3f | %.2f | %.4f | %.1f |\n", num(r.elections), r.nodes,
			st.brokerCores/n*1000, st.inPerSec/n, st.outPerSec/n, float64(st.consumers)/n, mean(st.procCores)/n*1000, (mean(st.procRSS)-mean(st.procBase))/n*1000)
	}

	if hasKill(results) {
		fmt.Fprintf(w, "\nSIGKILL of the candidate process leading the most elections (target: every one re-led within TTL + 1 s = %v):\n\n", s.ttl+time.Second)
		fmt.Fprintln(w, "| elections | killed | it led | all re-led after | p50 | p99 | worst | within TTL + 1 s | OnWon p50 | OnWon worst | past expiry p50 | past expiry worst | leader changes | still without leader |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range results {
			k := r.kill
			if k == nil {
				continue
			}
			worst := last(k.took)
			all := dur(worst)
			if k.unresolved > 0 {
				all = "**not all**"
			}
			within := countWithin(k.took, s.ttl+time.Second)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s of %s | %s | %s | %s | %s | %d | %d |\n",
				num(r.elections), k.victim, num(k.itLed), all, dur(pct(k.took, 50)), dur(pct(k.took, 99)), dur(worst),
				num(within), num(k.itLed), dur(pct(k.onWon, 50)), dur(last(k.onWon)), sdur(pct(k.late, 50)), sdur(last(k.late)), k.changes, k.unresolved)
		}
		fmt.Fprintln(w, "\nTimes run from the kill to the new leader's write as the broker stamped it (seen on the watch), and to its OnWon")
		fmt.Fprintln(w, "in the candidate process. The kill lands up to TTL/3 after a renewal, so a key expires 2/3 TTL to TTL after it;")
		fmt.Fprintln(w, "\"past expiry\" is the new leader's write less (the killed leader's last write + TTL): expiry lateness plus takeover.")
	}

	if hasNode(results) {
		fmt.Fprintln(w, "\nSIGKILL of the election stream's leader node (3-node cluster, R3):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| elections | killed node | new stream leader | stream leader after | every election written again after | p50 | leader changes | OnLost in candidates | possible overlaps | without leader at the end |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range results {
			nr := r.node
			if nr == nil {
				continue
			}
			all := dur(last(nr.took))
			if nr.unresolved > 0 {
				all = fmt.Sprintf("**%d not**", nr.unresolved)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %d | %d | %d |\n", num(r.elections), nr.node, orDash(nr.newLeader),
				dur(nr.streamLeader), all, dur(pct(nr.took, 50)), nr.changes, nr.losses, len(r.overlaps), len(r.leaderless))
		}
		fmt.Fprintln(w, "\nAn election is written again when its leader renews (every TTL/3) or a new leader wins after the kill;")
		fmt.Fprintln(w, "a leader change or an OnLost means a leader lost its term to the outage.")
	}

	fmt.Fprintln(w)
	failed := false
	for _, r := range results {
		for _, f := range r.failures {
			if !failed {
				fmt.Fprintln(w, "FAILURES:")
				failed = true
			}
			fmt.Fprintf(w, "- %s elections, %d broker(s): %s\n", num(r.elections), r.nodes, f)
		}
	}
	if !failed {
		fmt.Fprintln(w, "No failures: every election had a leader by each deadline and at the end, and no takeover came early.")
	}
}

func hasKill(rs []*result) bool {
	for _, r := range rs {
		if r.kill != nil {
			return true
		}
	}
	return false
}

func hasNode(rs []*result) bool {
	for _, r := range rs {
		if r.node != nil {
			return true
		}
	}
	return false
}

// dur formats a duration for the tables: "–" for none.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// sdur formats a duration that may be negative, in milliseconds.
func sdur(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// num formats a count with thousands separators.
func num(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// floats formats values with format, separated by " / ".
func floats(vs []float64, format string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, " / ")
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var t float64
	for _, v := range vs {
		t += v
	}
	return t / float64(len(vs))
}

// last returns the last element of sorted ds, 0 if empty.
func last(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}

// countWithin counts the durations at or under limit.
func countWithin(ds []time.Duration, limit time.Duration) int {
	n := 0
	for _, d := range ds {
		if d <= limit {
			n++
		}
	}
	return n
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
