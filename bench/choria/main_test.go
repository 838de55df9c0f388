package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the benchmark's child processes
// (brokers and candidates for the CPU scenario), as the command does.
func TestMain(m *testing.M) {
	if ok, code := childMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// tinyConfig is the quick run cut to the bone: every scenario runs, with
// one or two samples, windows of one TTL and a short mixed election.
func tinyConfig() config {
	c := quickConfig()
	c.firstSizes, c.firsts, c.choriaFirsts = []int{1, 3}, 2, 2
	c.handoffs, c.handoffLanes, c.handoffRounds = 2, 1, 1
	c.failLanes, c.failRounds = 1, 1
	c.standbys, c.window = []int{2}, c.ttl
	c.cpuElections, c.cpuWindow = 3, c.ttl
	c.mixed, c.mixedPerLib = 30*time.Second, 2
	return c
}

func TestQuickScenarios(t *testing.T) {
	started := time.Now()
	res, err := runBench(context.Background(), tinyConfig(), t.Logf)
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	t.Logf("all scenarios took %v", time.Since(started).Round(time.Second))
	md := res.markdown()
	t.Log("\n" + md)

	for _, want := range []string{
		"| # | scenario | measure | Conclave | Choria | Conclave/Choria |",
		"| 1 | time to first leader, 1 candidate | p50",
		"| 2 | graceful handoff",
		"| 3 | crash failover",
		"| 4 | steady state, 1 leader + 2 standbys | key writes",
		"| 5 | 3 elections",
		"| 6 | elections one broker keeps",
		"| 7 | mixed election",
		"## Scenario 7",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "Inf") {
		t.Errorf("the report has a NaN or Inf")
	}
	for _, r := range res.rows() {
		if r.num == "5" || r.num == "6" || r.num == "7" {
			continue // three elections for one TTL cost less than /proc's 10ms resolution
		}
		if r.conclave <= 0 {
			t.Errorf("row %s %q %q: Conclave measured %v", r.num, r.what, r.measure, r.conclave)
		}
		if r.choria <= 0 {
			t.Errorf("row %s %q %q: Choria measured %v", r.num, r.what, r.measure, r.choria)
		}
	}

	m := res.mixed
	if len(m.overlaps) != 0 {
		t.Errorf("the mixed election had %d overlapping terms: %v", len(m.overlaps), m.overlaps)
	}
	if m.totalTerms < 2 {
		t.Errorf("the mixed election had %d terms, want at least 2", m.totalTerms)
	}
	for a, n := range m.anomalies {
		if strings.HasPrefix(a, "Conclave") {
			t.Errorf("Conclave broke its callback contract in the mixed election: %s ×%d", a, n)
		}
	}

	if err := wellFormedXML(res.svg()); err != nil {
		t.Errorf("the chart is not well-formed SVG: %v", err)
	}
}

func wellFormedXML(s string) error {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestTermsFindOverlaps checks the mixed election's checker on made-up
// events: it must see an overlap when there is one, end a silently stopped
// Choria term at its stop, and flag an OnLost without OnWon.
func TestTermsFindOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	a := &candidate{lib: conclaveLib, id: "a"}
	b := &candidate{lib: choriaLib, id: "b"}
	c := &candidate{lib: choriaLib, id: "c"}
	tests := []struct {
		name      string
		events    []event
		overlaps  int
		terms     int
		anomalies int
	}{
		{"clean handover", []event{{a, evWon, at(0)}, {a, evLost, at(1)}, {b, evWon, at(2)}, {b, evStopAsked, at(3)}, {b, evStopped, at(3.1)}}, 0, 2, 0},
		{"overlap", []event{{a, evWon, at(0)}, {b, evWon, at(1)}, {a, evLost, at(2)}, {b, evLost, at(3)}}, 1, 2, 0},
		{"silent stop then win", []event{{b, evWon, at(0)}, {b, evStopped, at(1)}, {a, evWon, at(0.5)}, {a, evLost, at(2)}}, 1, 2, 0},
		{"lost without won", []event{{c, evLost, at(0)}, {a, evWon, at(1)}, {a, evLost, at(2)}}, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res mixedResult
			analyzeMixed(tt.events, &res)
			if len(res.overlaps) != tt.overlaps || res.totalTerms != tt.terms || len(res.anomalies) != tt.anomalies {
				t.Errorf("overlaps %d, terms %d, anomalies %v; want %d, %d, %d", len(res.overlaps), res.totalTerms, res.anomalies, tt.overlaps, tt.terms, tt.anomalies)
			}
		})
	}
}

func TestProcCPU(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	var buf bytes.Buffer
	for time.Now().Before(deadline) {
		buf.Reset()
		for i := range 1000 {
			buf.WriteByte(byte(i))
		}
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time did not grow over 200ms of work: %v then %v", before, after)
	}
	if _, _, err := machineCPU(); err != nil {
		t.Errorf("machineCPU: %v", err)
	}
}
