package standing

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/internal/errs"
)

// TestWire: the messages keep the field names that Conclave's candidates
// of every version send and read.
func TestWire(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := Candidate{Identity: "h1", Instance: "w1", Priority: 2, Healthy: true, Leader: true, Token: 7, Since: since}
	want := `{"identity":"h1","instance":"w1","priority":2,"healthy":true,"leader":true,"token":7,"since":"2026-01-02T03:04:05Z"}`
	if got := string(c.Encode()); got != want {
		t.Errorf("candidate encodes as %s, want %s", got, want)
	}
	if back, err := DecodeCandidate(c.Encode()); err != nil || back != c {
		t.Errorf("candidate decodes as %+v, %v; want %+v", back, err, c)
	}
	if _, err := DecodeCandidate([]byte(`{"priority":1}`)); err == nil {
		t.Error("a candidate without an identity decodes")
	}
	if _, err := DecodeCandidate([]byte(`not json`)); err == nil {
		t.Error("a message that is not JSON decodes as a candidate")
	}
	if got := string(HandOverRequest{To: "h2"}.Encode()); got != `{"to":"h2"}` {
		t.Errorf("a request to hand over encodes as %s", got)
	}
	offer := HandOverRequest{To: "h2", Instance: "w2", From: "h1", Revision: 9, Epoch: since}
	if back, err := DecodeHandOverRequest(offer.Encode()); err != nil || back != offer {
		t.Errorf("an offer decodes as %+v, %v; want %+v", back, err, offer)
	}
	if got := string(HandOverAnswer{Leader: "h1", Error: "no", Refused: true}.Encode()); got != `{"leader":"h1","error":"no","refused":true}` {
		t.Errorf("an answer encodes as %s", got)
	}
	if _, err := DecodeHandOverAnswer([]byte("?")); err == nil {
		t.Error("an unreadable answer decodes")
	}
}

// TestRank: best priority first, then by identity and instance.
func TestRank(t *testing.T) {
	cs := []Candidate{{Identity: "b"}, {Identity: "a", Instance: "2"}, {Identity: "c", Priority: 1}, {Identity: "a", Instance: "1"}}
	Rank(cs)
	var got []string
	for _, c := range cs {
		got = append(got, c.Identity+c.Instance)
	}
	if want := "c a1 a2 b"; strings.Join(got, " ") != want {
		t.Errorf("ranked %v, want %s", got, want)
	}
}

// TestAnnouncementTimes: every two TTLs, between 2s and 2 min; counted
// for two and a half intervals.
func TestAnnouncementTimes(t *testing.T) {
	for _, tc := range []struct{ ttl, every time.Duration }{
		{time.Second, 2 * time.Second}, {30 * time.Second, time.Minute}, {5 * time.Minute, 2 * time.Minute},
	} {
		if got := AnnouncementInterval(tc.ttl); got != tc.every {
			t.Errorf("AnnouncementInterval(%v) = %v, want %v", tc.ttl, got, tc.every)
		}
		if got := AnnouncementExpiry(tc.ttl); got != tc.every*5/2 {
			t.Errorf("AnnouncementExpiry(%v) = %v, want %v", tc.ttl, got, tc.every*5/2)
		}
	}
}

// TestRequestHandOverChecksTheName: a name that cannot be a candidate's
// is refused before anything is sent.
func TestRequestHandOverChecksTheName(t *testing.T) {
	if _, err := RequestHandOver(t.Context(), nil, "B", "k", " spaced "); !errors.Is(err, errs.ErrInvalidIdentity) {
		t.Errorf("RequestHandOver to a bad name = %v, want ErrInvalidIdentity", err)
	}
}
