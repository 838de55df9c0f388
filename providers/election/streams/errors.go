package streams

import (
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

var (
	// ErrInvalidKey means the election key is not a valid NATS KV key.
	ErrInvalidKey = errors.New("election: invalid key")
	// ErrInvalidIdentity means the candidate identity cannot be used as a
	// leader's value.
	ErrInvalidIdentity = errors.New("election: invalid identity")
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
	// ErrHandOverTooSoon means a leader cannot hand over yet: its release
	// may not let another candidate lead at once while a leader deposed
	// before its term may still count on the key (at most a TTL after
	// the term began over a removal, or after the bucket's TTL was
	// raised). The leader keeps leading; ask again later.
	ErrHandOverTooSoon = errors.New("election: too soon to hand over")
	// ErrHandOverRefused means HandOver found no candidate by the name
	// given that can take the election over: none answers who is
	// standing, or the one named is unhealthy or stopping. The leader
	// keeps leading.
	ErrHandOverRefused = errors.New("election: hand-over refused")
)

// isMismatch reports whether err is a compare-and-swap failure: the key's
// latest revision was not the one the write expected.
func isMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// mayHaveApplied reports whether a write that failed with err may still have
// been stored. Only an answer from JetStream, or the certainty that no
// JetStream server received the request (nobody listening, or the request
// never sent: transport.ErrNotSent), rules it out: a timeout or a
// connection lost mid-request leaves the outcome unknown.
func mayHaveApplied(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return true
	case errors.As(err, &apiErr),
		errors.Is(err, transport.ErrNotSent),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrInvalidKey):
		return false
	}
	return true
}

// mismatchRevision returns the key's latest revision that a failed
// compare-and-swap reports ("wrong last sequence: N", as nats-server
// answers a publish whose expected last subject sequence is wrong), and
// whether it could be read from err.
func mismatchRevision(err error) (uint64, bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, false
	}
	_, num, ok := strings.Cut(apiErr.Description, "wrong last sequence: ")
	if !ok {
		return 0, false
	}
	rev, perr := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	return rev, perr == nil
}

// notSent reports whether a request failed without being sent: it waited
// out its time for a turn in the process (see transport.ErrNotSent).
func notSent(err error) bool { return errors.Is(err, transport.ErrNotSent) }
