package cli

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// TestShardsViewTakesTokensFromTheHolderOnly: a shard's token and since
// come from its holder's announcement, and only when the bucket names that
// holder; the count comes from the members, or from the keys without any.
func TestShardsViewTakesTokensFromTheHolderOnly(t *testing.T) {
	t.Parallel()
	now := time.Now()
	recs := []record{
		{Key: "g.0", State: streams.KeyHeld, Leader: "a", Revision: 10, Written: now},
		{Key: "g.1", State: streams.KeyHeld, Leader: "b", Revision: 11, Written: now},
		{Key: "g.2", State: streams.KeyReleased, ReleasedBy: "a", Revision: 12, Written: now},
	}
	roll := []shards.Announcement{
		{Identity: "a", Shards: 4, Weight: 1, Healthy: true, Held: [][3]uint64{{0, 7, uint64(now.UnixMilli())}, {1, 5, 0}}},
		{Identity: "b", Shards: 4, Weight: 2, Healthy: false, Held: [][3]uint64{{1, 9, uint64(now.UnixMilli())}}},
	}
	v := shardsView("g", bucketRefJSON{Name: "B"}, recs, roll)
	if v.ShardCount != 4 || v.Held != 2 || len(v.Shards) != 4 || len(v.Members) != 2 {
		t.Fatalf("view: %+v", v)
	}
	if s := v.Shards[0]; s.Holder != "a" || s.Token == nil || *s.Token != 7 {
		t.Errorf("shard 0: %+v", s)
	}
	if s := v.Shards[1]; s.Holder != "b" || s.Token == nil || *s.Token != 9 {
		t.Errorf("shard 1: holder b claims token 9 over a's 5: %+v", s)
	}
	if s := v.Shards[2]; s.Holder != "" || s.Token != nil || s.State != "released by a" {
		t.Errorf("shard 2: %+v", s)
	}
	if s := v.Shards[3]; s.State != "absent" || s.Written != nil {
		t.Errorf("shard 3: %+v", s)
	}
	if m := v.Members[1]; m.Identity != "b" || m.Weight != 2 || m.Healthy || m.Held != 1 {
		t.Errorf("member b: %+v", m)
	}
	if v := shardsView("g", bucketRefJSON{}, recs, nil); v.ShardCount != 3 {
		t.Errorf("without members: %d shards, want 3 from the keys", v.ShardCount)
	}
}
