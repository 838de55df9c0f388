package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func startTestFence(t *testing.T) (*Fence, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.jsonl")
	f, err := StartFence(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func fenceWrite(t *testing.T, client *http.Client, f *Fence, cand string, token, seq uint64) string {
	t.Helper()
	resp, err := client.Get(fmt.Sprintf("%s/write?cand=%s&token=%d&seq=%d&checked=%d", f.URL(), cand, token, seq, Mono()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

func TestFenceAcceptsOnlyTokensAtLeastTheHighest(t *testing.T) {
	f, path := startTestFence(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	steps := []struct {
		cand         string
		token, seq   uint64
		want         string
		wantRecorded bool
	}{
		{"a", 5, 1, Accepted, true},
		{"a", 5, 2, Accepted, true}, // same term again
		{"b", 7, 1, Accepted, true},
		{"a", 5, 3, Rejected, true},  // a stale leader
		{"a", 5, 1, Accepted, false}, // a retry gets its first verdict
		{"c", 9, 1, Accepted, true},
	}
	for _, s := range steps {
		if got := fenceWrite(t, client, f, s.cand, s.token, s.seq); got != s.want {
			t.Fatalf("write %s#%d token %d: %s, want %s", s.cand, s.seq, s.token, got, s.want)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadJournal[WriteRecord](path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || recs[3].Verdict != Rejected || recs[3].Highest != 7 {
		t.Fatalf("journal %+v", recs)
	}
}

func TestFenceRejectsMalformedWrites(t *testing.T) {
	f, _ := startTestFence(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(f.URL() + "/write?cand=a&token=x&seq=1&checked=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if len(f.Writes()) != 0 {
		t.Fatal("a malformed write was recorded")
	}
}

func TestFenceAwaitAccepted(t *testing.T) {
	f, _ := startTestFence(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	since := Mono()
	done := make(chan WriteRecord, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w, _ := f.AwaitAccepted(ctx, since, func(w WriteRecord) bool { return w.Token > 3 })
		done <- w
	}()
	fenceWrite(t, client, f, "a", 3, 1)
	fenceWrite(t, client, f, "b", 4, 1)
	select {
	case w := <-done:
		if w.Cand != "b" {
			t.Fatalf("AwaitAccepted returned %+v, want b's write", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitAccepted did not return")
	}
}
