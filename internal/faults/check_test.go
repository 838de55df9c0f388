package faults

import (
	"strings"
	"testing"
	"time"
)

// hist builds a History by hand, with times in milliseconds since the run
// started.
type hist struct {
	h  History
	t0 int64
}

func newHist() *hist {
	b := &hist{t0: 1_000_000_000_000}
	b.ev(HarnessEvent{Ev: HvRunStart}, 0)
	return b
}

func (b *hist) at(ms int) int64 { return b.t0 + int64(ms)*int64(time.Millisecond) }

func (b *hist) ev(e HarnessEvent, ms int) *hist {
	e.At = b.at(ms)
	b.h.Events = append(b.h.Events, e)
	return b
}

func (b *hist) rec(r CandidateRecord, ms int) *hist {
	r.At = b.at(ms)
	if r.Proc == "" {
		r.Proc = ProcOf(r.Cand)
	}
	b.h.Candidates = append(b.h.Candidates, r)
	return b
}

// proc starts process proc (h1.1) with identity host-N.
func (b *hist) proc(proc string, ms int) *hist {
	b.rec(CandidateRecord{Ev: EvStart, Proc: proc, Identity: "host-" + strings.TrimPrefix(HostOf(proc), "h")}, ms)
	return b.ev(HarnessEvent{Ev: HvProcStart, Target: proc, Host: HostOf(proc)}, ms)
}

// won records OnWon and OnLeading of a term starting at from, valid until vu.
func (b *hist) won(cand string, token uint64, from, vu int) *hist {
	b.rec(CandidateRecord{Ev: EvWon, Cand: cand}, from)
	return b.rec(CandidateRecord{Ev: EvLeading, Cand: cand, Token: token, Started: b.at(from), ValidUntil: b.at(vu)}, from)
}

// lost records OnLost at ms with the term's final ValidUntil vu.
func (b *hist) lost(cand string, token uint64, ms, vu int, cause string) *hist {
	return b.rec(CandidateRecord{Ev: EvLost, Cand: cand, Token: token, Cause: cause, ValidUntil: b.at(vu)}, ms)
}

// term records a whole term from from to to.
func (b *hist) term(cand string, token uint64, from, to int) *hist {
	return b.won(cand, token, from, to).lost(cand, token, to, to, "released")
}

func (b *hist) write(cand string, token, seq uint64, checked, at int, verdict string) *hist {
	b.h.Writes = append(b.h.Writes, WriteRecord{At: b.at(at), Cand: cand, Token: token, Seq: seq, Checked: b.at(checked), Verdict: verdict})
	return b
}

func (b *hist) stop(ms int) *hist { return b.ev(HarnessEvent{Ev: HvRunStop}, ms) }

var testParams = Params{TTL: 3 * time.Second, Slack: time.Second} // allows 4s

func TestCheckPassesAHealthyHistory(t *testing.T) {
	r := Check(&newHist().proc("h1.1", 0).proc("h2.1", 0).
		term("h1.1.w0", 5, 10, 3000).
		write("h1.1.w0", 5, 1, 100, 101, Accepted).
		write("h1.1.w0", 5, 2, 2990, 3200, Rejected). // arrived after h2.1.w1 wrote
		term("h2.1.w1", 9, 3100, 8000).
		write("h2.1.w1", 9, 1, 3150, 3151, Accepted).
		ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(KillLeader)}, 2000).
		stop(8500).h, testParams)
	if !r.OK() {
		t.Fatalf("violations: %q", r.Violations)
	}
	if len(r.Spans) != 2 || r.Elections != 2 || r.Accepted != 2 || r.StaleRejected != 1 || r.Faults[KillLeader] != 1 {
		t.Fatalf("report %+v", r)
	}
	if r.WorstGap.Counted != 500*time.Millisecond {
		t.Fatalf("worst gap %v, want 500ms (from 8000 to the end at 8500)", r.WorstGap.Counted)
	}
}

func TestCheckFindsViolations(t *testing.T) {
	tests := []struct {
		name string
		h    *hist
		want string
	}{
		{"overlap", newHist().term("h1.1.w0", 5, 0, 3000).term("h2.1.w0", 7, 2000, 5000).stop(5000),
			"overlap of 1s"},
		{"same identity overlap", newHist().term("h1.1.w0", 5, 0, 3000).term("h1.1.w1", 7, 2999, 5000).stop(5000),
			"overlap of 1ms"},
		{"loss without win", newHist().term("h1.1.w0", 5, 0, 1000).lost("h1.1.w0", 5, 1100, 1100, "deadline").stop(1200),
			"a loss without a win"},
		{"won twice", newHist().won("h1.1.w0", 5, 0, 1000).won("h1.1.w0", 6, 500, 1500).stop(1200),
			"OnWon twice"},
		{"token shrinks", newHist().term("h1.1.w0", 9, 0, 1000).term("h2.1.w0", 5, 1100, 2000).stop(2000),
			"token 5 of h2.1.w0"},
		{"token repeats", newHist().term("h1.1.w0", 9, 0, 1000).term("h2.1.w0", 9, 1100, 2000).stop(2000),
			"token 9 of h2.1.w0"},
		{"long gap", newHist().term("h1.1.w0", 5, 0, 1000).term("h2.1.w0", 7, 6000, 7000).stop(7000),
			"no leader for 5s"},
		{"leaderless at the end", newHist().term("h1.1.w0", 5, 0, 1000).stop(6000),
			"no leader for 5s"},
		{"stale write accepted", newHist().term("h1.1.w0", 5, 0, 1000).term("h2.1.w0", 7, 1100, 3000).
			write("h1.1.w0", 5, 1, 900, 1500, Accepted).stop(3000),
			"stale write h1.1.w0#1"},
		{"accepted write checked outside its term", newHist().term("h1.1.w0", 5, 0, 1000).
			write("h1.1.w0", 5, 1, 1200, 1201, Accepted).stop(1000),
			"outside its term"},
		{"valid leader rejected", newHist().term("h1.1.w0", 5, 0, 1000).
			write("h1.1.w0", 5, 1, 500, 501, Rejected).stop(1000),
			"rejected while its term was valid"},
		{"accepted write of no term", newHist().term("h1.1.w0", 5, 0, 1000).
			write("h2.1.w0", 5, 1, 500, 501, Accepted).stop(1000),
			"has no term with that token"},
		{"no OnLost before a clean exit", newHist().proc("h1.1", 0).won("h1.1.w0", 5, 0, 3000).
			rec(CandidateRecord{Ev: EvExit, Proc: "h1.1"}, 1000).ev(HarnessEvent{Ev: HvProcExit, Target: "h1.1", Host: "h1"}, 1001).stop(1000),
			"has no OnLost although its process exited"},
		{"candidate and resource disagree", newHist().term("h1.1.w0", 5, 0, 1000).
			write("h1.1.w0", 5, 1, 500, 501, Accepted).
			rec(CandidateRecord{Ev: EvWrite, Cand: "h1.1.w0", Token: 5, Seq: 2, Verdict: Accepted}, 600).stop(1000),
			"the resource has no such write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(&tt.h.h, testParams)
			for _, v := range r.Violations {
				if strings.Contains(v, tt.want) {
					return
				}
			}
			t.Fatalf("want a violation containing %q, got %q", tt.want, r.Violations)
		})
	}
}

func TestCheckDoesNotCountTimeWithoutReachableQuorum(t *testing.T) {
	tests := []struct {
		name string
		h    *hist
	}{
		{"brokers down", newHist().
			ev(HarnessEvent{Ev: HvDown}, 1500).ev(HarnessEvent{Ev: HvUp}, 6000)},
		{"every candidate cut off, stopped or dead", newHist().proc("h1.1", 0).proc("h2.1", 0).proc("h3.1", 0).
			ev(HarnessEvent{Ev: HvLinkCut, Target: "h1", Host: "h1"}, 1500).
			ev(HarnessEvent{Ev: HvProcStop, Target: "h2.1", Host: "h2"}, 1600).
			ev(HarnessEvent{Ev: HvProcKill, Target: "h3.1", Host: "h3"}, 1500).
			ev(HarnessEvent{Ev: HvProcExit, Target: "h3.1", Host: "h3"}, 1510).
			ev(HarnessEvent{Ev: HvProcCont, Target: "h2.1", Host: "h2"}, 6100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(&tt.h.term("h1.1.w0", 5, 0, 1000).term("h2.1.w0", 7, 8000, 9000).stop(9000).h, testParams)
			if !r.OK() {
				t.Fatalf("violations: %q", r.Violations)
			}
			if r.WorstGap.Counted > 3*time.Second || r.WorstGap.Counted < 2400*time.Millisecond {
				t.Fatalf("counted gap %v, want about 7s less the unreachable time", r.WorstGap.Counted)
			}
		})
	}
}

func TestCheckCountsGapsFromTheEndOfLateDeliveryFaults(t *testing.T) {
	// A flapping link delivered a write late: no leader from 1000 to 7000.
	// Only the time after the fault healed (at 4000) counts: 3s, allowed.
	build := func(kind Kind, healed int) *History {
		return &newHist().proc("h1.1", 0).proc("h2.1", 0).
			term("h1.1.w0", 5, 0, 1000).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(kind), Target: "h1.1"}, 500).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(kind), Target: "h1.1"}, healed).
			term("h2.1.w0", 7, 7000, 9000).stop(9000).h
	}
	for _, kind := range []Kind{FlapLink, DelayLink} {
		r := Check(build(kind, 4000), testParams)
		if !r.OK() || r.WorstGap.Counted != 3*time.Second {
			t.Fatalf("%s: violations %q, counted gap %v, want 3s counted from the heal", kind, r.Violations, r.WorstGap.Counted)
		}
	}
	// Healed early (at 1500): 5.5s count, longer than the 4s allowed.
	if r := Check(build(FlapLink, 1500), testParams); r.OK() {
		t.Fatalf("a 5.5s gap after the link healed passed (counted %v)", r.WorstGap.Counted)
	}
	// Other faults do not delay counting: a stand-down is no excuse.
	if r := Check(build(StandDown, 4000), testParams); r.OK() {
		t.Fatal("a 6s gap during a stand-down passed")
	}
}

func TestCheckEndsAKilledLeadersTermAtItsDeath(t *testing.T) {
	r := Check(&newHist().proc("h1.1", 0).won("h1.1.w0", 5, 0, 2000).
		rec(CandidateRecord{Ev: EvRenewed, Cand: "h1.1.w0", Token: 5, ValidUntil: newHist().at(5000)}, 900).
		ev(HarnessEvent{Ev: HvProcKill, Target: "h1.1", Host: "h1"}, 1000).
		ev(HarnessEvent{Ev: HvProcExit, Target: "h1.1", Host: "h1"}, 1002).
		term("h2.1.w0", 7, 4500, 6000).stop(6000).h, testParams)
	if !r.OK() {
		t.Fatalf("violations: %q", r.Violations)
	}
	if s := r.Spans[0]; s.End != newHist().at(1002) || s.Ended != "killed" {
		t.Fatalf("killed leader's span %+v, want it to end at its death", s)
	}

	// Without the kill, the renewal decides: the same history overlaps.
	r = Check(&newHist().won("h1.1.w0", 5, 0, 2000).
		rec(CandidateRecord{Ev: EvRenewed, Cand: "h1.1.w0", Token: 5, ValidUntil: newHist().at(5000)}, 900).
		lost("h1.1.w0", 5, 5000, 5000, "deadline").
		term("h2.1.w0", 7, 4500, 6000).stop(6000).h, testParams)
	if r.Overlaps != 1 {
		t.Fatalf("overlaps %d, want 1: %q", r.Overlaps, r.Violations)
	}
}

func TestCheckSettlesAStoppedProcessesOverlapByFencing(t *testing.T) {
	build := func(lateVerdict string) *History {
		return &newHist().proc("h1.1", 0).
			won("h1.1.w0", 5, 0, 6000).
			ev(HarnessEvent{Ev: HvProcStop, Target: "h1.1", Host: "h1"}, 1000).
			term("h2.1.w0", 7, 4000, 8000).
			write("h2.1.w0", 7, 1, 4001, 4002, Accepted).
			ev(HarnessEvent{Ev: HvProcCont, Target: "h1.1", Host: "h1"}, 6000).
			lost("h1.1.w0", 5, 6000, 6000, "deadline").
			write("h1.1.w0", 5, 1, 900, 6001, lateVerdict).
			stop(8000).h
	}
	r := Check(build(Rejected), testParams)
	if !r.OK() || r.FencedOverlaps != 1 || r.Overlaps != 0 {
		t.Fatalf("fenced %d, overlaps %d, violations %q", r.FencedOverlaps, r.Overlaps, r.Violations)
	}
	r = Check(build(Accepted), testParams)
	if r.Overlaps != 1 {
		t.Fatalf("an overlap whose stale write was accepted: overlaps %d, violations %q", r.Overlaps, r.Violations)
	}
}

func TestCheckCountsPausedWrites(t *testing.T) {
	r := Check(&newHist().proc("h1.1", 0).proc("h2.1", 0).
		term("h1.1.w0", 5, 0, 2700).
		rec(CandidateRecord{Ev: EvSelfStop, Cand: "h1.1.w0", Token: 5, Seq: 3}, 100).
		term("h2.1.w0", 7, 3000, 6000).
		write("h2.1.w0", 7, 1, 3001, 3002, Accepted).
		write("h1.1.w0", 5, 3, 99, 4000, Rejected).
		stop(6000).h, testParams)
	if !r.OK() || r.PausedWrites != 1 || r.PausedRejected != 1 || r.StaleRejected != 1 {
		t.Fatalf("report %+v", r)
	}
}

func TestCheckCountsCampaignStorms(t *testing.T) {
	r := Check(&newHist().term("h1.1.w0", 5, 0, 3000).
		rec(CandidateRecord{Ev: EvCampaigns, Cand: "h2.1.w0", Count: 2}, 1000).
		rec(CandidateRecord{Ev: EvCampaigns, Cand: "h2.1.w0", Count: 31}, 2000).
		rec(CandidateRecord{Ev: EvCampaigns, Cand: "h2.1.w1", Count: 29}, 2000).
		stop(3000).h, testParams)
	if !r.OK() || r.Campaigns != 62 || r.PeakCampaigns != 31 || r.StormSeconds != 2 {
		t.Fatalf("campaigns %d, peak %d, storm seconds %d, violations %q", r.Campaigns, r.PeakCampaigns, r.StormSeconds, r.Violations)
	}
}

func TestCheckBoundsGapsWithTheLargestTTLInForce(t *testing.T) {
	// The TTL is raised to 6s at 1000 and restored at 9000; the leader's term
	// ends at 2000 and the next begins at 9500: 7.5s, allowed 4s + 3s*5/4 =
	// 7.75s while 6s was in force.
	build := func(raisedAt, restoredAt, next int) *History {
		b := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 2000)
		if raisedAt >= 0 {
			b.ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(TTLRaise), Target: Bucket}, raisedAt).
				ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "6s"}, raisedAt).
				ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "3s"}, restoredAt).
				ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(TTLRaise), Target: Bucket}, restoredAt)
		}
		return &b.term("h2.1.w0", 7, next, next+1000).stop(next + 1000).h
	}
	r := Check(build(1000, 9000, 9500), testParams)
	if !r.OK() || r.WorstGap.Allowed != 7750*time.Millisecond || r.GapByKind[TTLRaise].Counted != 7500*time.Millisecond {
		t.Fatalf("violations %q, worst gap %+v, by kind %+v", r.Violations, r.WorstGap, r.GapByKind)
	}
	// Without the raise, the same gap is too long.
	if r := Check(build(-1, 0, 9500), testParams); r.OK() {
		t.Fatal("a 7.5s gap passed at TTL 3s")
	}
	// Longer than the raised bound.
	if r := Check(build(1000, 9000, 10000), testParams); r.OK() {
		t.Fatal("an 8s gap passed with 7.75s allowed")
	}
	// The raise (100 to 200) was over more than a raised TTL before the gap
	// began (at 9000): the run's TTL applies.
	r = Check(&newHist().proc("h1.1", 0).proc("h2.1", 0).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "6s"}, 100).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "3s"}, 200).
		term("h1.1.w0", 5, 300, 9000).term("h2.1.w0", 7, 14000, 15000).stop(15000).h, testParams)
	if r.OK() {
		t.Fatalf("a 5s gap passed although the raised TTL was over 2.8s before it began (allowed %v)", r.WorstGap.Allowed)
	}
	// Restored just before the gap: the last term's last renewal, and the
	// expiry its standbys predicted, may date from the raised TTL.
	r = Check(&newHist().proc("h1.1", 0).proc("h2.1", 0).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "6s"}, 100).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "3s"}, 2000).
		term("h1.1.w0", 5, 300, 2500).term("h2.1.w0", 7, 8000, 9000).stop(9000).h, testParams)
	if !r.OK() || r.WorstGap.Allowed != 7750*time.Millisecond {
		t.Fatalf("a gap beginning 0.5s after the restore: violations %q, allowed %v", r.Violations, r.WorstGap.Allowed)
	}
	// A lowered TTL never lowers the bound below the run's TTL.
	r = Check(&newHist().proc("h1.1", 0).proc("h2.1", 0).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "1.5s"}, 100).
		term("h1.1.w0", 5, 300, 2000).term("h2.1.w0", 7, 5500, 6000).stop(6000).h, testParams)
	if !r.OK() || r.WorstGap.Allowed != testParams.AllowedGap() {
		t.Fatalf("violations %q, allowed %v", r.Violations, r.WorstGap.Allowed)
	}
	// Overlaps still fail while the TTL changes.
	r = Check(&newHist().ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "1.5s"}, 100).
		term("h1.1.w0", 5, 0, 3000).term("h2.1.w0", 7, 2000, 5000).stop(5000).h, testParams)
	if r.Overlaps != 1 {
		t.Fatalf("overlaps %d, want 1", r.Overlaps)
	}
}

// restartAll records a full restart of h1 and h2 beginning at from, the
// processes exiting at exited and started again at started.
func restartAll(b *hist, kind Kind, from, exited, started, end int) *hist {
	ev := HvProcTerm
	if kind == KillAll {
		ev = HvProcKill
	}
	b.ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(kind), Target: "all"}, from)
	for _, h := range []string{"h1", "h2"} {
		b.ev(HarnessEvent{Ev: ev, Target: h + ".1", Host: h}, from).
			ev(HarnessEvent{Ev: HvProcExit, Target: h + ".1", Host: h}, exited)
	}
	b.proc("h1.2", started).proc("h2.2", started+5)
	return b.ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(kind), Target: "all"}, end)
}

func TestCheckBoundsAGracefulFullRestartByTheFirstStart(t *testing.T) {
	params := testParams
	params.RestartSlack = time.Second
	// h1.1 leads until the SIGTERM at 1000 (its release); everyone has exited
	// by 1300; the new processes start at 1500 and 1505: a leader is due by
	// 2500.
	build := func(kind Kind, next int) *History {
		b := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 1000)
		return &restartAll(b, kind, 1000, 1300, 1500, 1510).term("h2.2.w0", 7, next, next+1000).stop(next + 1000).h
	}
	r := Check(build(RestartAll, 2400), params)
	if !r.OK() || r.WorstGap.Counted != 900*time.Millisecond || r.WorstGap.Allowed != time.Second {
		t.Fatalf("violations %q, worst gap %+v", r.Violations, r.WorstGap)
	}
	r = Check(build(RestartAll, 4500), params)
	if r.OK() || !strings.Contains(r.Violations[0], "graceful full restart") {
		t.Fatalf("a leader 3s after the first process of a graceful restart started passed: %q", r.Violations)
	}
	// A purge just before the restart: the next leader waits a TTL after
	// it, whoever took the key and released it since (unmarked, as a take
	// after a removal must): the usual bound.
	purged := func(next int) *History {
		b := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 1000).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(Purge), Target: "h1.1"}, 900).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(Purge), Target: "h1.1"}, 905)
		return &restartAll(b, RestartAll, 1000, 1300, 1500, 1510).term("h2.2.w0", 7, next, next+1000).stop(next + 1000).h
	}
	if r := Check(purged(4500), params); !r.OK() {
		t.Fatalf("a graceful restart a TTL after a purge was held to the restart's bound: %q", r.Violations)
	}
	if r := Check(purged(9000), params); r.OK() {
		t.Fatal("a leader 7.5s after the first start passed after a purge")
	}
	// A fault that leaves no wait behind (a TTL raised) keeps the
	// restart's bound.
	raised := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 1000).
		ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(TTLRaise), Target: "bucket"}, 900).
		ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(TTLRaise), Target: "bucket"}, 905)
	if r := Check(&restartAll(raised, RestartAll, 1000, 1300, 1500, 1510).term("h2.2.w0", 7, 4500, 5500).stop(5500).h, params); r.OK() {
		t.Fatal("a leader 3s after the first start of a graceful restart passed after a TTL raise")
	}
	// After SIGKILL, the key expires by its TTL: the usual bound, counted
	// from the first start.
	if r := Check(build(KillAll, 4500), params); !r.OK() || r.WorstGap.Counted != 3*time.Second {
		t.Fatalf("kill-all: violations %q, worst gap %+v", r.Violations, r.WorstGap)
	}
	if r := Check(build(KillAll, 6000), params); r.OK() {
		t.Fatal("kill-all: a leader 4.5s after the first start passed with 4s allowed")
	}
	// A graceful restart with another fault under way gets that fault's
	// bound instead.
	b := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 1000).
		ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(TTLRaise), Target: Bucket}, 800).
		ev(HarnessEvent{Ev: HvTTL, Target: Bucket, Detail: "6s"}, 800)
	r = Check(&restartAll(b, RestartAll, 1000, 1300, 1500, 1510).term("h2.2.w0", 7, 4500, 5500).stop(5500).h, params)
	if !r.OK() || r.WorstGap.Allowed != 7750*time.Millisecond {
		t.Fatalf("graceful restart during a TTL raise: violations %q, worst gap %+v", r.Violations, r.WorstGap)
	}
}

// TestCheckBoundsAGracefulStopOfTheLeader: after stop-leader, the leader
// offered the key or released it, so the next leader is due within
// RestartSlack, not the TTL-long bound of a crash.
func TestCheckBoundsAGracefulStopOfTheLeader(t *testing.T) {
	params := testParams
	params.RestartSlack = time.Second
	// h1.1 leads until its SIGTERM at 1000; h2.1 leads from next.
	build := func(next int) *History {
		b := newHist().proc("h1.1", 0).proc("h2.1", 0).term("h1.1.w0", 5, 0, 1000).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(StopLeader), Target: "h1.1"}, 1000).
			ev(HarnessEvent{Ev: HvProcTerm, Target: "h1.1", Host: "h1"}, 1000).
			ev(HarnessEvent{Ev: HvProcExit, Target: "h1.1", Host: "h1"}, 1010).
			term("h2.1.w0", 7, next, next+1000).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(StopLeader), Target: "h1.1"}, next+5)
		return &b.stop(next + 1000).h
	}
	if r := Check(build(1800), params); !r.OK() || r.WorstGap.Allowed != time.Second {
		t.Fatalf("a leader 0.8s after the stop: violations %q, worst gap %+v", r.Violations, r.WorstGap)
	}
	if r := Check(build(3000), params); r.OK() || !strings.Contains(r.Violations[0], "graceful stop") {
		t.Fatalf("a leader 2s after the leader's graceful stop passed: %q", r.Violations)
	}
}

func TestCheckCombinesUncountedTimesOfOverlappingFaults(t *testing.T) {
	// A stand-down (at 2000) while the leader's link is delayed (1000 to
	// 6000) and the broker is down (7000 to 8000): the gap from 2000 to
	// 11500 counts from the heal at 6000, less the second the broker was
	// down: 4.5s, allowed 4s.
	build := func(next int) *History {
		return &newHist().proc("h1.1", 0).proc("h2.1", 0).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(Double), Target: "delay-link+stand-down"}, 1000).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(DelayLink), Target: "h1.1"}, 1000).
			term("h1.1.w0", 5, 0, 2000).
			ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(StandDown), Target: "h1.1"}, 2000).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(StandDown), Target: "h1.1"}, 2050).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(DelayLink), Target: "h1.1"}, 6000).
			ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(Double), Target: "delay-link+stand-down"}, 6000).
			ev(HarnessEvent{Ev: HvDown}, 7000).ev(HarnessEvent{Ev: HvUp}, 8000).
			term("h2.1.w0", 7, next, next+1000).stop(next + 1000).h
	}
	if r := Check(build(10500), testParams); !r.OK() || r.WorstGap.Counted != 3500*time.Millisecond ||
		r.GapByKind[StandDown].Counted != 3500*time.Millisecond || r.GapByKind[Double].Counted != 3500*time.Millisecond {
		t.Fatalf("violations %q, worst gap %+v", r.Violations, r.WorstGap)
	}
	if r := Check(build(11500), testParams); r.OK() {
		t.Fatalf("4.5s counted passed with 4s allowed (worst gap %+v)", r.WorstGap)
	}
}

func TestCheckRejectsAMalformedTTLEvent(t *testing.T) {
	r := Check(&newHist().ev(HarnessEvent{Ev: HvTTL, Detail: "fast"}, 10).term("h1.1.w0", 5, 0, 1000).stop(1000).h, testParams)
	if r.OK() {
		t.Fatal("a TTL event without a duration passed")
	}
}

// handedOver records a term of cand from from to to that ended by handing
// the election over.
func (b *hist) handedOver(cand string, token uint64, from, to int) *hist {
	return b.won(cand, token, from, to).lost(cand, token, to, to, causeHandedOver)
}

// ask records a named hand-over of kind k to identity to, begun at ms and
// answered by leader at answered.
func (b *hist) ask(k Kind, to, leader string, ms, answered int) *hist {
	b.ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(k), Target: to}, ms)
	return b.ev(HarnessEvent{Ev: HvHandOver, Target: to, Detail: leader}, answered)
}

func threeHosts() *hist { return newHist().proc("h1.1", 0).proc("h2.1", 0).proc("h3.1", 0) }

func TestCheckAccountsForHandOvers(t *testing.T) {
	tests := []struct {
		name        string
		h           *hist
		want        HandOverResult // Kind, To, Landed, Took, Gap, Overlap; Interfered as a substring
		violation   string
		stats       HandOverStats // N, Landed, Interfered, Missed of the result's kind
		promotedLed int
	}{
		{"named hand-over lands",
			threeHosts().handedOver("h1.1.w0", 5, 10, 2000).ask(HandOver, "host-2", "host-1", 1990, 2003).
				term("h2.1.w1", 7, 2002, 6000).ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(HandOver), Target: "host-2"}, 2100).stop(6000),
			HandOverResult{Kind: HandOver, To: "host-2", Landed: true, Took: 12 * time.Millisecond, Gap: 2 * time.Millisecond}, "",
			HandOverStats{N: 1, Landed: 1}, 0},
		{"named host cut off: falls back, interfered",
			threeHosts().handedOver("h1.1.w0", 5, 10, 2000).
				ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(HandOverCut), Target: "host-2"}, 1990).
				ev(HarnessEvent{Ev: HvLinkCut, Target: "h2", Host: "h2"}, 1991).
				ev(HarnessEvent{Ev: HvHandOver, Target: "host-2", Detail: "host-1"}, 2003).
				term("h3.1.w0", 7, 2760, 6000).
				ev(HarnessEvent{Ev: HvLinkHeal, Target: "h2", Host: "h2"}, 5000).
				ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(HandOverCut), Target: "host-2"}, 5000).stop(6000),
			HandOverResult{Kind: HandOverCut, To: "host-2", Took: 770 * time.Millisecond, Gap: 760 * time.Millisecond, Interfered: "link-cut h2"}, "",
			HandOverStats{N: 1, Interfered: 1}, 0},
		{"named hand-over falls back with nothing else under way",
			threeHosts().handedOver("h1.1.w0", 5, 10, 2000).ask(HandOver, "host-2", "host-1", 1990, 2003).
				term("h3.1.w0", 7, 2760, 6000).stop(6000),
			HandOverResult{Kind: HandOver, To: "host-2", Took: 770 * time.Millisecond, Gap: 760 * time.Millisecond}, "",
			HandOverStats{N: 1, Missed: 1}, 0},
		{"named hand-over just after a cluster restart: interfered",
			threeHosts().ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(RestartCluster), Target: "all nodes"}, 500).
				ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(RestartCluster), Target: "all nodes"}, 1540).
				handedOver("h1.1.w0", 5, 10, 2000).ask(HandOver, "host-2", "host-1", 1990, 2003).
				term("h3.1.w0", 7, 2760, 6000).stop(6000),
			HandOverResult{Kind: HandOver, To: "host-2", Took: 770 * time.Millisecond, Gap: 760 * time.Millisecond, Interfered: "restart-cluster ended at +1.540s, 450ms before"}, "",
			HandOverStats{N: 1, Interfered: 1}, 0},
		{"named hand-over that overlaps is flagged",
			threeHosts().handedOver("h1.1.w0", 5, 10, 2000).ask(HandOver, "host-2", "host-1", 1890, 2003).
				term("h2.1.w0", 7, 1900, 6000).stop(6000),
			HandOverResult{Kind: HandOver, To: "host-2", Landed: true, Took: 10 * time.Millisecond, Overlap: true}, "overlap of 100ms",
			HandOverStats{N: 1, Landed: 1}, 0},
		{"priority move to the promoted host",
			threeHosts().ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(PriorityMove), Target: "host-4"}, 500).
				rec(CandidateRecord{Ev: EvStart, Proc: "h4.1", Identity: "host-4", Priority: 1}, 600).
				ev(HarnessEvent{Ev: HvProcStart, Target: "h4.1", Host: "h4"}, 600).
				handedOver("h1.1.w0", 5, 10, 6010).term("h4.1.w2", 7, 6012, 9000).
				ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(PriorityMove), Target: "host-4"}, 6100).stop(9000),
			HandOverResult{Kind: PriorityMove, Landed: true, Took: 2 * time.Millisecond, Gap: 2 * time.Millisecond}, "",
			HandOverStats{N: 1, Landed: 1}, 1},
		{"a leader that answered but did not hand over",
			threeHosts().term("h1.1.w0", 5, 10, 2000).ask(HandOver, "host-2", "host-1", 1990, 2003).
				term("h2.1.w0", 7, 2002, 6000).stop(6000),
			HandOverResult{}, "host-1 answered at +2.003s that it handed over to host-2, but none of its terms ended by handing over",
			HandOverStats{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(&tt.h.h, testParams)
			switch {
			case tt.violation == "" && !r.OK():
				t.Fatalf("violations: %q", r.Violations)
			case tt.violation != "" && (len(r.Violations) != 1 || !strings.Contains(r.Violations[0], tt.violation)):
				t.Fatalf("violations %q, want one with %q", r.Violations, tt.violation)
			}
			if r.PromotedLed != tt.promotedLed {
				t.Errorf("promoted host led after %d priority-move faults, want %d", r.PromotedLed, tt.promotedLed)
			}
			if tt.want.Kind == "" {
				if len(r.HandOvers) != 0 {
					t.Fatalf("hand-overs %+v, want none", r.HandOvers)
				}
				return
			}
			if len(r.HandOvers) != 1 {
				t.Fatalf("hand-overs %+v, want one", r.HandOvers)
			}
			got := r.HandOvers[0]
			if got.Kind != tt.want.Kind || got.To != tt.want.To || got.Landed != tt.want.Landed || got.Took != tt.want.Took ||
				got.Gap != tt.want.Gap || got.Overlap != tt.want.Overlap || !strings.Contains(got.Interfered, tt.want.Interfered) ||
				(tt.want.Interfered == "") != (got.Interfered == "") {
				t.Errorf("hand-over %+v, want %+v", got, tt.want)
			}
			s := r.HandOverStats(tt.want.Kind)
			if s.N != tt.stats.N || s.Landed != tt.stats.Landed || s.Interfered != tt.stats.Interfered || s.Missed != tt.stats.Missed {
				t.Errorf("stats %+v, want %+v", s, tt.stats)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 5}, {0.99, 10}, {1, 10}} {
		if got := Quantile(d, tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of none is not 0")
	}
}

// shard records a term of shard key held by process proc from from to to,
// ended by cause.
func (b *hist) shard(proc, key string, token uint64, from, to int, cause string) *hist {
	b.rec(CandidateRecord{Ev: EvShardLeading, Proc: proc, Key: key, Token: token, Started: b.at(from), ValidUntil: b.at(from + 1000)}, from)
	b.rec(CandidateRecord{Ev: EvShardRenewed, Proc: proc, Key: key, Token: token, ValidUntil: b.at(to)}, from+10)
	return b.rec(CandidateRecord{Ev: EvShardLost, Proc: proc, Key: key, Token: token, Cause: cause, ValidUntil: b.at(to)}, to)
}

// TestCheckShards: the shard group's terms are checked per key. A shard
// handed from one process to another, and two shards held at once, pass;
// two holders of one shard at once fail, and so does a token that does
// not grow.
func TestCheckShards(t *testing.T) {
	b := newHist().proc("h1.1", 0).proc("h2.1", 0).
		term("h1.1.w0", 1, 10, 5000).
		shard("h1.1", "g.0", 2, 100, 2000, "handed over").
		shard("h2.1", "g.0", 7, 2000, 5000, "released").
		shard("h2.1", "g.1", 3, 100, 5000, "released").
		ev(HarnessEvent{Ev: HvRunStop}, 5000)
	r := Check(&b.h, Params{TTL: time.Second})
	if !r.OK() || r.ShardOverlaps != 0 || r.ShardKeys != 2 || r.ShardMoves != 1 || len(r.ShardSpans) != 3 {
		t.Fatalf("a hand-over and two shards: %d overlaps, %d keys, %d moves, %d spans, violations %q", r.ShardOverlaps, r.ShardKeys, r.ShardMoves, len(r.ShardSpans), r.Violations)
	}

	b = newHist().proc("h1.1", 0).proc("h2.1", 0).
		term("h1.1.w0", 1, 10, 5000).
		shard("h1.1", "g.0", 4, 100, 2500, "deadline").
		shard("h2.1", "g.0", 3, 2000, 5000, "released").
		ev(HarnessEvent{Ev: HvRunStop}, 5000)
	r = Check(&b.h, Params{TTL: time.Second})
	if r.ShardOverlaps != 1 {
		t.Fatalf("two holders of g.0 for 500ms: %d overlaps, violations %q", r.ShardOverlaps, r.Violations)
	}
	found := 0
	for _, v := range r.Violations {
		if strings.Contains(v, "shard g.0: overlap of 500ms") || strings.Contains(v, "shard g.0: token 3") {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("want the overlap and the token that did not grow among the violations: %q", r.Violations)
	}
}
