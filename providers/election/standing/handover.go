package standing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/providers/election/internal/errs"
)

// ErrNoLeaderAnswered means a hand-over request reached no leader: the
// election has none, or its leader is of a version or library (Choria's)
// that does not take such requests.
var ErrNoLeaderAnswered = errors.New("election: no leader answered the hand-over request")

// handOverRetry is how long RequestHandOver waits before it asks again
// when no candidate takes hand-over requests.
const handOverRetry = 50 * time.Millisecond

// RequestHandOver asks the leader of election key in bucket, over nc, to
// hand the election over to the candidate to (an identity, an instance or
// identity/instance; see streams.Election.HandOver), and returns the
// leader's identity once to took the key or the key was released naming
// to. It returns ErrNoLeaderAnswered when no leader answers within ctx's
// deadline (5s if none; while no candidate runs, the request is sent again
// every 50ms), an error wrapping streams.ErrHandOverRefused when the leader
// refused and leads on, one wrapping streams.ErrInvalidIdentity for a bad
// name, and the leader's error otherwise.
func RequestHandOver(ctx context.Context, nc *nats.Conn, bucket, key, to string) (leader string, err error) {
	if err := errs.ValidateIdentity(to); err != nil {
		return "", fmt.Errorf("election %s: hand over: %w", key, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	body := HandOverRequest{To: to}.Encode()
	subject := HandOverSubject(bucket, key)
	msg, err := nc.RequestWithContext(ctx, subject, body)
	for errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(handOverRetry):
			msg, err = nc.RequestWithContext(ctx, subject, body)
		}
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "", fmt.Errorf("election %s: %w", key, ErrNoLeaderAnswered)
	case err != nil:
		return "", fmt.Errorf("election %s: hand over: %w", key, err)
	}
	ans, err := DecodeHandOverAnswer(msg.Data)
	if err != nil {
		return "", fmt.Errorf("election %s: hand over: %w", key, err)
	}
	switch {
	case ans.Error == "":
		return ans.Leader, nil
	case ans.Refused:
		return ans.Leader, fmt.Errorf("election %s: %s refused to hand over to %s, and leads on: %w: %s", key, ans.Leader, to, errs.ErrHandOverRefused, ans.Error)
	}
	return ans.Leader, fmt.Errorf("election %s: %s refused to hand over to %s: %s", key, ans.Leader, to, ans.Error)
}

// HandOverRequest is a request on the hand-over subject, as JSON. Without
// a Revision it asks the leader to hand over to To (RequestHandOver). With
// one it is the leader From's offer of the key, held at Revision in the
// bucket created at Epoch, to the candidate To (the instance Instance, if
// named), made after From's term ended: To takes the key with a write
// over Revision and answers.
type HandOverRequest struct {
	To       string    `json:"to"`
	Instance string    `json:"instance,omitempty"`
	From     string    `json:"from,omitempty"`
	Revision uint64    `json:"revision,omitempty"`
	Epoch    time.Time `json:"epoch,omitzero"`
}

// Encode returns r as sent.
func (r HandOverRequest) Encode() []byte { return encode(r) }

// DecodeHandOverRequest reads a request on the hand-over subject.
func DecodeHandOverRequest(data []byte) (HandOverRequest, error) {
	return decode[HandOverRequest](data, "request")
}

// HandOverAnswer answers a HandOverRequest, as JSON: the leader's to a
// request to hand over, the candidate's to an offer of the key. Error is
// "" once the hand-over is done or the offer taken up.
type HandOverAnswer struct {
	Leader string `json:"leader"`
	Error  string `json:"error,omitempty"`
	// Refused is set when the leader refused before its term ended
	// (streams.ErrHandOverRefused): the term goes on.
	Refused bool `json:"refused,omitempty"`
}

// Encode returns a as sent.
func (a HandOverAnswer) Encode() []byte { return encode(a) }

// DecodeHandOverAnswer reads an answer to a HandOverRequest.
func DecodeHandOverAnswer(data []byte) (HandOverAnswer, error) {
	return decode[HandOverAnswer](data, "answer")
}
