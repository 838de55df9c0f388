package shards

import (
	"math"
	"strings"
	"testing"
	"time"
)

// defaultMaxPayload is nats-server's default max_payload: the largest
// message a client may publish unless the operator raises it.
const defaultMaxPayload = 1 << 20

// TestAnnouncementOfMaxShardsFitsTheDefaultMaxPayload: a member holding
// every shard of a group of MaxShards, with tokens and start times as long
// as they can be written and an identity of a long host name, announces
// itself in one message under the default max_payload, with room to spare.
// A member whose announcement does not fit cannot publish it, and drops
// from the others' roll while it holds its shards.
func TestAnnouncementOfMaxShardsFitsTheDefaultMaxPayload(t *testing.T) {
	a := Announcement{
		Identity: strings.Repeat("h", 253), Instance: "0123456789ab", Since: time.Now(),
		Weight: MaxWeight, Healthy: true, Leaving: true, Shards: MaxShards, Ask: true, Seq: math.MaxUint64,
	}
	for s := range MaxShards {
		a.Held = append(a.Held, [3]uint64{uint64(s), math.MaxUint64, math.MaxUint64})
	}
	size := len(encode(a))
	t.Logf("holding all %d shards: %d bytes (%.0f per shard), default max_payload %d", MaxShards, size, float64(size)/MaxShards, defaultMaxPayload)
	if size > defaultMaxPayload*3/4 {
		t.Errorf("a member holding all %d shards announces %d bytes: more than three quarters of the default max_payload (%d)", MaxShards, size, defaultMaxPayload)
	}
}
