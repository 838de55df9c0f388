package faults

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// keptRun writes b's history to a run directory, as Run leaves one.
func keptRun(t *testing.T, b *hist, cfg Config) string {
	t.Helper()
	dir := t.TempDir()
	cfg.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "candidates"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeRunConfig(cfg); err != nil {
		t.Fatal(err)
	}
	write := func(name string, recs []any) {
		j, err := CreateJournal(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := j.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var evs, writes, cands []any
	for _, e := range b.h.Events {
		evs = append(evs, e)
	}
	for _, w := range b.h.Writes {
		writes = append(writes, w)
	}
	for _, c := range b.h.Candidates {
		cands = append(cands, c)
	}
	write("harness.jsonl", evs)
	write("fence.jsonl", writes)
	write("candidates/all.jsonl", cands)
	return dir
}

func healthyRun() *hist {
	return newHist().proc("h1.1", 0).proc("h2.1", 0).proc("h3.1", 0).
		ev(HarnessEvent{Ev: HvFaultBegin, Kind: string(StandDown), Target: "h1.1"}, 2900).
		ev(HarnessEvent{Ev: HvFaultEnd, Kind: string(StandDown), Target: "h1.1"}, 2901).
		term("h1.1.w0", 5, 10, 3000).
		write("h1.1.w0", 5, 1, 100, 101, Accepted).
		write("h1.1.w0", 5, 2, 2990, 6200, Rejected).
		term("h2.1.w1", 9, 6000, 8000).
		write("h2.1.w1", 9, 1, 6100, 6101, Accepted).
		ev(HarnessEvent{Ev: HvNote, Detail: "something odd"}, 7000).
		stop(8500)
}

func TestReloadChecksAKeptRun(t *testing.T) {
	dir := keptRun(t, healthyRun(), Config{Mode: Single, TTL: 3 * time.Second, Hosts: 3, Workers: 2, Short: true})
	res, err := Reload(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Mode != Single || res.Config.TTL != 3*time.Second || res.Config.Workers != 2 {
		t.Fatalf("config %+v", res.Config)
	}
	if !res.Report.OK() || len(res.Report.Spans) != 2 || res.Report.Faults[StandDown] != 1 || res.Report.StaleRejected != 1 {
		t.Fatalf("report %+v", res.Report)
	}
	if len(res.Notes) != 1 || res.Notes[0] != "something odd" {
		t.Fatalf("notes %q", res.Notes)
	}
}

var laneLabel = regexp.MustCompile(`^h\d+\.w\d+ \(host-\d+\)$`)

func TestSummaryAndTimeline(t *testing.T) {
	dir := keptRun(t, healthyRun(), Config{Mode: Single, TTL: 3 * time.Second, Hosts: 3, Workers: 2, Short: true})
	res, err := Reload(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	WriteSummary(&sum, []*Result{res})
	for _, want := range []string{"| stand-down | 1 |", "| overlaps | 0 |", "| accepted writes | 2 |", "**PASS**", "note: something odd"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}

	var svg bytes.Buffer
	if err := WriteTimeline(&svg, []*Result{res}); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	lanes := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("timeline is not well-formed XML: %v", err)
		}
		if cd, ok := tok.(xml.CharData); ok && laneLabel.MatchString(string(cd)) {
			lanes++
		}
	}
	if lanes != 6 {
		t.Fatalf("%d candidate lanes, want 3 hosts x 2 workers", lanes)
	}
}
