package streams

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/providers/election/internal/errs"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

var (
	// ErrInvalidKey means the election key is not a valid NATS KV key.
	ErrInvalidKey = errors.New("election: invalid key")
	// ErrInvalidIdentity means the candidate identity cannot be used as a
	// leader's value.
	ErrInvalidIdentity = errs.ErrInvalidIdentity
	// ErrInvalidOption means an option was given a value it cannot use.
	ErrInvalidOption = errors.New("election: invalid option")
	// ErrInvalidBucket means the bucket cannot hold elections safely: its
	// TTL, history or markers are wrong for the algorithm.
	ErrInvalidBucket = errors.New("election: bucket is not a valid election bucket")
	// ErrTTLTooSmall means the bucket's TTL is below bucket.MinTTL. It wraps
	// ErrInvalidBucket.
	ErrTTLTooSmall = errors.New("election: bucket TTL is too small")
	// ErrAlreadyStarted is returned by a second call to Start: an Election
	// campaigns once; make a new one to campaign again.
	ErrAlreadyStarted = errors.New("election: already started")
	// ErrTermEnded is the cause recorded when a term ends.
	ErrTermEnded = errors.New("election: term ended")
	// ErrNotLeader means a call that only a leader may make (HandOver) was
	// made by a candidate that does not lead.
	ErrNotLeader = errors.New("election: not leader")
	// ErrHandOverTooSoon means a leader cannot hand over yet: a leader
	// deposed before its term may still count on the key (up to a TTL
	// after the term began over a removal, or the bucket's TTL was
	// raised). The leader keeps leading; ask again later.
	ErrHandOverTooSoon = errors.New("election: too soon to hand over")
	// ErrHandOverRefused means HandOver (or standing.RequestHandOver)
	// found no candidate by the name given that can take the election
	// over: none answers who is standing, or the one named is unhealthy or
	// stopping. The leader keeps leading.
	ErrHandOverRefused = errs.ErrHandOverRefused
	// ErrPermissionDenied means the broker refused one of the election's
	// requests for the connection user's permissions (to publish to the key
	// or the JetStream API subject, or to receive replies on its inbox).
	// The message names what was refused and what to change. Start returns
	// it rather than retrying, which cannot succeed until they change.
	ErrPermissionDenied = denied.ErrPermissionDenied
)

// classified returns in with its request's outcome (and, for a mismatch,
// the revision the broker named) read from its error: the machine decides
// on the outcome alone.
func classified(in input) input {
	var logged transport.LoggedError // the store's shared watch logged it for all
	in.out, in.conflict = classify(in.err)
	in.logged = errors.As(in.err, &logged)
	return in
}

// classify reads what became of a request from its error.
func classify(err error) (outcome, uint64) {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return outDone, 0
	case errors.Is(err, ErrPermissionDenied):
		return outDenied, 0
	case errors.Is(err, nats.ErrConnectionClosed):
		return outClosed, 0
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		return outMismatch, mismatchRevision(err)
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
		return outBucketGone, 0
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return outNoResponders, 0
	case errors.Is(err, transport.ErrNotSent):
		return outNotSent, 0
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return outTimeout, 0
	case errors.As(err, &apiErr), errors.Is(err, jetstream.ErrInvalidKey):
		return outRejected, 0
	}
	return outUnknown, 0
}

// mismatchRevision returns the key's latest revision that a failed
// compare-and-swap reports ("wrong last sequence: N", as nats-server
// answers a publish whose expected last subject sequence is wrong), or 0.
func mismatchRevision(err error) uint64 {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		return 0
	}
	_, num, _ := strings.Cut(apiErr.Description, "wrong last sequence: ")
	rev, _ := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	return rev
}
