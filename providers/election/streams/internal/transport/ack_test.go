package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestReadAck: acknowledgements read by hand and through encoding/json
// give what the JetStream context's PublishMsg gives.
func TestReadAck(t *testing.T) {
	for _, c := range []struct {
		name, data string
		seq        uint64
		code       jetstream.ErrorCode // a refusal's, or 0
		invalid    bool
	}{
		{name: "stored", data: `{"stream":"KV_E","seq":42}`, seq: 42},
		{name: "with a domain", data: `{"stream":"KV_E","seq":7,"domain":"hub"}`, seq: 7},
		{name: "duplicate", data: `{"stream":"KV_E","seq":9,"duplicate":true}`, seq: 9},
		{name: "largest", data: `{"stream":"KV_E","seq":18446744073709551615}`, seq: 18446744073709551615},
		{name: "spaced", data: `{ "stream": "KV_E", "seq": 5 }`, seq: 5},
		{name: "fields reordered", data: `{"seq":3,"stream":"KV_E"}`, seq: 3},
		{name: "wrong last sequence", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"}}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "refusal, escaped", data: `{"error":{"code":400,"err_code":10071,"description":"wrong \"last\" sequence"}}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "refusal with a stream", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"KV_E","seq":0}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "twenty digits", data: `{"stream":"KV_E","seq":12345678901234567890}`, seq: 12345678901234567890},
		{name: "no stream", data: `{"seq":3}`, invalid: true},
		{name: "empty stream", data: `{"stream":"","seq":3}`, invalid: true},
		{name: "not JSON", data: `+OK`, invalid: true},
		{name: "cut short", data: `{"stream":"KV_E","seq":12`, invalid: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			seq, err := readAck([]byte(c.data))
			var apiErr *jetstream.APIError
			switch {
			case c.invalid:
				if !errors.Is(err, jetstream.ErrInvalidJSAck) {
					t.Fatalf("%s: %d, %v; want ErrInvalidJSAck", c.data, seq, err)
				}
			case c.code != 0:
				if !errors.As(err, &apiErr) || apiErr.ErrorCode != c.code || apiErr.Code != 400 {
					t.Fatalf("%s: %d, %v; want an APIError with code %d", c.data, seq, err, c.code)
				}
				if !errors.Is(MapMismatch(err), jetstream.ErrKeyRevisionMismatch) {
					t.Fatalf("%s: MapMismatch(%v) is no revision mismatch", c.data, err)
				}
			case err != nil || seq != c.seq:
				t.Fatalf("%s: %d, %v; want %d", c.data, seq, err, c.seq)
			}
		})
	}
}

// TestReadAckMatchesJSON: a refusal read by hand is the one
// encoding/json reads, message included.
func TestReadAckMatchesJSON(t *testing.T) {
	data := []byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"}}`)
	var want struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	_, err := readAck(data)
	if got := fmt.Errorf("nats: %w", want.Error).Error(); err == nil || err.Error() != got {
		t.Fatalf("readAck: %v; encoding/json: %s", err, got)
	}
}

// TestReadAckAllocatesNothing for a stored message's acknowledgement.
func TestReadAckAllocatesNothing(t *testing.T) {
	data := []byte(`{"stream":"KV_CHORIA_LEADER_ELECTION","seq":123456}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = readAck(data) }); n != 0 {
		t.Fatalf("readAck allocates %v times", n)
	}
}
