package standing

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Candidate is one candidate standing in an election, as it announces
// itself and answers who is standing. On the wire it is a JSON object
// with the fields' tags as names (Encode, DecodeCandidate).
type Candidate struct {
	// Identity is the candidate's name.
	Identity string `json:"identity"`
	// Instance tells apart candidates that share an identity (see
	// streams.Election.Instance); "" for older versions.
	Instance string `json:"instance,omitempty"`
	// Priority ranks candidates: a leader hands over to a healthy candidate
	// of a higher priority (see streams.WithPriority). Default 0.
	Priority int `json:"priority"`
	// Healthy is false while the candidate's health check fails (see
	// streams.WithHealthCheck); such a candidate does not campaign.
	Healthy bool `json:"healthy"`
	// Leader is true for the candidate that leads, as it knows.
	Leader bool `json:"leader"`
	// Token is, while Leader, the fencing token of the term it leads.
	Token uint64 `json:"token,omitempty"`
	// Since is when the candidate started campaigning.
	Since time.Time `json:"since"`
	// Leaving is set in the announcement a candidate makes as it stops,
	// and in its answers while it winds down: it is not to be counted,
	// nor offered the key.
	Leaving bool `json:"leaving,omitempty"`
}

// Encode returns c as a candidate announces itself and answers.
func (c Candidate) Encode() []byte { return encode(c) }

// DecodeCandidate reads an announcement or an answer to who is standing.
// It returns an error for one that is not JSON or names no identity.
func DecodeCandidate(data []byte) (Candidate, error) {
	c, err := decode[Candidate](data, "candidate")
	if err != nil {
		return Candidate{}, err
	}
	if c.Identity == "" {
		return Candidate{}, errors.New("a candidate without an identity")
	}
	return c, nil
}

// NamedBy reports whether name names c, as a hand-over's target may: its
// identity (any copy of it), its instance, or identity/instance.
func (c Candidate) NamedBy(name string) bool {
	return c.Identity == name || c.Instance != "" && (c.Instance == name || c.Identity+"/"+c.Instance == name)
}

// Rank sorts cs as Standing returns them: best priority first, then by
// identity and by instance.
func Rank(cs []Candidate) {
	slices.SortFunc(cs, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Identity, b.Identity), cmp.Compare(a.Instance, b.Instance))
	})
}

// who tells a candidate apart from the others of its election (an older
// version's answer has no instance, and one candidate per identity).
type who struct{ instance, identity string }

// AnnouncementInterval is how often a running candidate announces itself
// to its election's leader and observers, for a bucket TTL ttl: every two
// TTLs, between 2s and 2 min. Three candidates then send half as many
// announcements as their leader writes renewals, as core NATS messages,
// which the broker neither stores nor syncs.
func AnnouncementInterval(ttl time.Duration) time.Duration {
	return min(max(2*ttl, 2*time.Second), 2*time.Minute)
}

// AnnouncementExpiry is how long a candidate not heard from is still
// counted as standing, for a bucket TTL ttl: two and a half announcement
// intervals, so that one lost or late announcement does not drop it.
func AnnouncementExpiry(ttl time.Duration) time.Duration {
	return AnnouncementInterval(ttl) * 5 / 2
}

// encode returns v as JSON: the wire's messages always encode.
func encode(v any) []byte {
	body, _ := json.Marshal(v)
	return body
}

// decode reads a message of the wire, what naming it in the error.
func decode[T any](data []byte, what string) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return *new(T), fmt.Errorf("unreadable %s %q: %w", what, data, err)
	}
	return v, nil
}
