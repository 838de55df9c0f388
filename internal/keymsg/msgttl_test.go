package keymsg

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMsgTTLOfReadsTheHeaderAsTheServerDoes: a duration or whole seconds,
// counted in whole seconds; "never", nonsense and nothing are no TTL.
func TestMsgTTLOfReadsTheHeaderAsTheServerDoes(t *testing.T) {
	for hdr, want := range map[string]time.Duration{"2s": 2 * time.Second, "2.7s": 2 * time.Second, "1m": time.Minute, "5": 5 * time.Second, "never": 0, "-3": 0, "soon": 0, "": 0} {
		h := nats.Header{}
		if hdr != "" {
			h.Set(jetstream.MsgTTLHeader, hdr)
		}
		if got := msgTTLOf(h); got != want {
			t.Errorf("Nats-TTL %q: read %v, want %v", hdr, got, want)
		}
	}
}
