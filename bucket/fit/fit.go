// Package fit decides whether a JetStream key-value bucket can hold
// elections. It is the one home of that judgement: candidates refuse to
// campaign in a bucket with a refused problem, `conclave election info`
// lists every problem as a warning, and the broker checks the bucket it
// provisioned, so the three cannot disagree on what a fit bucket is.
//
// It imports nats.go's jetstream package for the stream configuration, and
// not the NATS server.
package fit

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
)

// MaxSensibleTTL is the longest bucket TTL that is not a problem. A longer
// one works, but an election whose leader crashed stays leaderless for that
// long.
const MaxSensibleTTL = time.Hour

// Kind says which setting a Problem is about, for callers that branch on it.
type Kind int

const (
	// NoTTL: the bucket's keys never expire, so a crashed leader keeps its
	// election for ever. Refused.
	NoTTL Kind = iota + 1
	// ShortTTL: the TTL is below bucket.MinTTL. Refused.
	ShortTTL
	// LongTTL: the TTL is above MaxSensibleTTL.
	LongTTL
	// History: the bucket keeps more than one value per key. Refused.
	History
	// LimitMarkers: the bucket writes a marker when a key expires, which
	// Choria's candidates cannot create over. Refused.
	LimitMarkers
	// ValueSize: the bucket's largest value is smaller than the identity
	// that would campaign. Refused.
	ValueSize
	// MemoryStorage: a broker restart loses every election and starts the
	// revisions, and so the fencing tokens, again.
	MemoryStorage
	// OneReplica: a cluster keeps the bucket on one server only.
	OneReplica
)

// String names the setting: "TTL", "history", "limit markers", "max value
// size", "storage" or "replicas".
func (k Kind) String() string {
	switch k {
	case NoTTL, ShortTTL, LongTTL:
		return "TTL"
	case History:
		return "history"
	case LimitMarkers:
		return "limit markers"
	case ValueSize:
		return "max value size"
	case MemoryStorage:
		return "storage"
	case OneReplica:
		return "replicas"
	}
	return "unknown"
}

// Problem is one way a bucket falls short of holding elections well.
type Problem struct {
	// Kind is the setting at fault.
	Kind Kind
	// Refused is true when Conclave's candidates refuse to campaign in
	// such a bucket: it could yield two leaders, or none for ever. Other
	// problems make elections slower or weaker but not unsafe.
	Refused bool
	// Text says what is wrong, why it matters, and what to set instead,
	// with "the bucket" as its subject.
	Text string
}

// Error returns Text, so a Problem can be wrapped as an error.
func (p Problem) Error() string { return p.Text }

// Use is what the check knows about how the bucket is used.
type Use struct {
	// Identity is the identity that would campaign, to check it fits the
	// bucket's largest value; empty skips that check.
	Identity string
	// Clustered is true when the broker is one of a cluster, where a bucket
	// on one server is a single point of failure.
	Clustered bool
}

// Check returns the problems of a bucket whose stream is configured as cfg,
// in the order of Kind; none for a fit bucket.
func Check(cfg jetstream.StreamConfig, use Use) []Problem {
	var out []Problem
	add := func(k Kind, refused bool, format string, args ...any) {
		out = append(out, Problem{Kind: k, Refused: refused, Text: fmt.Sprintf(format, args...)})
	}
	switch ttl := cfg.MaxAge; {
	case ttl <= 0:
		add(NoTTL, true, "the bucket has no TTL: a crashed leader's key never expires, so nobody ever takes over from it; set a TTL such as 1m (on a Conclave broker, plugin.choria.network.stream.leader_election_ttl)")
	case ttl < bucket.MinTTL:
		add(ShortTTL, true, "TTL %v is below %v, the minimum: the server expires keys up to a few hundred milliseconds late, which leaves a leader too little time to renew, so leadership flaps; set a TTL such as 1m", ttl, bucket.MinTTL)
	case ttl > MaxSensibleTTL:
		add(LongTTL, false, "TTL %v is over %v: after a leader crashes, nobody takes over for that long; Choria's default is 1m", ttl, MaxSensibleTTL)
	}
	if h := cfg.MaxMsgsPerSubject; h != 1 {
		add(History, true, "the bucket keeps %d values per key (history is %d); an election bucket keeps 1: recreate it with history 1", h, h)
	}
	if m := cfg.SubjectDeleteMarkerTTL; m > 0 {
		add(LimitMarkers, true, "limit markers are on (kept %v): after a key expires, Choria's candidates cannot take it over until the marker goes; turn them off", m)
	}
	if size := cfg.MaxMsgSize; size > 0 && use.Identity != "" && int(size) < len(use.Identity) {
		add(ValueSize, true, "the bucket accepts values of at most %d bytes, and identity %q has %d: raise the bucket's max value size or use a shorter identity", size, use.Identity, len(use.Identity))
	}
	if cfg.Storage == jetstream.MemoryStorage {
		add(MemoryStorage, false, "memory storage: a broker restart loses every election and starts revisions again, so fencing tokens repeat; recreate the bucket with file storage")
	}
	if cfg.Replicas <= 1 && use.Clustered {
		add(OneReplica, false, "1 replica on a cluster: if the server holding the bucket fails, every election stops until it is back; set plugin.choria.network.stream.leader_election_replicas to -1 (the cluster size) or 3")
	}
	return out
}

// Refused returns the problems that make candidates refuse the bucket.
func Refused(problems []Problem) []Problem {
	var out []Problem
	for _, p := range problems {
		if p.Refused {
			out = append(out, p)
		}
	}
	return out
}
