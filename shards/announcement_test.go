package shards_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/shards"
)

// TestMemberIgnoresMalformedAnnouncements: anyone allowed on the group's
// subject can publish on it. A member that hears announcements with a
// weight that would overflow the assignment, weights out of range, an
// identity that cannot hold a shard, or shard numbers outside the group
// keeps running, ignores each with a warning naming the peer and what was
// wrong (once per peer, however often it repeats), and its group spreads
// as if they had not been sent.
func TestMemberIgnoresMalformedAnnouncements(t *testing.T) {
	b := startBroker(t)
	f := newFleet(t, b, "crafted", 8)
	log := newLogRecorder(t, "a")
	f.start("a", shards.WithLogger(log))
	f.await("a holds all", f.spread([]string{"a"}, 8, 8))

	nc, _ := f.connect()
	subject := shards.Subject("CHORIA_LEADER_ELECTION", "crafted")
	since := time.Now().UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		peer, body string
		says       []string // in the warning, beside the peer
	}{
		{"huge/x", `{"identity":"huge","instance":"x","since":"` + since + `","weight":4611686018427387903,"healthy":true,"shards":8,"seq":1}`, []string{"weight 4611686018427387903"}},
		{"negative/x", `{"identity":"negative","instance":"x","since":"` + since + `","weight":-3,"healthy":true,"shards":8,"seq":1}`, []string{"weight -3"}},
		{" padded /x", `{"identity":" padded ","instance":"x","since":"` + since + `","weight":1,"healthy":true,"shards":8,"seq":1}`, []string{"identity"}},
		{"far/x", `{"identity":"far","instance":"x","since":"` + since + `","weight":1,"healthy":true,"shards":8,"held":[[1099511627776,5,0]],"seq":1}`, []string{"holds shard 1099511627776"}},
		{"below/x", `{"identity":"below","instance":"x","since":"` + since + `","weight":1,"healthy":true,"shards":8,"standing":[-1],"seq":1}`, []string{"stands for shard -1"}},
		{"countless/x", `{"identity":"countless","instance":"x","since":"` + since + `","weight":1,"healthy":true,"shards":-8,"seq":1}`, []string{"shard count -8"}},
		{"broken/x ", `{"identity":"broken","instance":"x ","since":"` + since + `","weight":1,"healthy":true,"shards":8,"seq":1}`, []string{"instance"}},
	} {
		for range 3 { // repeats are not logged again
			if err := nc.Publish(subject, []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Publish(subject, []byte(`{"identity":"garbled",`)); err != nil {
			t.Fatal(err)
		}
		log.await(append([]string{"ignoring", `"` + tc.peer + `"`}, tc.says...)...)
	}
	if n := log.count("ignoring", `"huge/x"`); n != 1 {
		t.Errorf("the announcement of huge, sent 3 times, was reported %d times, want once", n)
	}

	// The group carries on as if nothing had been said: b joins and the
	// shards spread over a and b alone.
	f.start("b")
	f.await("4 each over a and b", f.spread([]string{"a", "b"}, 4, 4))
	f.check()
}

// TestMembersGivenDifferentShardCountsStopTheLater: a member given 8
// shards that joins a group whose member started first with 4 would leave
// shards 4 to 7 to nobody in the other's eyes, and its own spread would
// disagree with the other's for ever. It stops with ErrShardCountMismatch,
// naming the other member and both counts; the first member logs an error
// naming it and both counts, and keeps every shard of its group.
func TestMembersGivenDifferentShardCountsStopTheLater(t *testing.T) {
	f := newFleet(t, startBroker(t), "mix", 4)
	log := newLogRecorder(t, "a")
	f.start("a", shards.WithLogger(log))
	f.await("a holds all", f.spread([]string{"a"}, 4, 4))

	b := f.startCount("b", 8)
	select {
	case err := <-b.done:
		if !errors.Is(err, shards.ErrShardCountMismatch) {
			t.Fatalf("Start of the member given 8 shards returned %v, want ErrShardCountMismatch", err)
		}
		for _, part := range []string{`"a/`, "4", "8", "mix"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%q does not mention %s", err, part)
			}
		}
		b.cancel, b.done = nil, nil
	case <-time.After(wait):
		t.Fatalf("the member given 8 shards beside one given 4 kept running for %v", wait)
	}
	log.await("ERROR", `"b/`, "8 shards", "this member 4")
	f.await("a still holds all", f.spread([]string{"a"}, 4, 4))
	f.check()
}

// TestMemberGivenAnotherShardCountLearnsOfItBeforeTakingShards: the member
// started first answers the join question of a member given another shard
// count, as it answers any member's, so the later member learns of the
// mismatch within its join and stops without taking a shard. The TTL of 8s
// makes the first member's unasked announcements 2s apart, and the later
// member joins just after one: only an answer reaches it before it would
// take shards.
func TestMemberGivenAnotherShardCountLearnsOfItBeforeTakingShards(t *testing.T) {
	const group = "mixjoin"
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = 8 * time.Second })
	f := newFleet(t, b, group, 4)
	f.start("a")
	f.await("a holds all", f.spread([]string{"a"}, 4, 4))

	nc, _ := f.connect()
	heard := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(shards.Subject(bucket.Name, group), heard)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(wait)
	for said := false; !said; {
		select {
		case m := <-heard:
			var a shards.Announcement
			said = json.Unmarshal(m.Data, &a) == nil && a.Identity == "a" && len(a.Held) == 4
		case <-deadline:
			t.Fatalf("a did not announce that it holds all 4 shards within %v", wait)
		}
	}
	_ = sub.Unsubscribe()

	f.resetMoves()
	later := f.startCount("b", 8)
	select {
	case err := <-later.done:
		if !errors.Is(err, shards.ErrShardCountMismatch) {
			t.Fatalf("Start of the member given 8 shards returned %v, want ErrShardCountMismatch", err)
		}
		later.cancel, later.done = nil, nil
	case <-time.After(wait):
		t.Fatalf("the member given 8 shards beside one given 4 kept running for %v", wait)
	}
	f.mu.Lock()
	var taken []int
	for s, n := range f.moves {
		if n > 0 {
			taken = append(taken, s)
		}
	}
	f.mu.Unlock()
	if len(taken) > 0 {
		slices.Sort(taken)
		t.Errorf("the member given 8 shards took shards %v before it learned of the other count", taken)
	}
	f.await("a still holds all", f.spread([]string{"a"}, 4, 4))
	f.check()
}
