package streams

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestLeadersLearnATTLChangeFromTheAdvisoryAndShareReads: the leaders of
// many elections in one process do not each read the bucket's settings once
// per TTL: the process sends a few reads a TTL for all of them. When an
// operator lowers the TTL, every leader adopts it within a moment, from the
// stream's update advisory, long before its routine read (due every half
// TTL) could tell it.
func TestLeadersLearnATTLChangeFromTheAdvisoryAndShareReads(t *testing.T) {
	const (
		n   = 40
		ttl = 10 * time.Second
	)
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	spy := connect(t, ts.url())
	var infos atomic.Int64
	sub, err := spy.Subscribe("$JS.API.STREAM.INFO.KV_"+bucketName, func(*nats.Msg) { infos.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	adopted := map[string]time.Time{}
	log := funcLogger(func(s string) {
		if key, ok := strings.CutPrefix(s, "WARN election "); ok && strings.Contains(key, ": bucket TTL changed from 10s to 9s") {
			mu.Lock()
			adopted[strings.SplitN(key, ":", 2)[0]] = time.Now()
			mu.Unlock()
		}
	})
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		runElection(t, mustElection(t, "a", fmt.Sprintf("svc%d", i), kv, append(recs[i].options("a"), WithLogger(log))...))
	}
	for i := range n {
		recs[i].waitFor(t, 10*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	}
	// Leading for a while: without sharing, each leader would read the
	// settings every half TTL.
	infos.Store(0)
	time.Sleep(ttl) // a span of time to count requests in, not a wait for an event
	if got := infos.Load(); got > 12 {
		t.Fatalf("%d leaders sent %d reads of the bucket's settings in one TTL, want a few for the process (at most 12)", n, got)
	} else {
		t.Logf("%d leaders sent %d reads of the bucket's settings in one TTL", n, got)
	}

	changed := time.Now()
	changeTTL(t, kv, nc, 9*time.Second)
	eventually(t, 2*time.Second, "every leader to adopt the lowered TTL", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(adopted) == n
	})
	mu.Lock()
	var slowest time.Duration
	for _, at := range adopted {
		slowest = max(slowest, at.Sub(changed))
	}
	mu.Unlock()
	t.Logf("every leader adopted the lowered TTL within %v", slowest.Round(time.Millisecond))
	for i := range n {
		checkHistory(t, recs[i].snapshot())
	}
}
