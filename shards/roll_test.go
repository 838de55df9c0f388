package shards_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/shards"
)

// TestRollKeepsEachRunsLatestAnnouncement: announcements of one run that
// arrive out of order (a member that reconnected through another broker)
// count by their number: the roll says the member leaves, as it said last.
// Runs under one identity are members of their own, listed apart.
func TestRollKeepsEachRunsLatestAnnouncement(t *testing.T) {
	b := startBroker(t)
	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const bucket, group = "CHORIA_LEADER_ELECTION", "stale"
	subject := shards.Subject(bucket, group)
	now := time.Now().UTC().Truncate(time.Millisecond)
	say := func(a shards.Announcement) {
		body, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	// The member answers a question with its latest announcement, then an
	// older one of its run; another run of its identity answers too.
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var q shards.Announcement
		if json.Unmarshal(m.Data, &q) != nil || !q.Ask || q.Identity != "" {
			return
		}
		say(shards.Announcement{Identity: "m", Instance: "run2", Since: now, Healthy: true, Leaving: true, Seq: 7})
		say(shards.Announcement{Identity: "m", Instance: "run2", Since: now, Healthy: true, Held: [][3]uint64{{1, 40, 0}}, Seq: 6})
		say(shards.Announcement{Identity: "m", Instance: "run1", Since: now.Add(-time.Minute), Healthy: true, Held: [][3]uint64{{2, 30, 0}}, Seq: 90})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	roll, err := shards.Roll(context.Background(), nc, bucket, group, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(roll) != 2 || roll[0].Member() != "m/run1" || roll[1].Member() != "m/run2" {
		t.Fatalf("roll %+v, want m/run1 and m/run2", roll)
	}
	if a := roll[1]; a.Seq != 7 || !a.Leaving || len(a.Held) != 0 {
		t.Fatalf("roll says %+v, want run2's announcement 7: leaving, holding nothing", a)
	}
	if a := roll[0]; a.Seq != 90 || len(a.Held) != 1 {
		t.Fatalf("roll says %+v, want run1's announcement 90", a)
	}
}
