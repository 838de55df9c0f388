package streams

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// TestRequestNeverSentHasAKnownOutcome: a write that waited out its time
// in the process, never sent, was not stored, whatever its context's error
// says; one that timed out on the wire may have been.
func TestRequestNeverSentHasAKnownOutcome(t *testing.T) {
	notSent := fmt.Errorf("writing election e: %w: %w", transport.ErrNotSent, context.DeadlineExceeded)
	if mayHaveApplied(notSent) {
		t.Errorf("%v: may have applied, want not", notSent)
	}
	for _, err := range []error{context.DeadlineExceeded, nats.ErrTimeout} {
		if !mayHaveApplied(err) {
			t.Errorf("%v: not applied, want unknown", err)
		}
	}
}
