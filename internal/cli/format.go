package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// jsonTime is the format of times in JSON output: RFC 3339 in UTC with
// milliseconds.
const jsonTime = "2006-01-02T15:04:05.000Z07:00"

// textTime is the format of times in text output, in local time.
const textTime = "2006-01-02 15:04:05.000 MST"

func formatJSONTime(t time.Time) string { return t.UTC().Format(jsonTime) }

// jsonTimePtr is formatJSONTime, or nil (JSON null) for the zero time.
func jsonTimePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatJSONTime(t)
	return &s
}

// seconds is d in seconds, to the millisecond, for JSON.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

func secondsPtr(d time.Duration) *float64 {
	s := seconds(d)
	return &s
}

// human rounds d for people: tenths of a second below a minute, seconds
// below an hour, minutes above.
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// ago says how long ago t was.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + human(d) + " (clocks differ)"
	}
	return human(d) + " ago"
}

// until says how long until t, or how long overdue it is.
func until(t, now time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		return "overdue by " + human(d)
	}
	return "in " + human(d)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// bucketRefJSON names the bucket in the JSON output of list and
// stand-down and the log of run: its fields are the first of info's
// bucketJSON, so that "bucket" is the same object everywhere.
type bucketRefJSON struct {
	Name       string  `json:"name"`
	TTLSeconds float64 `json:"ttl_seconds"`
}

// electionJSON is one election in the JSON output of list and info.
type electionJSON struct {
	// Election is the key.
	Election string `json:"election"`
	// State is held, released or removed.
	State string `json:"state"`
	// Leader is the leader's identity while held, else "".
	Leader string `json:"leader"`
	// Instance is the leader's instance, when its write says one (info
	// NAME reads it; list does not).
	Instance string `json:"instance,omitempty"`
	// Token is the fencing token of the leader's term, when its write says
	// it (info NAME reads it; list does not).
	Token *uint64 `json:"token,omitempty"`
	// ReleasedBy is the identity of the leader that stepped down while
	// released, else "".
	ReleasedBy string `json:"released_by"`
	// ReleasedByInstance is its instance, when its release says one (info
	// NAME reads it; list does not).
	ReleasedByInstance string `json:"released_by_instance,omitempty"`
	// Revision is the revision of the key's latest write.
	Revision uint64 `json:"revision"`
	// Written is when the broker stored the latest write.
	Written string `json:"written"`
	// WrittenAgeSeconds is how long ago that was.
	WrittenAgeSeconds float64 `json:"written_age_seconds"`
	// ExpiresAt is when the key expires unless renewed, while held.
	ExpiresAt *string `json:"expires_at"`
	// ExpiresInSeconds is how long until then, negative when overdue.
	ExpiresInSeconds *float64 `json:"expires_in_seconds"`
}

func newElectionJSON(r record, ttl time.Duration, now time.Time) electionJSON {
	j := electionJSON{
		Election:          r.Key,
		State:             r.State.String(),
		Leader:            r.Leader,
		ReleasedBy:        r.ReleasedBy,
		Revision:          r.Revision,
		Written:           formatJSONTime(r.Written),
		WrittenAgeSeconds: seconds(now.Sub(r.Written)),
	}
	switch r.State { // the writer's instance is the leader's, or the releaser's
	case streams.KeyHeld:
		j.Instance = r.Instance
	case streams.KeyReleased:
		j.ReleasedByInstance = r.Instance
	}
	if tok := r.Token(); tok != 0 {
		j.Token = &tok
	}
	if r.State == streams.KeyHeld && ttl > 0 {
		exp := r.Written.Add(ttl)
		j.ExpiresAt = jsonTimePtr(exp)
		j.ExpiresInSeconds = secondsPtr(exp.Sub(now))
	}
	return j
}
