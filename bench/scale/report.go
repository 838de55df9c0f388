package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// printReport prints the tables of every scenario that ran.
func printReport(w io.Writer, s settings, results []*result, took time.Duration) {
	fmt.Fprintf(w, "\nConclave at fleet scale: `conclave broker run` (nats-server %s) as provisioned, loopback, %d CPUs;\n", server.VERSION, runtime.NumCPU())
	shape := fmt.Sprintf("%d candidate processes each campaigning in every election", s.procs)
	if s.shape == shapeMany {
		shape = fmt.Sprintf("%d candidate processes each campaigning in %d of the elections (one connection each)", s.procs, s.keys)
	}
	ttl := s.ttl.String()
	if s.choria && s.choriaTTL != s.ttl {
		ttl = fmt.Sprintf("%v (Choria's candidates %v)", s.ttl, s.choriaTTL)
	}
	fmt.Fprintf(w, "%s; %s names (e.g. %s, %s, %s); TTL %s; steady state over %v after %v; run took %v.\n",
		shape, s.names, keyName(s.names, 0), keyName(s.names, 1), keyName(s.names, 2), ttl, s.window, s.settle, took.Round(time.Second))
	fmt.Fprintf(w, "Each library's candidates run on a broker of their own, one after the other. The observer is this program: one watch over the whole bucket (one consumer, counted below).\n")
	fmt.Fprintf(w, "\"All led after\": Conclave from telling the processes to campaign (elections already built) to the last first leader's write; Choria from starting its processes to the last first OnWon (its splay, then 0.75×TTL + 200 ms after its write).\n\n")

	printSideBySide(w, s, results)

	fmt.Fprintln(w, "Election and steady state:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| library | elections | brokers | all led after | p50 first leader | consumers | broker CPU (cores) | broker RSS (MB) | msgs in/s | msgs out/s | candidate CPU (cores, each) | candidate RSS (MB, each) | leader changes in window | load average at start, end |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		all := dur(r.allLed)
		if r.led < r.elections {
			all = fmt.Sprintf("**%d of %d led**", r.led, r.elections)
		}
		st := r.steady
		if st == nil {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | – | – | – | – | – | – | – | – | %s; %s |\n", r.label(), num(r.elections), r.nodes, all, dur(r.p50Led), r.loadStart, r.loadEnd)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %.3f | %s | %s | %s | %s | %s | %d | %s; %s |\n",
			r.label(), num(r.elections), r.nodes, all, dur(r.p50Led), consumers(r), st.brokerCores, floats(st.brokerRSS, "%.0f"),
			num(int(st.inPerSec+0.5)), num(int(st.outPerSec+0.5)), procFloats(st.procCores, "%.3f"), procFloats(st.procRSS, "%.0f"), st.changes, r.loadStart, r.loadEnd)
	}

	fmt.Fprintln(w, "\nCost per election (flat across sizes means cost follows elections):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| library | elections | brokers | broker cores per 1,000 elections | msgs in/s per election | msgs out/s per election | consumers per election | candidate cores per 1,000 elections (each, mean) | candidate MB per 1,000 of its elections (each, mean, above its RSS before any election) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		st := r.steady
		if st == nil {
			continue
		}
		n := float64(r.elections)
		mb := "–" // Choria's processes do not say their memory before any election
		if mean(st.procBase) > 0 {
			mb = fmt.Sprintf("%.1f", (mean(st.procRSS)-mean(st.procBase))/float64(r.perProc)*1000)
		}
		cpe := "–"
		if st.consumers >= 0 {
			cpe = fmt.Sprintf("%.2f", float64(st.consumers)/n)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.4f | %.3f | %.3f | %s | %.4f | %s |\n", r.label(), num(r.elections), r.nodes,
			st.brokerCores/n*1000, st.inPerSec/n, st.outPerSec/n, cpe, mean(st.procCores)/n*1000, mb)
	}

	printMemory(w, results)
	printDeliveries(w, results)
	printAnnouncementCost(w, s, results)

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
		fmt.Fprintln(w, "in the candidate process. The kill lands up to a renew interval after a renewal, so a key expires up to that interval before a TTL after it;")
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
		fmt.Fprintln(w, "\nAn election is written again when its leader renews (every renew interval) or a new leader wins after the kill;")
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
			fmt.Fprintf(w, "- %s, %s elections, %d broker(s): %s\n", r.label(), num(r.elections), r.nodes, f)
		}
	}
	if !failed {
		fmt.Fprintln(w, "No failures: every election had a leader by each deadline and at the end, and no takeover came early.")
	}
}

// printSideBySide compares each Conclave result with the Choria one of the
// same size measured in the same run.
func printSideBySide(w io.Writer, s settings, results []*result) {
	if !slices.ContainsFunc(results, func(r *result) bool { return r.lib == libChoria }) {
		return // -choria=false
	}
	var rows []string
	for i, r := range results {
		if r.lib != libConclave || r.nodes != 1 || !r.announce {
			continue
		}
		var c *result
		for _, o := range results[i+1:] {
			if o.lib == libChoria && o.elections == r.elections {
				c = o
				break
			}
		}
		line := fmt.Sprintf("| %s × %s | %s | %s | %s | %s | %s", num(r.elections), candidatesPer(r), r.names, r.shapeDesc(),
			allLed(r), cores(r), consumers(r))
		if c == nil {
			line += " | – | – | – | – | – |"
		} else {
			line += fmt.Sprintf(" | %s | %s | %s | %s | %s |", allLed(c), cores(c), consumers(c), ratio(r, c, func(x *result) float64 { return x.allLed.Seconds() }),
				ratio(r, c, func(x *result) float64 {
					if x.steady == nil {
						return 0
					}
					return x.steady.brokerCores
				}))
		}
		rows = append(rows, line)
	}
	if len(rows) == 0 {
		return
	}
	if s.choriaTTL == s.ttl {
		fmt.Fprintln(w, "Side by side (same run, same broker settings, each library on a broker of its own):")
	} else {
		fmt.Fprintf(w, "Side by side (same run, each library on a broker of its own, the same settings but the TTL: Conclave's %v, Choria's %v).\n", s.ttl, s.choriaTTL)
		fmt.Fprintf(w, "Worst-case crash failover is about one TTL for Conclave (%v) and about two for Choria (%v):\n", s.ttl, 2*s.choriaTTL)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| elections × candidates | names | processes | Conclave: all led after | broker cores | consumers | Choria: all led after | broker cores | consumers | all led Conclave/Choria | broker cores Conclave/Choria |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, l := range rows {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "\nConsumers are the stream's at the end of the window, the observer's one included.")
	fmt.Fprintln(w)
}

// printDeliveries prints, for Conclave, what each candidate process's
// connection received on the bucket's subjects against the writes to its
// own keys.
func printDeliveries(w io.Writer, results []*result) {
	header := false
	for _, r := range results {
		st := r.steady
		if st == nil || len(st.deliveries) == 0 {
			continue
		}
		if !header {
			header = true
			fmt.Fprintln(w, "\nDeliveries per Conclave candidate process over the window (target ≤ 2× the writes to its own keys):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| elections | processes × keys | names | writes to its own keys (mean) | bucket messages it received (mean) | of its own keys (mean) | all messages it received (mean) | received / own writes: p50 | worst | processes over 2× |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		}
		ratios := deliveryRatios(st)
		over := 0
		for _, x := range ratios {
			if x > 2 {
				over++
			}
		}
		fmt.Fprintf(w, "| %s | %d × %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %d of %d |\n", num(r.elections), r.procs, num(r.perProc), r.names,
			mean(st.ownWrites), mean(st.deliveries), mean(st.ownDeliv), mean(st.inMsgs), pctF(ratios, 50), pctF(ratios, 100), over, len(ratios))
	}
	if header {
		fmt.Fprintln(w, "\nBucket messages are the MSG/HMSG frames on $KV.<bucket>.<key> subjects its connection read (watch deliveries, counted by a dialer")
		fmt.Fprintln(w, "wrapping the connection); own writes are the writes to its keys as the observer's watch saw them; all messages include replies and heartbeats.")
	}
	var profiles []string
	for _, r := range results {
		if r.steady != nil {
			profiles = append(profiles, r.steady.profiles...)
		}
	}
	if len(profiles) > 0 {
		fmt.Fprintln(w, "\nBroker CPU profiles over the windows (go tool pprof -top FILE; the top 25 lines are in FILE.top.txt, the top 40 by cumulative time in FILE.cum.txt):")
		fmt.Fprintln(w)
		for _, p := range profiles {
			fmt.Fprintf(w, "- %s\n", p)
		}
	}
}

// shapeDesc says how the candidates were spread over processes.
func (r *result) shapeDesc() string {
	if r.shape == shapeMany {
		return fmt.Sprintf("%d × %d keys", r.procs, r.perProc)
	}
	if r.copies > 1 {
		return fmt.Sprintf("%d × all × %d copies", r.procs, r.copies)
	}
	return fmt.Sprintf("%d × all", r.procs)
}

// candidatesPer is the candidates per election, e.g. "3".
func candidatesPer(r *result) string {
	c := float64(r.procs*r.perProc*max(r.copies, 1)) / float64(r.elections)
	if c == float64(int(c)) {
		return fmt.Sprint(int(c))
	}
	return fmt.Sprintf("%.1f", c)
}

func allLed(r *result) string {
	if r.led < r.elections || r.allLed <= 0 {
		return fmt.Sprintf("**%d of %d led**", r.led, r.elections)
	}
	return dur(r.allLed)
}

func cores(r *result) string {
	if r.steady == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f", r.steady.brokerCores)
}

func consumers(r *result) string {
	if r.steady == nil || r.steady.consumers < 0 {
		return "–"
	}
	return num(r.steady.consumers)
}

// ratio is f(a)/f(b), formatted, or "–".
func ratio(a, b *result, f func(*result) float64) string {
	x, y := f(a), f(b)
	if x <= 0 || y <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x/y)
}

// procFloats is floats for a few processes, and min / mean / max for many.
func procFloats(vs []float64, format string) string {
	if len(vs) <= 4 {
		return floats(vs, format)
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return "min " + fmt.Sprintf(format, lo) + ", mean " + fmt.Sprintf(format, mean(vs)) + ", max " + fmt.Sprintf(format, hi)
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

// printAnnouncementCost compares, for each size run with -announce both,
// the window without announcements of who is standing with the one with
// them: what the announcements cost the broker, against the election's
// own cost.
func printAnnouncementCost(w io.Writer, s settings, results []*result) {
	header := false
	for i, on := range results {
		if on.lib != libConclave || !on.announce || on.steady == nil || i == 0 {
			continue
		}
		off := results[i-1]
		if off.lib != libConclave || off.announce || off.elections != on.elections || off.nodes != on.nodes || off.steady == nil {
			continue
		}
		if !header {
			header = true
			fmt.Fprintln(w, "\nCandidate announcements of who is standing: the same size without them (no announcements, answers or subscriptions), then with them; target: the announcements cost at most 10% of the election's own broker CPU:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| elections × candidates | broker CPU off → on (cores) | on/off − 1 | msgs in/s off → on | msgs out/s off → on | KB in/s off → on | KB out/s off → on | broker RSS off → on (MB) | leader changes in window off, on | load average at start, end: off; on |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		}
		a, b := off.steady, on.steady
		fmt.Fprintf(w, "| %s × %s | %.3f → %.3f | %+.1f%% | %s → %s | %s → %s | %.1f → %.1f | %.1f → %.1f | %s → %s | %d, %d | %s, %s; %s, %s |\n",
			num(on.elections), candidatesPer(on), a.brokerCores, b.brokerCores, (b.brokerCores/a.brokerCores-1)*100,
			num(int(a.inPerSec+0.5)), num(int(b.inPerSec+0.5)), num(int(a.outPerSec+0.5)), num(int(b.outPerSec+0.5)),
			a.inBytes/1000, b.inBytes/1000, a.outBytes/1000, b.outBytes/1000,
			floats(a.brokerRSS, "%.0f"), floats(b.brokerRSS, "%.0f"), a.changes, b.changes, off.loadStart, off.loadEnd, on.loadStart, on.loadEnd)
	}
	if header {
		every := standing.AnnouncementInterval(s.ttl)
		fmt.Fprintf(w, "\nEach candidate announces itself once per %v (two TTLs, between 2 s and 2 min; a process's candidates together): candidates/%v messages in a second,\n", every, every.Round(time.Second))
		fmt.Fprintln(w, "each delivered to its election's leader. A new leader also asks who stands once, within half its minimum term (a TTL at the")
		fmt.Fprintln(w, "default minimum term of two TTLs): a window that begins sooner after the start (-settle) counts those questions and answers too.")
		fmt.Fprintln(w, "The two windows come from two fleets on two brokers, one after the other: compare them knowing this machine's noise")
		fmt.Fprintln(w, "(the load averages say how busy it was).")
	}
}

// memPer is one scenario's memory at rest per candidate, over all its
// candidate processes: RSS, live heap and goroutine stacks in KB, heap
// objects and goroutines, each summed over the processes and divided by
// their candidates.
type memPer struct {
	candidates                 int
	rssKB, heapKB, stackKB     float64
	objects, goroutines, rssMB float64 // rssMB: mean per process
}

// memoryPer sums r's processes' memory at rest over their candidates; ok
// is false when it was not measured.
func memoryPer(r *result) (memPer, bool) {
	st := r.steady
	if st == nil || len(st.mem) == 0 || len(st.mem) != len(st.procRSS) {
		return memPer{}, false
	}
	var m memPer
	var heap, stack, objects, gor float64
	for i, x := range st.mem {
		if x == nil || x.Candidates == 0 {
			return memPer{}, false
		}
		m.candidates += x.Candidates
		m.rssKB += st.procRSS[i] * 1024
		heap += float64(x.HeapBytes) / 1024
		stack += float64(x.StackBytes) / 1024
		objects += float64(x.HeapObjects)
		gor += float64(x.Goroutines)
	}
	c := float64(m.candidates)
	m.rssMB = mean(st.procRSS)
	m.rssKB, m.heapKB, m.stackKB, m.objects, m.goroutines = m.rssKB/c, heap/c, stack/c, objects/c, gor/c
	return m, true
}

// printMemory prints each scenario's memory per candidate at rest, and
// Conclave's against Choria's of the same size in the same run.
func printMemory(w io.Writer, results []*result) {
	header := false
	for i, r := range results {
		m, ok := memoryPer(r)
		if !ok {
			continue
		}
		if !header {
			header = true
			fmt.Fprintln(w, "\nMemory per candidate at rest, after the window (RSS from /proc; heap, stacks, objects and goroutines from each process after a GC), and Conclave/Choria of the same size:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| library | elections × candidates | processes | candidates per process | RSS per process (MB, mean) | RSS per candidate (KB) | live heap per candidate (KB) | heap objects per candidate | goroutine stacks per candidate (KB) | goroutines per candidate | RSS per candidate, Conclave/Choria | heap, Conclave/Choria | goroutines, Conclave/Choria |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		}
		cr := "– | – | –"
		if r.lib == libConclave {
			for _, o := range results[i+1:] {
				if o.lib != libChoria || o.elections != r.elections {
					continue
				}
				if c, ok := memoryPer(o); ok {
					cr = fmt.Sprintf("%.2f× | %.2f× | %.2f×", m.rssKB/c.rssKB, m.heapKB/c.heapKB, m.goroutines/c.goroutines)
				}
				break
			}
		}
		fmt.Fprintf(w, "| %s | %s × %s | %s | %s | %.0f | %.1f | %.1f | %.0f | %.1f | %.3f | %s |\n", r.label(), num(r.elections), candidatesPer(r), r.shapeDesc(),
			num(m.candidates/len(r.steady.mem)), m.rssMB, m.rssKB, m.heapKB, m.objects, m.stackKB, m.goroutines, cr)
	}
	if header {
		fmt.Fprintln(w, "\nRSS per candidate is the processes' RSS, whole (the runtime, the connection and the Go collector's headroom included), over their candidates.")
	}
}
