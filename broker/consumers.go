package broker

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// LimitSource says what sets a stream's consumer limit.
type LimitSource string

const (
	// LimitStream is the stream's own MaxConsumers.
	LimitStream LimitSource = "stream"
	// LimitAccount is the JetStream account's max consumers, which nats-server
	// applies to each stream of the account (and which wins over a higher
	// stream limit).
	LimitAccount LimitSource = "account"
	// LimitServer is the server's default for streams and accounts that set
	// none: the option jetstream { limits { default_max_consumers } }
	// (server.Options.JetStreamLimits.DefaultMaxConsumers), 1,000 unless set.
	LimitServer LimitSource = "server"
)

// ConsumerLimit is the most consumers a stream accepts and what sets it.
// Creating one more fails with "maximum consumers limit reached"
// (jetstream.ErrMaximumConsumersLimit).
type ConsumerLimit struct {
	// Max is the limit; -1 when there is none.
	Max int
	// Source is what sets Max.
	Source LimitSource
	// Assumed is true when Max is nats-server's default,
	// server.JSDefaultMaxConsumersPerStream, taken without knowing the
	// server's setting: a client cannot read a server's options, and a
	// server may set another default or none.
	Assumed bool
}

// Unlimited reports whether the stream accepts any number of consumers.
func (l ConsumerLimit) Unlimited() bool { return l.Max < 0 }

// String describes the limit: "1000000 (the stream's limit)",
// "1000 (the server's default, assumed)", "unlimited (the server sets no
// default)".
func (l ConsumerLimit) String() string {
	var why string
	switch l.Source {
	case LimitStream:
		why = "the stream's limit"
	case LimitAccount:
		why = "the account's limit"
	case LimitServer:
		why = "the server's default"
		if l.Unlimited() {
			why = "the server sets no default"
		}
	}
	if l.Assumed {
		why += ", assumed"
	}
	n := fmt.Sprint(l.Max)
	if l.Unlimited() {
		n = "unlimited"
	}
	if why == "" {
		return n
	}
	return n + " (" + why + ")"
}

// EffectiveConsumerLimit works out a stream's consumer limit as nats-server
// 2.15 enforces it: the lower of the stream's MaxConsumers and the account's
// max consumers where they are set (above 0); when neither is set (-1, what
// the KV API gives a bucket, counts as not set), the server's default.
//
// account is the JetStream account's information (js.AccountInfo), nil when
// unknown. serverDefault is the server's DefaultMaxConsumers when the caller
// knows it: above 0 a limit, -1 none; 0 means unknown, and nats-server's
// default, server.JSDefaultMaxConsumersPerStream, is assumed.
func EffectiveConsumerLimit(stream jetstream.StreamConfig, account *jetstream.AccountInfo, serverDefault int) ConsumerLimit {
	streamMax, accountMax := stream.MaxConsumers, accountConsumerLimit(account, stream.Replicas)
	switch {
	case streamMax > 0 && (accountMax <= 0 || streamMax <= accountMax):
		return ConsumerLimit{Max: streamMax, Source: LimitStream}
	case accountMax > 0:
		return ConsumerLimit{Max: accountMax, Source: LimitAccount}
	case serverDefault > 0:
		return ConsumerLimit{Max: serverDefault, Source: LimitServer}
	case serverDefault < 0:
		return ConsumerLimit{Max: -1, Source: LimitServer}
	}
	return ConsumerLimit{Max: server.JSDefaultMaxConsumersPerStream, Source: LimitServer, Assumed: true}
}

// accountConsumerLimit is the account's max consumers for a stream with
// replicas replicas: the account's limit, or with tiered limits those of
// the stream's tier (R1, R3, …). 0 or less means none (or unknown).
func accountConsumerLimit(account *jetstream.AccountInfo, replicas int) int {
	if account == nil {
		return 0
	}
	if len(account.Tiers) > 0 {
		if t, ok := account.Tiers[fmt.Sprintf("R%d", max(replicas, 1))]; ok {
			return t.Limits.MaxConsumers
		}
	}
	return account.Limits.MaxConsumers
}

// streamConsumersText renders a stream's MaxConsumers for a setting change.
func streamConsumersText(n int) string {
	if n <= 0 {
		return "server default"
	}
	return fmt.Sprint(n)
}
