package streams

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestElectionsStartingTogetherShareTheBucketsOpen: elections of one
// connection that start together open the bucket once between them, and
// read its settings in a few shared requests, not one STREAM.INFO each
// (the broker's JetStream API queue refuses requests past its limit, and
// 30,000 elections starting at once waited on it for over a minute).
func TestElectionsStartingTogetherShareTheBucketsOpen(t *testing.T) {
	const n = 200
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(10*time.Second))

	monitor := connect(t, ts.url())
	var infos atomic.Int64
	sub, err := monitor.Subscribe("$JS.API.STREAM.INFO.KV_"+kv.Bucket(), func(*nats.Msg) { infos.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := monitor.Flush(); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder()
	for i := range n {
		runElection(t, mustElection(t, "a", fmt.Sprintf("start%d", i), kv, rec.options("a")...))
	}
	rec.waitFor(t, 30*time.Second, "every election to be led", func(evs []event) bool { return wins(evs, "a") == n })
	if err := monitor.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := infos.Load(); got > n/5 {
		t.Fatalf("%d elections starting together sent %d STREAM.INFO requests, want a few shared ones", n, got)
	}
	t.Logf("%d elections: %d STREAM.INFO requests", n, infos.Load())
}
