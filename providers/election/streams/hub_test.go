package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// consumers returns the number of consumers on the election stream.
func consumers(t testing.TB, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Consumers
}

func jetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestCandidatesOfAProcessShareOneConsumer: however many candidates and
// observers of one connection follow an election, the broker holds one
// consumer for them, and every one of them still sees the handovers.
func TestCandidatesOfAProcessShareOneConsumer(t *testing.T) {
	ts := newTestServer(t)
	ncA, ncB := connect(t, ts.url()), connect(t, ts.url())
	kvA := createBucket(t, ncA, bucketConfig(3*time.Second))
	kvB := openBucket(t, ncB)
	admin := jetStream(t, connect(t, ts.url()))

	rec := newRecorder()
	var stops []func()
	var elections []*Election
	for i := range 4 {
		e := mustElection(t, fmt.Sprintf("a%d", i), "shared", kvA, rec.options(fmt.Sprintf("a%d", i))...)
		elections = append(elections, e)
		stops = append(stops, runElection(t, e))
	}
	for i := range 2 {
		e := mustElection(t, fmt.Sprintf("b%d", i), "shared", kvB, rec.options(fmt.Sprintf("b%d", i))...)
		elections = append(elections, e)
		stops = append(stops, runElection(t, e))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan Leadership, 100)
	for range 2 {
		obs, err := NewObserver("shared", jsFor(kvA), OnChange(func(l Leadership) { changes <- l }))
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = obs.Run(ctx) }()
	}
	rec.waitFor(t, 5*time.Second, "a leader", func(evs []event) bool { return leader(evs) != "" })
	eventually(t, 5*time.Second, "every candidate and observer watching", func() bool {
		for _, e := range elections {
			if e.State() == UnknownState {
				return false
			}
		}
		return len(changes) >= 2
	})
	if n := consumers(t, admin); n != 2 {
		t.Fatalf("%d consumers on the stream for 6 candidates and 2 observers on 2 connections, want 2 (one per connection)", n)
	}

	// Hand over four times: each next leader learns of the release through
	// the shared watch, at once.
	for range 4 {
		evs := rec.snapshot()
		was := leader(evs)
		for i, e := range elections {
			if e.Identity() == was {
				stops[i]()
			}
		}
		rec.waitFor(t, time.Second, "the next leader after "+was, func(evs []event) bool {
			l := leader(evs)
			return l != "" && l != was
		})
	}
	checkHistory(t, rec.snapshot())
	if n := consumers(t, admin); n > 2 {
		t.Fatalf("%d consumers after the handovers, want at most 2", n)
	}
	for _, stop := range stops {
		stop()
	}
	cancel()
	eventually(t, 5*time.Second, "the consumers deleted once nobody follows the key", func() bool { return consumers(t, admin) == 0 })
}

// TestManyKeysShareAFewConsumers: a process in many elections named
// under one prefix holds a few consumers (one per key for the first few,
// then a set feed), and its candidates still take over at once.
func TestManyKeysShareAFewConsumers(t *testing.T) {
	const n = 20
	ts := newTestServer(t)
	ncA, ncB := connect(t, ts.url()), connect(t, ts.url())
	kvA := createBucket(t, ncA, bucketConfig(3*time.Second))
	kvB := openBucket(t, ncB)
	admin := jetStream(t, connect(t, ts.url()))

	recs := make([]*recorder, n)
	var stopA []func()
	for i := range n {
		recs[i] = newRecorder()
		key := fmt.Sprintf("app.e%02d", i)
		stopA = append(stopA, runElection(t, mustElection(t, "a", key, kvA, recs[i].options("a")...)))
	}
	for i := range n {
		recs[i].waitFor(t, 10*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	}
	for i := range n {
		key := fmt.Sprintf("app.e%02d", i)
		runElection(t, mustElection(t, "b", key, kvB, recs[i].options("b")...))
	}
	// Per connection: MaxKeyFeeds keys of their own, the others in a set
	// feed.
	want := 2 * (transport.MaxKeyFeeds + 1)
	eventually(t, 5*time.Second, fmt.Sprintf("%d consumers", want), func() bool { return consumers(t, admin) == want })
	time.Sleep(200 * time.Millisecond) // b's campaigns have had time to make any more
	if got := consumers(t, admin); got != want {
		t.Fatalf("%d consumers for %d elections x 2 connections, want %d", got, n, want)
	}

	// a releases everything: b, following most keys through the prefix's
	// consumer, takes each over at once.
	start := time.Now()
	for _, stop := range stopA {
		stop()
	}
	for i := range n {
		recs[i].waitFor(t, 2*time.Second, "b to lead after a's release", func(evs []event) bool { return wins(evs, "b") == 1 })
	}
	t.Logf("b led all %d elections %v after a began releasing", n, time.Since(start).Round(time.Millisecond))
	for i := range n {
		checkHistory(t, recs[i].snapshot())
	}
}

// TestWritesCarryAPerMessageTTL: on a bucket that allows it, the leader's
// writes carry the bucket's TTL, so the broker expires them on time; on one
// that does not, they carry none and the election works the same.
func TestWritesCarryAPerMessageTTL(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprintf("AllowMsgTTL=%v", allow), func(t *testing.T) {
			ts := newTestServer(t)
			nc := connect(t, ts.url())
			var kv jetstream.KeyValue
			if allow {
				kv = createBucket(t, nc, bucketConfig(2*time.Second))
			} else {
				kv = createPlainBucket(t, nc, bucketConfig(2*time.Second))
			}
			rec := newRecorder()
			runElection(t, mustElection(t, "a", "ttl", kv, rec.options("a")...))
			rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
			js := jetStream(t, nc)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := js.Stream(ctx, "KV_"+bucketName)
			if err != nil {
				t.Fatal(err)
			}
			first, err := st.GetLastMsgForSubject(ctx, "$KV."+bucketName+".ttl")
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if allow {
				want = "2s"
			}
			if got := first.Header.Get(jetstream.MsgTTLHeader); got != want {
				t.Fatalf("the winning write's %s header is %q, want %q", jetstream.MsgTTLHeader, got, want)
			}
			// A renewal carries it too.
			eventually(t, 3*time.Second, "a renewal", func() bool {
				m, err := st.GetLastMsgForSubject(ctx, "$KV."+bucketName+".ttl")
				return err == nil && m.Sequence > first.Sequence && m.Header.Get(jetstream.MsgTTLHeader) == want
			})
		})
	}
}

// TestWatchHeartbeatsFollowTheTTL: a shared watch asks the broker for idle
// heartbeats every half TTL (1s to 30s), not nats.go's fixed 5s, and pulls
// for at least 30s at a time, as its pull requests show.
func TestWatchHeartbeatsFollowTheTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ ttl, want time.Duration }{
		{4 * time.Second, 2 * time.Second},
		{2 * time.Minute, 30 * time.Second},
	} {
		t.Run(c.ttl.String(), func(t *testing.T) {
			ts := newTestServer(t)
			nc := connect(t, ts.url())
			kv := createBucket(t, nc, bucketConfig(c.ttl))
			spy := connect(t, ts.url())
			pulls, err := spy.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT.KV_" + bucketName + ".>")
			if err != nil {
				t.Fatal(err)
			}
			if err := spy.Flush(); err != nil {
				t.Fatal(err)
			}
			runElection(t, mustElection(t, "a", "hb", kv))
			m, err := pulls.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("no pull request seen: %v", err)
			}
			var req struct {
				Expires   time.Duration `json:"expires"`
				Heartbeat time.Duration `json:"idle_heartbeat"`
			}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				t.Fatalf("pull request %q: %v", m.Data, err)
			}
			if wantExpires := max(2*c.want, 30*time.Second); req.Heartbeat != c.want || req.Expires != wantExpires {
				t.Fatalf("pull request asks for heartbeats every %v, expiring after %v; want %v and %v", req.Heartbeat, req.Expires, c.want, wantExpires)
			}
		})
	}
}

// TestPrefixConsumerRefusedByPermissionsFallsBackToOnePerKey: a user whose
// permissions allow consumers on its keys one by one, but not on their
// prefix nor on several keys, gets one consumer per key, after one warning
// for each, and its watches work.
func TestPrefixConsumerRefusedByPermissionsFallsBackToOnePerKey(t *testing.T) {
	const n = transport.FoldAt + 2
	stream := "KV_" + bucketName
	allow := []string{
		"$JS.API.INFO", "$JS.API.STREAM.INFO." + stream,
		"$KV." + bucketName + ".app.>",
		"$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*", "$JS.API.CONSUMER.INFO." + stream + ".*",
	}
	for i := range n {
		// Keys one by one: a wildcard here would also match the literal
		// ">" of a prefix's filter.
		allow = append(allow, fmt.Sprintf("$JS.API.CONSUMER.CREATE.%s.*.$KV.%s.app.e%02d", stream, bucketName, i))
	}
	// Who is standing, as a Conclave broker grants it for app.>.
	standing := []string{"conclave.candidates." + bucketName + ".app.>", "conclave.announce." + bucketName + ".app.>", "conclave.handover." + bucketName + ".app.>"}
	srv, _, adminNC := permissionServer(t, &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append(allow, standing...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string{"_INBOX.>"}, standing...)},
	})
	admin := jetStream(t, adminNC)
	nc := appConn(t, srv)
	kv := openBucket(t, nc)
	js, _ := jsOf.Load(kv)
	var warnings, setWarnings, underLock atomic.Int64
	var hubLocked atomic.Pointer[func()] // takes and lets go of the hub's lock
	log := funcLogger(func(s string) {
		if strings.HasPrefix(s, "WARN") && strings.Contains(s, "permissions refuse a consumer on") {
			warnings.Add(1)
		}
		if strings.HasPrefix(s, "WARN") && strings.Contains(s, "permissions refuse a consumer with several filters") {
			setWarnings.Add(1)
		}
		// No line is logged under the hub's lock: another goroutine can
		// take it while the line is being logged.
		lock := hubLocked.Load()
		if lock == nil {
			return
		}
		took := make(chan struct{})
		go func() {
			(*lock)()
			close(took)
		}()
		select {
		case <-took:
		case <-time.After(2 * time.Second):
			underLock.Add(1)
		}
	})
	// A subscription of the process's hub, whose Err takes the hub's lock,
	// made first so that the hub logs to log. It shares the watch of the
	// first election's key, and so costs no consumer.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	probe := newStore(kv, js.(jetstream.JetStream), log)
	if _, _, err := probe.Status(ctx, 0); err != nil {
		t.Fatal(err)
	}
	sub, err := probe.Watch(ctx, "app.e00")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	lock := func() { _ = sub.(interface{ Err() error }).Err() }
	hubLocked.Store(&lock)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		runElection(t, mustElection(t, "a", fmt.Sprintf("app.e%02d", i), kv, append(recs[i].options("a"), WithLogger(log))...))
	}
	// Two refusals, each a request that times out (5s): the set feed's,
	// then the prefix's. Under the race detector with the whole package
	// running, that has taken past 20 s.
	eventually(t, 45*time.Second, fmt.Sprintf("%d consumers, one per key", n), func() bool { return consumers(t, admin) == n })
	if w := warnings.Load(); w != 1 {
		t.Fatalf("the refused prefix consumer was logged %d times, want once", w)
	}
	if w := setWarnings.Load(); w != 1 {
		t.Fatalf("the refused consumer of several keys was logged %d times, want once", w)
	}
	if n := underLock.Load(); n != 0 {
		t.Fatalf("%d lines were logged under the hub's lock", n)
	}
	// The per-key watches work: an outside change reaches the leader at
	// once, and it stands down.
	for i := range n {
		recs[i].waitFor(t, 5*time.Second, fmt.Sprintf("a to lead app.e%02d", i), func(evs []event) bool { return leader(evs) == "a" })
	}
	adminKV := openBucket(t, adminNC)
	if _, err := adminKV.PutString(context.Background(), "app.e09", "someone-else"); err != nil {
		t.Fatal(err)
	}
	recs[9].waitFor(t, time.Second, "a to stand down on the change", func(evs []event) bool { return len(evs) >= 2 && !evs[len(evs)-1].won })
}
