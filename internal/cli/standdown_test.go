package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestStandDown(t *testing.T) {
	// Not parallel: on a busy machine n1's 2s lease lapsed before --no-wait read the key.
	url := startBroker(t, 2*time.Second)
	js := jetStream(t, url)
	c1 := campaign(t, js, "n1", "my_app")
	c1.waitLeading(t)
	c2 := campaign(t, js, "n2", "my_app")
	// Leaders are named as info names candidates, identity/instance.
	n1, n2 := "n1/"+c1.e.Instance(), "n2/"+c2.e.Instance()

	t.Run("declined", func(t *testing.T) {
		r := conclaveWith(t, runOpts{stdin: "n\n"}, "--server", url, "election", "stand-down", "my_app")
		if r.code != 1 {
			t.Errorf("exit status %d after answering n, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "Really force "+n1+" to stand down from my_app? [y/N]", "not confirmed: "+n1+" still leads my_app")
		if !c1.e.IsLeader() {
			t.Error("n1 no longer leads after a declined stand-down")
		}
	})

	t.Run("no answer", func(t *testing.T) {
		r := conclaveWith(t, runOpts{stdin: ""}, "--server", url, "election", "stand-down", "my_app")
		if r.code != 1 || !strings.Contains(r.stderr, "--force") {
			t.Errorf("exit status %d, stderr %q: want 1 and a hint to pass --force", r.code, r.stderr)
		}
		if !c1.e.IsLeader() {
			t.Error("n1 no longer leads after an unanswered stand-down")
		}
	})

	t.Run("input ends at the question", func(t *testing.T) {
		r := conclaveWith(t, runOpts{devNull: true}, "--server", url, "election", "stand-down", "my_app")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		if !regexp.MustCompile(`\[y/N\] *\nconclave: not confirmed: `).MatchString(r.stderr) {
			t.Errorf("the error does not start on a line of its own after the question:\n%q", r.stderr)
		}
	})

	t.Run("confirmed", func(t *testing.T) {
		r := conclaveWith(t, runOpts{stdin: "y\n"}, "--server", url, "election", "stand-down", "my_app", "--wait", "20s")
		mustSucceed(t, r)
		mustContain(t, "stderr", r.stderr, "Really force "+n1+" to stand down from my_app? [y/N]")
		m := regexp.MustCompile(`(?m)^Removed my_app at revision \d+: ` + n1 + ` must stand down\.\n` +
			n2 + ` leads my_app now, token (\d+): `).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("stand-down did not report n2 taking over:\n%s", r.stdout)
		}
		term := c2.waitLeading(t)
		if m[1] != itoa(term.Token()) {
			t.Errorf("stand-down reported token %s, n2's term has %d", m[1], term.Token())
		}
		if c1.e.IsLeader() {
			t.Error("n1 still leads after the stand-down")
		}
	})

	t.Run("forced", func(t *testing.T) {
		// n1 sat out the takeover after its own stand-down; now it takes
		// over from n2.
		r := conclave(t, "--server", url, "election", "stand-down", "my_app", "--force", "--wait", "20s")
		mustSucceed(t, r)
		if strings.Contains(r.stderr, "Really") {
			t.Errorf("--force asked anyway:\n%s", r.stderr)
		}
		m := regexp.MustCompile(`(?m)^Removed my_app at revision \d+: ` + n2 + ` must stand down\.\n` +
			n1 + ` leads my_app now, token (\d+): `).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("stand-down did not report n1 taking over:\n%s", r.stdout)
		}
		if term := c1.waitLeading(t); m[1] != itoa(term.Token()) {
			t.Errorf("stand-down reported token %s, n1's term has %d", m[1], term.Token())
		}
	})

	t.Run("no-wait", func(t *testing.T) {
		start := time.Now()
		r := conclave(t, "--server", url, "election", "stand-down", "my_app", "--force", "--no-wait")
		mustSucceed(t, r)
		if !regexp.MustCompile(`^Removed my_app at revision \d+: ` + n1 + ` must stand down\.\n$`).MatchString(r.stdout) {
			t.Errorf("stand-down --no-wait printed:\n%s", r.stdout)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("--no-wait took %v", d)
		}
	})
}

func TestStandDownNobodyTakesOver(t *testing.T) {
	// Not parallel: a key of a 2s TTL must still be held when stand-down reads it.
	url := startBroker(t, 2*time.Second)
	kv := electionBucket(t, url)
	if _, err := kv.Create(testCtx(t), "lonely", []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	r := conclave(t, "--server", url, "election", "stand-down", "lonely", "--force", "--wait", "1s")
	mustSucceed(t, r)
	mustContain(t, "stdout", r.stdout, "ghost must stand down", "Nobody took over lonely within 1s")
}

func TestStandDownRefuses(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	if _, err := kv.Create(testCtx(t), "held", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), "idle", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, election, want string
	}{
		{"unknown election", "nope", `no election "nope" in CHORIA_LEADER_ELECTION (elections: held, idle)`},
		{"no leader", "idle", `election "idle" has no leader to stand down: its key is removed`},
		{"invalid name", "a b", `election name: invalid key: "a b" contains ' '`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclave(t, "--server", url, "election", "stand-down", tc.election, "--force")
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want)
		})
	}
	if ent, err := kv.Get(testCtx(t), "held"); err != nil || string(ent.Value()) != "n1" {
		t.Errorf("the refusals changed another election: %v", err)
	}
}

// TestStandDownJSON: --json prints the outcome as one object: who was
// removed, who took over and the new term's token.
func TestStandDownJSON(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	js := jetStream(t, url)
	c1 := campaign(t, js, "n1", "my_app")
	c1.waitLeading(t)
	c2 := campaign(t, js, "n2", "my_app")
	r := conclave(t, "--server", url, "election", "stand-down", "my_app", "--force", "--wait", "20", "--json")
	mustSucceed(t, r)
	var out struct {
		Election        string  `json:"election"`
		RemovedLeader   string  `json:"removed_leader"`
		RemovedInstance string  `json:"removed_leader_instance"`
		RemovedRevision uint64  `json:"removed_revision"`
		MarkerRevision  *uint64 `json:"marker_revision"`
		NewLeader       *string `json:"new_leader"`
		NewInstance     *string `json:"new_leader_instance"`
		Token           *uint64 `json:"token"`
		Bucket          struct {
			Name       string  `json:"name"`
			TTLSeconds float64 `json:"ttl_seconds"`
		} `json:"bucket"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
	}
	term := c2.waitLeading(t)
	switch {
	case out.Election != "my_app", out.RemovedLeader != "n1", out.RemovedRevision == 0, out.Bucket.TTLSeconds != 2, out.Bucket.Name != "CHORIA_LEADER_ELECTION":
		t.Errorf("stand-down --json: %+v", out)
	case out.MarkerRevision == nil || *out.MarkerRevision <= out.RemovedRevision:
		t.Errorf("marker_revision %v, want one above %d", out.MarkerRevision, out.RemovedRevision)
	case out.NewLeader == nil || *out.NewLeader != "n2" || out.Token == nil || *out.Token != term.Token():
		t.Errorf("new_leader %v token %v, want n2 and %d", out.NewLeader, out.Token, term.Token())
	case out.RemovedInstance != c1.e.Instance() || out.NewInstance == nil || *out.NewInstance != c2.e.Instance():
		t.Errorf("removed_leader_instance %q new_leader_instance %v, want %q and %q", out.RemovedInstance, out.NewInstance, c1.e.Instance(), c2.e.Instance())
	}
}
