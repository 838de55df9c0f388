package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// unit says how a row's values print.
type unit int

const (
	unitDuration unit = iota // seconds
	unitTTL                  // multiples of the TTL
	unitRate                 // per election per minute
	unitCPU                  // CPU-seconds per election-minute
	unitCount
)

// row is one line of the results table.
type row struct {
	num, what, measure string
	conclave, choria   float64
	unit               unit
	higherIsBetter     bool
	noRatio            bool
	chart              string // label in the chart; empty leaves the row out
}

func (r row) ratio() float64 {
	if r.noRatio || r.choria == 0 {
		return math.NaN()
	}
	return r.conclave / r.choria
}

func (r row) format(v float64) string {
	switch r.unit {
	case unitDuration:
		return fmtSeconds(v)
	case unitTTL:
		return fmt.Sprintf("%.2f×TTL", v)
	case unitRate:
		return fmt.Sprintf("%.1f", v)
	case unitCPU:
		return fmt.Sprintf("%.2e", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtSeconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2fs", s)
	case s >= 0.01:
		return fmt.Sprintf("%.1fms", s*1e3)
	default:
		return fmt.Sprintf("%.2fms", s*1e3)
	}
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "—"
	}
	return fmt.Sprintf("%.3g", r)
}

// rows builds the table from the results.
func (r *results) rows() []row {
	cfg := r.cfg
	var rows []row
	durRows := func(num, what string, c, ch []time.Duration, chart string) {
		for _, p := range []int{50, 99} {
			lbl := ""
			if p == 50 {
				lbl = chart
			}
			rows = append(rows, row{num: num, what: what, measure: fmt.Sprintf("p%d of %d / %d", p, len(c), len(ch)),
				conclave: pct(c, p).Seconds(), choria: pct(ch, p).Seconds(), unit: unitDuration, chart: lbl})
		}
	}
	for _, n := range cfg.firstSizes {
		what := fmt.Sprintf("time to first leader, %d candidates", n)
		if n == 1 {
			what = "time to first leader, 1 candidate"
		}
		durRows("1", what, r.first[conclaveLib][n], r.first[choriaLib][n], fmt.Sprintf("1 first leader, %d cand. (p50)", n))
	}
	durRows("2", "graceful handoff (leader stops → next OnWon)", r.handoff[conclaveLib], r.handoff[choriaLib], "2 graceful handoff (p50)")
	fc, fch := r.failover[conclaveLib], r.failover[choriaLib]
	durRows("3", "crash failover (leader's connection closed → next OnWon)", fc, fch, "3 crash failover (p50)")
	for _, p := range []int{50, 99} {
		rows = append(rows, row{num: "3", what: "crash failover as a multiple of TTL", measure: fmt.Sprintf("p%d", p),
			conclave: pct(fc, p).Seconds() / cfg.ttl.Seconds(), choria: pct(fch, p).Seconds() / cfg.ttl.Seconds(), unit: unitTTL})
	}
	for i := range r.steady[conclaveLib] {
		c, ch := r.steady[conclaveLib][i], r.steady[choriaLib][i]
		what := fmt.Sprintf("steady state, 1 leader + %d standbys", c.standbys)
		if c.standbys == 1 {
			what = "steady state, 1 leader + 1 standby"
		}
		for _, m := range []struct {
			name, short string
			c, ch       float64
		}{
			{"key writes per election-minute", "writes", c.writes, ch.writes},
			{"broker msgs in per election-minute", "msgs in", c.in, ch.in},
			{"broker msgs out per election-minute", "msgs out", c.out, ch.out},
		} {
			rows = append(rows, row{num: "4", what: what, measure: m.name, conclave: m.c, choria: m.ch, unit: unitRate,
				chart: fmt.Sprintf("4 %s, %d standby%s", m.short, c.standbys, plural(c.standbys))})
		}
	}
	cpu := r.cpu
	what := fmt.Sprintf("%d elections × (1 leader + %d standbys) per library", cpu.elections, cpu.perElection-1)
	rows = append(rows,
		row{num: "5", what: what, measure: "broker CPU-s per election-minute (less an idle broker)",
			conclave: cpu.netBrokerPerElectionMinute(conclaveLib), choria: cpu.netBrokerPerElectionMinute(choriaLib), unit: unitCPU, chart: "5 broker CPU per election"},
		row{num: "5", what: what, measure: "candidates' CPU-s per election-minute (all 3)",
			conclave: cpu.clientsPerElectionMinute(conclaveLib), choria: cpu.clientsPerElectionMinute(choriaLib), unit: unitCPU, chart: "5 candidates' CPU per election"},
		row{num: "5", what: what, measure: "broker msgs in+out per election-minute",
			conclave: cpu.msgsPerElectionMinute(conclaveLib), choria: cpu.msgsPerElectionMinute(choriaLib), unit: unitRate},
		row{num: "6", what: "elections one broker keeps on 10% of one core", measure: "linear extrapolation of 5",
			conclave: cpu.electionsPerTenthCore(conclaveLib), choria: cpu.electionsPerTenthCore(choriaLib), unit: unitCount, higherIsBetter: true, chart: "6 elections per 10% core"},
	)
	m := r.mixed
	rows = append(rows, row{num: "7", what: fmt.Sprintf("mixed election (%d + %d candidates, %v)", m.perLib, m.perLib, m.duration),
		measure:  fmt.Sprintf("terms won; overlapping leaders: %d", len(m.overlaps)),
		conclave: float64(m.terms[conclaveLib]), choria: float64(m.terms[choriaLib]), unit: unitCount, noRatio: true})
	return rows
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (r cpuResult) msgsPerElectionMinute(l lib) float64 {
	m := r.lib[l].msgs
	return float64(m.In+m.Out) / (float64(r.elections) * r.window.Minutes())
}

// markdown renders the whole report.
func (r *results) markdown() string {
	var b strings.Builder
	cfg := r.cfg
	mode := "full"
	if cfg.quick {
		mode = "quick"
	}
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Conclave vs Choria leader election, side by side\n\n")
	p("Run %s, %s mode, took %v. %d CPUs (shared with other work), %s; load average %s at the start, %s at the end.\n\n",
		r.started.Format("2006-01-02 15:04 MST"), mode, r.took.Round(time.Second), numCPU(), r.versions["go"], r.load[0], r.load[1])
	p("- Broker: nats-server %s, in this process (scenario 5: child processes), loopback, JetStream file store with SyncAlways. ", r.versions["github.com/nats-io/nats-server/v2"])
	p("Bucket `%s` for both libraries: history 1, TTL %v, file storage, R1, max value 1 KiB, no limit markers.\n", bucketName, cfg.ttl)
	p("- Conclave: `providers/election/streams` at %s, on `jetstream` (nats.go %s), default options: renew every TTL/3, step down at a local deadline (last write's send time + TTL − TTL/10), release on stop. In the mixed election: `streams.WithGrace(%v)`.\n", r.versions["conclave"], r.versions["github.com/nats-io/nats.go"], cfg.grace)
	p("- Choria: `github.com/choria-io/go-choria/providers/election/streams` %s on the legacy `nats.KeyValue`, default options: a random start-up pause of 0–5s, then a campaign every 0.75×TTL (%v); OnWon one campaign after winning the key plus 200ms; stopped by cancelling its context (its `Stop` deadlocks), which neither releases the key nor calls OnLost.\n",
		r.versions["github.com/choria-io/go-choria"], time.Duration(float64(cfg.ttl)*0.75))
	p("- Every candidate has its own NATS connection. Latency runs: Conclave's first-leader and handoff trials one after another; Choria's trials and both libraries' crash failovers side by side on keys of their own, all in the same minutes on the same broker. Ratios below 1 mean Conclave is lower (faster, fewer messages, less CPU), except in row 6.\n\n")

	p("| # | scenario | measure | Conclave | Choria | Conclave/Choria |\n|---|---|---|---|---|---|\n")
	for _, row := range r.rows() {
		p("| %s | %s | %s | %s | %s | %s |\n", row.num, row.what, row.measure, row.format(row.conclave), row.format(row.choria), fmtRatio(row.ratio()))
	}
	p("\n")
	r.cpuDetails(&b)
	r.mixedDetails(&b)
	return b.String()
}

func (r *results) cpuDetails(b *strings.Builder) {
	c := r.cpu
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Scenarios 5 and 6: CPU\n\n")
	p("Three brokers ran as child processes with the settings above: one per library and one idle with the same bucket. Each library's %d elections ran in a child process of their own against their own broker, both at the same time, and CPU time (user + system, /proc/PID/stat) was read over the same %v window. During the window the whole machine was busy %.2f of %d cores (everyone's work, other people's included).\n\n",
		c.elections, c.window, c.machineBusy, c.cores)
	p("| over the window | Conclave | Choria | idle broker |\n|---|---|---|---|\n")
	cl, ch := c.lib[conclaveLib], c.lib[choriaLib]
	p("| broker CPU | %v | %v | %v |\n", cl.broker, ch.broker, c.idle)
	p("| candidates' CPU (%d candidates) | %v | %v | |\n", c.elections*c.perElection, cl.clients, ch.clients)
	p("| broker messages in / out | %d / %d | %d / %d | |\n", cl.msgs.In, cl.msgs.Out, ch.msgs.In, ch.msgs.Out)
	p("| candidates leading at the end / wins / losses | %d / %d / %d | %d / %d / %d | |\n\n",
		cl.status.Leaders, cl.status.Wins, cl.status.Losses, ch.status.Leaders, ch.status.Wins, ch.status.Losses)
	if len(c.partRatios) > 1 {
		var rs []string
		for _, x := range c.partRatios {
			rs = append(rs, fmtRatio(x))
		}
		p("The window was sampled in %d parts of %v; the broker CPU ratio Conclave/Choria in each: %s.\n\n", len(c.partRatios), c.window/time.Duration(len(c.partRatios)), strings.Join(rs, ", "))
	}
	p("Row 6 divides a tenth of a core (6 CPU-seconds per minute) by row 5's broker cost: a linear extrapolation from %d elections, not a measurement at that scale.\n\n", c.elections)
}

func (r *results) mixedDetails(b *strings.Builder) {
	m := r.mixed
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Scenario 7: one election, both libraries\n\n")
	p("%d Conclave candidates (with `streams.WithGrace(%v)`, one TTL: Choria leaders have no local deadline, so a Conclave candidate that takes an expired key waits one TTL, longer than a Choria campaign interval, before OnWon) and %d Choria candidates campaigned for one key for %v. Whoever led was stopped or crashed (connection closed) after leading for 0.3–1×TTL, and replaced by a new candidate of its library. Conclave standbys take a free key long before a Choria standby's next campaign, so each round also picked which library should lead next, in a repeating pattern that gives every kind of handover after both a stop and a crash: before a Choria turn the Conclave standbys were stopped, and both libraries were topped up again once the next leader had won. A term runs from OnWon to OnLost, or, for a Choria candidate stopped by its context (it never calls OnLost then), to the return of its Start; crashed candidates kept running for 2×TTL, so their own belief counts.\n\n",
		m.perLib, m.grace, m.perLib, m.duration)
	p("| | |\n|---|---|\n")
	p("| candidates in all | Conclave %d, Choria %d |\n", m.joined[conclaveLib], m.joined[choriaLib])
	p("| leaders stopped or crashed | %s |\n", describeCounts(m.actions))
	p("| terms | %d (Conclave %d, Choria %d) |\n", m.totalTerms, m.terms[conclaveLib], m.terms[choriaLib])
	keys := make([]string, 0, len(m.handovers))
	for k := range m.handovers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		gs := m.handovers[k]
		p("| handovers %s | %d, no leader for p50 %s, max %s |\n", k, len(gs), fmtSeconds(pct(gs, 50).Seconds()), fmtSeconds(slices.Max(gs).Seconds()))
	}
	gap := "n/a"
	if m.minGap >= 0 {
		gap = fmtSeconds(m.minGap.Seconds())
	}
	p("| shortest gap between two terms | %s |\n", gap)
	p("| **overlapping terms** | **%d** |\n", len(m.overlaps))
	p("| rounds with no leader within %v | %d |\n", 4*r.cfg.ttl+10*time.Second, m.noLeader)
	p("| callback sequences outside OnWon/OnLost alternation | %s |\n\n", describeCounts(m.anomalies))
	for _, o := range m.overlaps {
		p("- overlap: %s\n", o)
	}
	if len(m.overlaps) > 0 {
		p("\n")
	}
}
