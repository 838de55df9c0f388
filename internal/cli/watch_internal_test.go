package cli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader, that
// tells of each write.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{changed: make(chan struct{})} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.b.Write(p)
}

func (b *lockedBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String(), b.changed
}

func (b *lockedBuffer) String() string { s, _ := b.snapshot(); return s }

// TestWatchStartedJustBeforeTheFirstCandidate: `watch app` that reads no
// election, and then finds one that began in between (the first
// candidate's write), does not print the contradictory "no election "app"
// … (elections: app)", and reports the term as elected with its token,
// not as a current term whose token is unknown; a renewal since is still
// reported as current, token unknown.
func TestWatchStartedJustBeforeTheFirstCandidate(t *testing.T) {
	// Not parallel: it sets the package variable testHookWatchRead.
	url, s := startSession(t)
	kv := s.kv

	for _, tc := range []struct {
		name    string
		renew   bool // the leader renews before the watch follows
		want    string
		wantNot string
	}{
		{"the term's first write", false, "  elected   app1: n1 leads, token ", "token unknown"},
		{"a renewal since", true, "  current   app2: n1 leads, revision ", "elected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "app1"
			if tc.renew {
				key = "app2"
			}
			var rev uint64
			testHookWatchRead = func() {
				r, err := kv.Create(t.Context(), key, []byte("n1"))
				if err != nil {
					t.Errorf("creating %s: %v", key, err)
					return
				}
				rev = r
				if tc.renew {
					if rev, err = kv.Update(t.Context(), key, []byte("n1"), r); err != nil {
						t.Errorf("renewing %s: %v", key, err)
					}
				}
			}
			t.Cleanup(func() { testHookWatchRead = nil })
			ctx, cancel := context.WithCancel(t.Context())
			stdout, stderr := newLockedBuffer(), newLockedBuffer()
			done := make(chan int, 1)
			go func() {
				done <- Main(ctx, []string{"--server", url, "election", "watch", key}, strings.NewReader(""), stdout, stderr)
			}()
			deadline := time.NewTimer(30 * time.Second)
			defer deadline.Stop()
			for {
				out, changed := stdout.snapshot()
				if strings.Contains(out, "n1 leads") {
					break
				}
				select {
				case <-changed:
					continue
				case <-done:
					t.Fatalf("watch ended:\n%s\nstderr:\n%s", out, stderr)
				case <-deadline.C:
					cancel()
					<-done
					t.Fatalf("watch reported no leader within 30s:\n%s\nstderr:\n%s", out, stderr)
				}
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("watch exited %d", code)
			}
			out := stdout.String()
			if !strings.Contains(out, tc.want) || strings.Contains(out, tc.wantNot) {
				t.Errorf("watch printed\n%s\nwant %q and not %q", out, tc.want, tc.wantNot)
			}
			if !tc.renew && !strings.Contains(out, "token "+strconv.FormatUint(rev, 10)) {
				t.Errorf("watch printed\n%s\nwant the term's token %d", out, rev)
			}
			if strings.Contains(stderr.String(), "no election") {
				t.Errorf("watch said there is no election although it had begun:\n%s", stderr.String())
			}
		})
	}
}
