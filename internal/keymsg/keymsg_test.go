package keymsg_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// TestEntryReadsTheStamp: a raw message reads as streams reads it, with
// the instance and term its writer put in its headers; no message is an
// absent key.
func TestEntryReadsTheStamp(t *testing.T) {
	if got := streams.ReadEntry(keymsg.Read("B", nil)); got.State != streams.KeyAbsent {
		t.Errorf("no message reads as %v, want absent", got.State)
	}
	at := time.Now()
	msg := &jetstream.RawStreamMsg{Subject: "$KV.B.app", Sequence: 12, Data: []byte("host1"), Time: at,
		Header: nats.Header{"Conclave-Instance": {"w1"}, "Conclave-Term": {"9"}}}
	got := streams.ReadEntry(keymsg.Read("B", msg))
	if got.Key != "app" || got.State != streams.KeyHeld || got.Leader != "host1" || got.Instance != "w1" || got.Token() != 9 || got.Revision != 12 || !got.Written.Equal(at) {
		t.Errorf("read %+v (token %d), want app held by host1, instance w1, token 9, revision 12", got, got.Token())
	}
}

func TestStampRoundTripsThroughHeaders(t *testing.T) {
	st := keymsg.Stamp{Instance: "w1", Term: keymsg.TermBegins, Write: "1f3a", HandOverInstance: "w2"}
	hdr := nats.Header{}
	st.Set(hdr)
	if got := hdr.Get(keymsg.WriteHeader); got != "1f3a" {
		t.Fatalf("%s header %q, want 1f3a", keymsg.WriteHeader, got)
	}
	msg := &jetstream.RawStreamMsg{Subject: "$KV.B.app", Sequence: 3, Data: []byte("host1"), Header: hdr, Time: time.Now()}
	got := keymsg.Read("B", msg).(interface{ Stamp() keymsg.Stamp }).Stamp()
	if got != st {
		t.Fatalf("read stamp %+v, want %+v", got, st)
	}
}
