package streams

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// TestRequestNeverSentHasAKnownOutcome: a write that waited out its time
// in the process, never sent, was not stored, whatever its context's error
// says; one that timed out on the wire may have been.
func TestRequestNeverSentHasAKnownOutcome(t *testing.T) {
	t.Parallel()
	notSent := fmt.Errorf("writing election e: %w: %w", transport.ErrNotSent, context.DeadlineExceeded)
	if out, _ := classify(notSent); out != outNotSent || out.mayHaveApplied() {
		t.Errorf("%v: outcome %d, may have applied %v; want not sent, not applied", notSent, out, out.mayHaveApplied())
	}
	for _, err := range []error{context.DeadlineExceeded, nats.ErrTimeout} {
		if out, _ := classify(err); !out.mayHaveApplied() || !out.unanswered() {
			t.Errorf("%v: outcome %d not unanswered and in doubt", err, out)
		}
	}
}

// TestErrorsAreClassifiedIntoOutcomes: the machine decides on outcomes
// alone, so every error the transport returns must land in the right one,
// and only a mismatch names a revision.
func TestErrorsAreClassifiedIntoOutcomes(t *testing.T) {
	t.Parallel()
	wrongLast := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 42"}
	for _, c := range []struct {
		err  error
		want outcome
		rev  uint64
	}{
		{nil, outDone, 0},
		{fmt.Errorf("write: %w", wrongLast), outMismatch, 42},
		{jetstream.ErrKeyExists, outMismatch, 0},
		{fmt.Errorf("read: %w", ErrPermissionDenied), outDenied, 0},
		{nats.ErrConnectionClosed, outClosed, 0},
		{jetstream.ErrStreamNotFound, outBucketGone, 0},
		{jetstream.ErrBucketNotFound, outBucketGone, 0},
		{nats.ErrNoResponders, outNoResponders, 0},
		{jetstream.ErrNoStreamResponse, outNoResponders, 0},
		{&jetstream.APIError{Code: 500, ErrorCode: 10077, Description: "something else"}, outRejected, 0},
		{errors.New("connection reset"), outUnknown, 0},
	} {
		out, rev := classify(c.err)
		if out != c.want || rev != c.rev {
			t.Errorf("classify(%v) = %d, %d; want %d, %d", c.err, out, rev, c.want, c.rev)
		}
	}
	if !outBucketGone.bucketGone(true) || outNoResponders.bucketGone(true) || !outNoResponders.bucketGone(false) {
		t.Error("bucketGone: a writer counts only a missing bucket as gone; an observer also no responders")
	}
	for _, o := range []outcome{outDenied, outClosed} {
		if !o.fatal() {
			t.Errorf("outcome %d not fatal", o)
		}
	}
}
