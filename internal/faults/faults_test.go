package faults

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFaultsShort is the harness's CI mode: it builds the conclave command
// and the candidate program, then injects every fault kind once against a
// single broker and once against a three-node cluster, and fails on anything
// the checker finds (the shard group's beside the elections included), and on named hand-overs and priority moves that did
// not land where nothing else interfered. It takes about four minutes;
// -short skips it.
//
//	go test ./internal/faults -run TestFaultsShort -v
func TestFaultsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and candidates as processes for about four minutes")
	}
	began := time.Now()
	dir, err := os.MkdirTemp("", "conclave-faults-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("records kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	bin, err := Build(t.Context(), filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built the binaries in %v", time.Since(began).Round(time.Millisecond))

	var results []*Result
	for _, mode := range []Mode{Single, Cluster} {
		runDir := filepath.Join(dir, string(mode))
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			t.Fatal(err)
		}
		res, err := Run(t.Context(), Config{Mode: mode, Short: true, Dir: runDir, Bin: bin, Progress: &logWriter{t: t}})
		if err != nil {
			t.Fatalf("%s run: %v", mode, err)
		}
		results = append(results, res)
		for _, k := range Kinds(mode) {
			if res.Report.Faults[k] < 1 {
				t.Errorf("%s run injected no %s fault; notes: %q", mode, k, res.Notes)
			}
		}
		if res.Report.Elections < 3 {
			t.Errorf("%s run: leadership moved only %d times: the faults did not bite", mode, res.Report.Elections)
		}
		if res.Report.PausedRejected < 1 {
			t.Errorf("%s run: no paused leader's stale write was rejected", mode)
		}
		if got, want := res.Report.ShardKeys, res.Config.Shards; got != want || res.Report.ShardMoves < 1 {
			t.Errorf("%s run: the shard group held %d of its %d shards and moved %d: it did not run beside the elections", mode, got, want, res.Report.ShardMoves)
		}
		checkHandOvers(t, mode, res.Report)
		for _, v := range res.Report.Violations {
			t.Errorf("%s: %s", mode, v)
		}
	}
	var summary bytes.Buffer
	WriteSummary(&summary, results)
	t.Logf("all done in %v\n%s", time.Since(began).Round(time.Second), summary.String())
}

// checkHandOvers fails a short run whose named hand-overs did not land on
// the named host with nothing else under way, whose hand-over to a host cut
// off did not fall back, or whose priority-move fault did not bring the
// promoted host to lead.
func checkHandOvers(t *testing.T, mode Mode, r *Report) {
	t.Helper()
	for _, ho := range r.HandOvers {
		if !ho.Landed && ho.Interfered == "" {
			t.Errorf("%s run: %s", mode, describeHandOver(r, ho))
		}
	}
	if s := r.HandOverStats(HandOver); s.Landed < 1 {
		t.Errorf("%s run: no named hand-over landed: %+v", mode, s)
	}
	if s := r.HandOverStats(HandOverCut); s.N > 0 {
		t.Errorf("%s run: a hand-over to a host cut off ended the leader's term, where it must be refused first: %+v", mode, s)
	}
	if s := r.HandOverStats(PriorityMove); s.Landed < 1 {
		t.Errorf("%s run: no priority move landed on a higher priority: %+v", mode, s)
	}
	if n := r.Faults[PriorityMove]; r.PromotedLed < n {
		t.Errorf("%s run: the promoted host led after %d of %d priority-move faults", mode, r.PromotedLed, n)
	}
}

// logWriter sends progress lines to t.Log.
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
