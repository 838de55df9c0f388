package cli_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestStandDownTo: stand-down --to asks the leader to hand over to the named
// candidate, which takes up the leader's offer of the key with one write,
// no release between; it reports the token of the term that began, in text
// and in JSON.
func TestStandDownTo(t *testing.T) {
	t.Parallel()
	// A TTL of 10s gives the offer of the key its full second (a fifth of
	// the TTL, at most 1s) on a loaded machine.
	url := startBroker(t, 10*time.Second)
	js := jetStream(t, url)
	c1 := campaign(t, js, "n1", "my_app")
	c1.waitLeading(t)
	c2 := campaign(t, js, "n2", "my_app")
	c3 := campaign(t, js, "n3", "my_app")
	waitStanding(t, url, "my_app", "n1", "n2", "n3")

	t.Run("text", func(t *testing.T) {
		r := conclave(t, "--server", url, "election", "stand-down", "--to", "n3", "--force", "--wait", "20s", "my_app")
		mustSucceed(t, r)
		m := regexp.MustCompile(`(?m)^n1/` + c1.e.Instance() + ` handed my_app over to n3\.\n` +
			`n3/` + c3.e.Instance() + ` leads my_app now, token (\d+)\.$`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("stand-down --to did not report n3 taking over:\n%s", r.stdout)
		}
		term := c3.waitLeading(t)
		if m[1] != itoa(term.Token()) {
			t.Errorf("stand-down --to reported token %s, n3's term has %d", m[1], term.Token())
		}
		if c1.e.IsLeader() || c2.e.IsLeader() {
			t.Error("n1 or n2 leads after the hand-over to n3")
		}
	})

	t.Run("json", func(t *testing.T) {
		r := conclave(t, "--server", url, "election", "stand-down", "--to", "n2", "--force", "--wait", "20s", "--json", "my_app")
		mustSucceed(t, r)
		var out struct {
			Election       string  `json:"election"`
			From           string  `json:"from"`
			To             string  `json:"to"`
			MarkerRevision *uint64 `json:"marker_revision"`
			NewLeader      *string `json:"new_leader"`
			Token          *uint64 `json:"token"`
			HandedOver     bool    `json:"handed_over"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
		}
		term := c2.waitLeading(t)
		switch {
		case out.Election != "my_app", out.From != "n3", out.To != "n2", !out.HandedOver:
			t.Errorf("stand-down --to --json: %+v", out)
		case out.MarkerRevision != nil:
			t.Errorf("marker_revision %d: n3 released the key rather than n2 taking up its offer", *out.MarkerRevision)
		case out.NewLeader == nil || *out.NewLeader != "n2" || out.Token == nil || *out.Token != term.Token():
			t.Errorf("new_leader %v token %v, want n2 and %d", out.NewLeader, out.Token, term.Token())
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct{ to, want string }{
			{"n2", "n2 already leads my_app: nothing to hand over"},
			{"n9", "n9 is not standing in my_app (those that answer: n1, n2, n3)"},
			{" n1", `--to " n1" is not a candidate's identity`},
		} {
			r := conclave(t, "--server", url, "election", "stand-down", "--to", tc.to, "--force", "my_app")
			if r.code != 1 {
				t.Errorf("--to %q: exit status %d, want 1", tc.to, r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want)
		}
		if !c2.e.IsLeader() {
			t.Error("a refused hand-over moved the election")
		}
	})
}

// TestStandDownToNoLeaderAnswers: a leader that does not take hand-over
// requests (Choria's, an older Conclave's) gets a clear error that points to
// a plain stand-down.
func TestStandDownToNoLeaderAnswers(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	if _, err := kv.Create(testCtx(t), "my_app", []byte("choria-node")); err != nil {
		t.Fatal(err)
	}
	campaign(t, jetStream(t, url), "n2", "my_app")
	waitStanding(t, url, "my_app", "n2")
	r := conclave(t, "--server", url, "--timeout", "2s", "election", "stand-down", "--to", "n2", "--force", "my_app")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "choria-node leads my_app but did not answer the request to hand over",
		"`conclave election stand-down my_app` makes it stand down")
	if ent, err := kv.Get(testCtx(t), "my_app"); err != nil || string(ent.Value()) != "choria-node" {
		t.Errorf("the unanswered hand-over changed the key: %v", err)
	}
}

// waitStanding waits until each of ids answers who is standing in election
// key on the broker at url.
func waitStanding(t *testing.T, url, key string, ids ...string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(eventTimeout)
	for {
		cs, err := standing.Standing(testCtx(t), nc, bucket.Name, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range cs {
			seen[c.Identity] = true
		}
		missing := false
		for _, id := range ids {
			missing = missing || !seen[id]
		}
		if !missing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v do not all stand in %s within %v: %+v", ids, key, eventTimeout, cs)
		}
	}
}

// TestStandDownToHolderNotLeadingYet: after a forced stand-down the new
// holder waits a TTL before it leads, and does not take hand-over requests
// meanwhile: stand-down --to says so rather than blame an old version.
func TestStandDownToHolderNotLeadingYet(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)
	kv := electionBucket(t, url)
	campaign(t, js, "n1", "my_app").waitLeading(t)
	campaign(t, js, "n2", "my_app")
	waitStanding(t, url, "my_app", "n1", "n2")
	w, err := kv.Watch(testCtx(t), "my_app", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := kv.Delete(testCtx(t), "my_app"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(eventTimeout)
	for taken := false; !taken; {
		select {
		case ent := <-w.Updates():
			taken = ent != nil && ent.Operation() == jetstream.KeyValuePut && string(ent.Value()) == "n2"
		case <-deadline:
			t.Fatal("n2 did not take the removed key")
		}
	}
	r := conclave(t, "--server", url, "--timeout", "2s", "election", "stand-down", "--to", "n1", "--force", "my_app")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "n2 holds my_app but did not take the request to hand over", "it does not lead yet")
}
