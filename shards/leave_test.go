package shards_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/shards"
)

// TestLeavingMemberHandsOverAShardWonButNotTakenIn: a member that leaves
// while it has won a shard whose OnAssigned has not run yet (its shard's
// callbacks wait behind a slow OnRevoked of the shard's previous term)
// hands that shard over by name to the member the assignment names, as it
// does every shard it holds, rather than stopping its election and
// releasing the shard.
func TestLeavingMemberHandsOverAShardWonButNotTakenIn(t *testing.T) {
	const group = "won"
	f := newFleet(t, startBroker(t), group, 1)
	// The other member: one the assignment ranks below a for the free
	// shard, so that a keeps it while both run.
	other := ""
	for _, id := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		both := []shards.Member{{Identity: "a", Weight: 1, Healthy: true}, {Identity: id, Weight: 1, Healthy: true}}
		if shards.Assign(1, both, nil)[0] == "a" {
			other = id
			break
		}
	}
	if other == "" {
		t.Fatal("no identity that the assignment ranks below a")
	}

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var revoked atomic.Int32
	log := newFullLogRecorder(t, "a")
	a := f.start("a", shards.WithLogger(log), shards.OnRevoked(func(s int) {
		f.revoked("a", s)
		if revoked.Add(1) == 1 { // the first term's: slow
			entered <- struct{}{}
			<-release
		}
	}))
	t.Cleanup(unblock) // before the members' stops
	f.await("a holds shard 0", f.spread([]string{"a"}, 1, 1))
	first := a.g.Term(0)
	if first == nil {
		t.Fatal("a holds shard 0 without a term")
	}
	f.start(other)

	// Removing shard 0's key ends a's term; its OnRevoked blocks, and its
	// election, still running, takes the key again a TTL later.
	nc, js := f.connect()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, shards.Key(group, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatalf("a's term of shard 0 did not end within %v of the key's removal", wait)
	}
	var token uint64 // of a's second term
	leads := func(cs []standing.Candidate) bool {
		for _, c := range cs {
			if c.Identity == "a" && c.Leader && c.Token > first.Token() {
				token = c.Token
				return true
			}
		}
		return false
	}
	for !leads(mustStanding(t, ctx, nc, shards.Key(group, 0), leads)) {
		if ctx.Err() != nil {
			t.Fatalf("a did not lead shard 0 again within %v", wait)
		}
	}

	// a won shard 0 again; its OnAssigned waits behind the blocked
	// OnRevoked. It leaves now, and the OnRevoked returns once a either
	// hands the shard over or stops its election.
	a.cancel()
	line := log.awaitAny(
		[]string{"handing shard 0 over to " + other},
		[]string{"election " + shards.Key(group, 0) + ": a stopped leading", fmt.Sprintf("token %d", token)},
	)
	unblock()
	if err := a.stop(t); err != nil {
		t.Errorf("Start returned %v", err)
	}
	if log.count("handed shard 0 over to "+other, "(leave)") != 1 {
		t.Errorf("a, leaving with shard 0 won but not taken in, did not hand it over to %s: %q", other, line)
	}
	f.await(other+" holds shard 0", f.spread([]string{other}, 1, 1))
	f.check()
}

// mustStanding asks who stands in the election of key until enough says
// so, for at most a second.
func mustStanding(t *testing.T, ctx context.Context, nc *nats.Conn, key string, enough func([]standing.Candidate) bool) []standing.Candidate {
	t.Helper()
	cs, err := standing.StandingUntil(ctx, nc, bucket.Name, key, time.Second, enough)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestLeaveTimeoutBoundsTheWaitForTheNextHolder: a member that stops waits
// at most WithLeaveTimeout for the members its shards go to to stand for
// them; here the only other member is one that announces itself and never
// stands, so the member releases its shards once the timeout has run, says
// so, and its Start returns, well before the default's 5s.
func TestLeaveTimeoutBoundsTheWaitForTheNextHolder(t *testing.T) {
	const group, n, timeout = "unstood", 4, 300 * time.Millisecond
	f := newFleet(t, startBroker(t), group, n)
	nc, js := f.connect()
	quiet := make(chan struct{})
	announced := make(chan struct{})
	go func() { // z: a member on the roll that stands for nothing
		since := time.Now().UTC().Format(time.RFC3339Nano)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for seq := 1; ; seq++ {
			body := fmt.Sprintf(`{"identity":"z","instance":"x","since":%q,"weight":1,"healthy":true,"shards":%d,"seq":%d}`, since, n, seq)
			_ = nc.Publish(shards.Subject(bucket.Name, group), []byte(body))
			if seq == 1 {
				close(announced)
			}
			select {
			case <-quiet:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(quiet) })
	<-announced
	log := newFullLogRecorder(t, "a")
	a := f.start("a", shards.WithLogger(log), shards.WithLeaveTimeout(timeout))
	eventually := time.Now().Add(wait)
	for len(a.g.Held()) == 0 {
		if time.Now().After(eventually) {
			t.Fatalf("a holds no shard within %v", wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := len(a.g.Held())
	stopped := time.Now()
	if err := a.stop(t); err != nil {
		t.Fatalf("a's Start: %v", err)
	}
	took := time.Since(stopped)
	t.Logf("a held %d shards; its Start returned %v after the stop", held, took)
	if took < timeout || took > 2500*time.Millisecond {
		t.Errorf("a's Start returned %v after the stop, want the leave timeout (%v) and a release, far below the default 5s", took, timeout)
	}
	log.await("not handed over within 300ms", "releasing them")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	for s := range n {
		if ent, err := kv.Get(ctx, shards.Key(group, s)); err == nil {
			t.Errorf("shard %d's key still holds %q after a left: want it released", s, ent.Value())
		}
	}
}
