package transport

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkStoreWrite is a leader's renewal: a write over its own last
// revision, acknowledged by an in-process broker (file store, synced).
func BenchmarkStoreWrite(b *testing.B) {
	nc := connect(b, startServer(b))
	kv, js := createBucket(b, nc, 30*time.Second)
	s := NewStore(kv, js, nopLogger{}, writtenAfter)
	ctx := context.Background()
	rev, err := s.Write(ctx, "svc1", []byte("p1"), 0, keymsg.Stamp{Instance: "i1", Term: "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rev, err = s.Write(ctx, "svc1", []byte("p1"), rev, keymsg.Stamp{Instance: "i1", Term: "1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadAck reads a stored message's acknowledgement and a
// refusal by hand, against encoding/json as the JetStream context reads
// them.
func BenchmarkReadAck(b *testing.B) {
	for _, c := range []struct{ name, data string }{
		{"stored", `{"stream":"KV_CHORIA_LEADER_ELECTION","seq":123456}`},
		{"refused", `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 123455"}}`},
	} {
		data := []byte(c.data)
		b.Run(c.name+"/hand", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = readAck(data)
			}
		})
		b.Run(c.name+"/json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var ack struct {
					Error    *jetstream.APIError `json:"error"`
					Stream   string              `json:"stream"`
					Sequence uint64              `json:"seq"`
				}
				_ = json.Unmarshal(data, &ack)
			}
		})
	}
}
