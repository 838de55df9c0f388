package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// TestInfoCandidates: info NAME lists the candidates that answer who is
// standing, with priority, health and leadership, in text and JSON, and
// says that candidates that do not answer (Choria's) are not counted.
func TestInfoCandidates(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)
	campaign(t, js, "c1.example.net", "alpha", streams.WithPriority(1)).waitLeading(t)
	sick := errors.New("sick")
	campaign(t, js, "c2.example.net", "alpha", streams.WithPriority(5),
		streams.WithHealthCheck(func(context.Context) error { return sick }, time.Second))
	campaign(t, js, "c3.example.net", "alpha")
	waitStanding(t, url, "alpha", "c1.example.net", "c2.example.net", "c3.example.net")

	r := conclave(t, "--server", url, "election", "info", "alpha")
	mustSucceed(t, r)
	if !regexp.MustCompile(`(?m)^Candidates that answer: +3 \(Choria's and older Conclave's do not\)\n` +
		`  c2\.example\.net +priority 5, unhealthy, since .+\n` +
		`  c1\.example\.net +priority 1, healthy, leader, since .+\n` +
		`  c3\.example\.net +priority 0, healthy, since `).MatchString(r.stdout) {
		t.Errorf("info does not list the three candidates, best first:\n%s", r.stdout)
	}

	r = conclave(t, "--server", url, "election", "info", "alpha", "--json")
	mustSucceed(t, r)
	var out struct {
		Candidates []struct {
			Identity string    `json:"identity"`
			Priority int       `json:"priority"`
			Healthy  bool      `json:"healthy"`
			Leader   bool      `json:"leading"`
			Since    time.Time `json:"since"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	type want struct {
		id            string
		prio          int
		healthy, lead bool
	}
	wants := []want{{"c2.example.net", 5, false, false}, {"c1.example.net", 1, true, true}, {"c3.example.net", 0, true, false}}
	if len(out.Candidates) != len(wants) {
		t.Fatalf("candidates: %+v, want %v", out.Candidates, wants)
	}
	// Times in JSON have milliseconds, as every --json time (docs/cli.md).
	var rawOut struct {
		Candidates []struct {
			Since string `json:"since"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rawOut); err != nil {
		t.Fatal(err)
	}
	msTime := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for i, c := range rawOut.Candidates {
		if !msTime.MatchString(c.Since) {
			t.Errorf("candidates[%d].since is %q, want RFC 3339 in UTC with milliseconds", i, c.Since)
		}
	}
	for i, w := range wants {
		c := out.Candidates[i]
		if c.Identity != w.id || c.Priority != w.prio || c.Healthy != w.healthy || c.Leader != w.lead || c.Since.IsZero() {
			t.Errorf("candidates[%d] is %+v, want %+v", i, c, w)
		}
	}

	// An election whose leader does not answer (Choria's): none counted,
	// and an empty array, not null.
	if _, err := electionBucket(t, url).Create(testCtx(t), "beta", []byte("choria-node")); err != nil {
		t.Fatal(err)
	}
	r = conclave(t, "--server", url, "election", "info", "beta")
	mustSucceed(t, r)
	mustContain(t, "info beta", r.stdout, "Candidates that answer: 0")
	r = conclave(t, "--server", url, "election", "info", "beta", "--json")
	mustSucceed(t, r)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil || string(raw["candidates"]) != "[]" {
		t.Errorf("info beta --json: candidates %s, want []: %v", raw["candidates"], err)
	}
}
