package standing

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// defaultWait is how long Standing collects answers when given no wait.
const defaultWait = 250 * time.Millisecond

// maxAnswers is how many answers to one question may wait to be read;
// more at once are dropped by the connection (a slow consumer).
const maxAnswers = 1024

// Standing asks who is standing in election key of bucket over nc: the
// candidates that answer within wait (0: 250ms), one entry per candidate
// (copies that share an identity each answer with their instance), sorted
// by Rank. Candidates of older versions, and Choria's, do not answer.
func Standing(ctx context.Context, nc *nats.Conn, bucket, key string, wait time.Duration) ([]Candidate, error) {
	return StandingUntil(ctx, nc, bucket, key, wait, nil)
}

// StandingUntil is Standing, ending as soon as enough, called with the
// answers so far as they come, reports that they are enough (nil: wait
// it out).
func StandingUntil(ctx context.Context, nc *nats.Conn, bucket, key string, wait time.Duration, enough func([]Candidate) bool) ([]Candidate, error) {
	if wait <= 0 {
		wait = defaultWait
	}
	// Answers arrive on a channel of our own: a synchronous subscription
	// would allocate nats.go's default 65,536 slots (512 KB) per question,
	// and thousands of winners may ask at once.
	inbox := nc.NewRespInbox()
	answers := make(chan *nats.Msg, maxAnswers)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return nil, fmt.Errorf("election %s: asking who is standing: %w", key, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(CandidatesSubject(bucket, key), inbox, nil); err != nil {
		return nil, fmt.Errorf("election %s: asking who is standing: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	seen := map[who]Candidate{} // the latest answer of each
	var got []Candidate         // the first answer of each, as they came
	for collecting := true; collecting; {
		select {
		case msg := <-answers:
			c, err := DecodeCandidate(msg.Data)
			if err != nil {
				continue
			}
			k := who{c.Instance, c.Identity}
			if _, dup := seen[k]; !dup {
				got = append(got, c)
			}
			seen[k] = c
			collecting = enough == nil || !enough(got)
		case <-ctx.Done():
			collecting = false
		}
	}
	out := slices.AppendSeq(make([]Candidate, 0, len(seen)), maps.Values(seen))
	Rank(out)
	return out, nil
}
