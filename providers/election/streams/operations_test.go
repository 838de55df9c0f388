package streams

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
)

// Tests of what operators do: restart every instance, change the TTL, run
// out of consumers, remove keys. Each checks one defect of issue 8 end to
// end against a real nats-server.

// TestRestartedGenerationsEachLeadAtOnce: a service whose instances are
// restarted one after another, with none running in between, is led again
// as soon as the next instance starts: the last leader's release is marked,
// so the next candidate need not wait out a forced stand-down.
func TestRestartedGenerationsEachLeadAtOnce(t *testing.T) {
	const ttl = 5 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	for gen := range 5 {
		who := sprintf("gen%d", gen)
		started := time.Now()
		stop := runElection(t, mustElection(t, who, "restarts", kv, rec.options(who)...))
		evs := rec.waitFor(t, 2*ttl, who+" to lead", func(evs []event) bool { return wins(evs, who) == 1 })
		if took := evs[len(evs)-1].term.Started().Sub(started); took > ttl/5 {
			t.Fatalf("%s led %v after starting, want at once (the TTL is %v)", who, took, ttl)
		}
		stop()
		v, _, _ := value(t, kv, "restarts")
		if v != "" {
			t.Fatalf("key holds %q after %s stopped", v, who)
		}
	}
	checkHistory(t, rec.snapshot())
}

// TestRemovalsByOthersStillWaitATTL: a delete, a purge or an empty value
// written by someone other than the holder is a forced stand-down: the next
// leader waits a TTL from when it saw it, even if it starts afterwards.
func TestRemovalsByOthersStillWaitATTL(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	ctx := context.Background()
	cases := map[string]func(key string) error{
		"nats kv del":   func(key string) error { return kv.Delete(ctx, key) },
		"nats kv purge": func(key string) error { return kv.Purge(ctx, key) },
		"empty value":   func(key string) error { _, err := kv.PutString(ctx, key, ""); return err },
	}
	var wg sync.WaitGroup
	for name, remove := range cases {
		key := strings.ReplaceAll(name, " ", "_")
		if _, err := kv.PutString(ctx, key, "deposed"); err != nil {
			t.Fatal(err)
		}
		if err := remove(key); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		removed := time.Now()
		rec := newRecorder()
		runElection(t, mustElection(t, "next", key, kv, rec.options("next")...))
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := rec.waitFor(t, 3*ttl, "next to lead after "+name, func(evs []event) bool { return wins(evs, "next") == 1 })
			if waited := evs[0].term.Started().Sub(removed); waited < ttl {
				t.Errorf("after %s the next leader led in %v, want a TTL (%v): the removed leader may still count on its deadline", name, waited, ttl)
			}
		}()
	}
	wg.Wait()
}

// TestStandbyStartedBeforeATTLDropLeadsByTheNewTTL: a standby that knew the
// old TTL bases its term on the TTL in force when it wins, so a partition
// right after cannot make it outlive its key.
func TestStandbyStartedBeforeATTLDropLeadsByTheNewTTL(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(4*time.Second))
	rec := newRecorder()
	stopA := runElection(t, mustElection(t, "a", "shrink", kv, append(rec.options("a"), WithReleaseOnStop(false))...))
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "shrink", kv, rec.options("b")...))
	time.Sleep(100 * time.Millisecond) // b is a standby that read the 4s TTL
	changeTTL(t, kv, nc, 1500*time.Millisecond)
	stopA() // a crashes, in effect: it stops without releasing, and its key expires
	evs := rec.waitFor(t, 15*time.Second, "b to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	term := evs[len(evs)-1].term
	if span := term.ValidUntil().Sub(term.Started()); span > 1500*time.Millisecond {
		t.Fatalf("b's term is valid %v after it began, longer than the 1.5s TTL in force: a partition now would let a second leader in", span)
	}
	checkHistory(t, rec.snapshot())
}

// TestHealthyFollowsARaisedTTL: after the TTL is raised, a healthy leader
// renews less often, and Healthy allows for it.
func TestHealthyFollowsARaisedTTL(t *testing.T) {
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(time.Second))
	rec := newRecorder()
	e := mustElection(t, "a", "raise", kv, rec.options("a")...)
	runElection(t, e)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	changeTTL(t, kv, nc, 5*time.Second)
	eventually(t, 5*time.Second, "the leader to adopt the 5s TTL", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.tm.ttl == 5*time.Second
	})
	failed, polls := 0, 0
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); polls++ {
		if err := e.Healthy(250 * time.Millisecond); err != nil {
			failed++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if failed > 0 {
		t.Fatalf("Healthy failed %d of %d polls of a healthy leader after the TTL was raised", failed, polls)
	}
	if wins(rec.snapshot(), "") != 1 {
		t.Fatal("the leader lost its term")
	}
}

// countingClock counts reads of the time, to catch a loop that spins.
type countingClock struct {
	clock.System
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time { c.reads.Add(1); return time.Now() }

// TestCandidateWhoseWatchIsRefusedStillLeads: a broker that refuses new
// consumers does not keep a candidate from leading, nor makes it spin, and
// the limit that was hit, and how to raise it, are logged once.
func TestCandidateWhoseWatchIsRefusedStillLeads(t *testing.T) {
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// The election bucket, but with room for one consumer only.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + bucketName, Subjects: []string{"$KV." + bucketName + ".>"},
		MaxMsgsPerSubject: 1, MaxAge: ttl, Discard: jetstream.DiscardNew, AllowDirect: true,
		DenyDelete: true, AllowRollup: true, Storage: jetstream.FileStorage, MaxConsumers: 1,
	}); err != nil {
		t.Fatal(err)
	}
	kv := openBucket(t, nc)
	busy, err := kv.Watch(ctx, "elsewhere") // takes the one consumer
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Stop() }()
	if _, err := kv.PutString(ctx, "refused", "crashed"); err != nil {
		t.Fatal(err)
	}
	clk := &countingClock{}
	var warnings atomic.Int64
	rec := newRecorder()
	e := mustElection(t, "a", "refused", kv, append(rec.options("a"), WithClock(clk), WithLogger(funcLogger(func(s string) {
		if strings.HasPrefix(s, "WARN") && strings.Contains(s, "allows no more consumers") && strings.Contains(s, "max-consumers") {
			warnings.Add(1)
		}
	})))...)
	runElection(t, e)
	evs := rec.waitFor(t, ttl+2*time.Second, "a to lead without a watch", func(evs []event) bool { return wins(evs, "a") == 1 })
	if took := evs[0].at.Sub(evs[0].term.Started()); took > time.Second {
		t.Fatalf("callback %v late", took)
	}
	before := clk.reads.Load()
	time.Sleep(2 * time.Second) // a leader without a watch: renewing, retrying the watch
	if reads := clk.reads.Load() - before; reads > 2000 {
		t.Fatalf("%d clock reads in 2s: the campaign loop spins", reads)
	}
	if n := warnings.Load(); n != 1 {
		t.Fatalf("the consumer limit was logged %d times at warning level, want once", n)
	}
	checkHistory(t, rec.snapshot())
}
