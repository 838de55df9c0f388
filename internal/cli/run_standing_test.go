package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// waitCandidate waits until identity answers who is standing in key as
// match accepts, and returns what it answered.
func waitCandidate(t *testing.T, url, key, identity string, match func(standing.Candidate) bool) standing.Candidate {
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
		for _, c := range cs {
			if c.Identity == identity && match(c) {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not stand in %s as wanted within %v: %+v", identity, key, eventTimeout, cs)
		}
	}
}

// TestRunPriorityAndMinTerm: run --priority announces the candidate's
// priority, and a run leader with --min-term 1s hands over to a candidate of
// a higher priority after 1s, not after the default of at least 10s.
func TestRunPriorityAndMinTerm(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Second)
	script, log := workerSetup(t)
	r1 := startConclave(t, []string{"LOG=" + log}, "--server", url, "election", "run",
		"--identity", "r1", "--priority", "3", "--min-term", "1s", "--grace", "1s", "job", script)
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^started r1 \d+ job$`))
	began := time.Now()
	waitCandidate(t, url, "job", "r1", func(c standing.Candidate) bool { return c.Priority == 3 && c.Healthy && c.Leader })

	c2 := campaign(t, jetStream(t, url), "c2", "job", streams.WithPriority(5))
	c2.waitLeading(t)
	if took := time.Since(began); took > 8*time.Second {
		t.Errorf("r1 handed over %v after it began leading: --min-term 1s was not applied", took)
	}
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 no longer leads job \(handed over\): stopping`))
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^term r1$`))
}

// TestRunHealthCmd: a run whose --health-cmd fails does not campaign, and
// says so when asked who stands; healthy, it leads; unhealthy again while a
// healthy candidate stands, it hands over.
func TestRunHealthCmd(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Second)
	script, log := workerSetup(t)
	healthy := filepath.Join(t.TempDir(), "healthy")
	r1 := startConclave(t, []string{"LOG=" + log}, "--server", url, "election", "run",
		"--identity", "r1", "--health-cmd", "test -e '"+healthy+"'", "--health-every", "200ms",
		"--min-term", "1s", "--grace", "1s", "job", script)
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 campaigning in job`))
	waitCandidate(t, url, "job", "r1", func(c standing.Candidate) bool { return !c.Healthy })
	// Unhealthy for several checks: no campaign, so the key is never written.
	kv := electionBucket(t, url)
	waitCandidate(t, url, "job", "r1", func(c standing.Candidate) bool { return !c.Healthy && time.Since(c.Since) > time.Second })
	if _, err := kv.Get(testCtx(t), "job"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an unhealthy run campaigned: the key is there (%v)", err)
	}

	r1.stderr.waitFor(t, 0, regexp.MustCompile(`warning: r1 is unhealthy \(health command .*\): not campaigning in job until it is healthy again`))

	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Without --verbose too: the log does not end at "not campaigning".
	recovered, _ := r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 is healthy again: campaigning in job$`))
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^started r1 \d+ job$`))

	c2 := campaign(t, jetStream(t, url), "c2", "job")
	waitStanding(t, url, "job", "c2")
	if err := os.Remove(healthy); err != nil {
		t.Fatal(err)
	}
	c2.waitLeading(t)
	warned, _ := r1.stderr.waitFor(t, recovered, regexp.MustCompile(`warning: r1 is unhealthy \(health command .*\): it still leads job, and hands over to a healthy candidate if one stands`))
	lost, _ := r1.stderr.waitFor(t, recovered, regexp.MustCompile(`r1 no longer leads job \(handed over\): stopping`))
	if warned > lost {
		t.Errorf("the warning that r1 still leads came after it handed over (line %d, %d)", warned, lost)
	}
	all, _ := r1.stderr.snapshot()
	for _, l := range all[recovered:lost] {
		if strings.Contains(l, "not campaigning") {
			t.Errorf("while leading, r1 logged %q", l)
		}
	}
	waitCandidate(t, url, "job", "r1", func(c standing.Candidate) bool { return !c.Healthy && !c.Leader })
}

// TestRunStandingFlagErrors: bad --priority, --health-* and --min-term
// values are refused with what to give instead.
func TestRunStandingFlagErrors(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Second)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--priority", "2000000000"}, "--priority 2000000000 is out of range"},
		{[]string{"--health-every", "1s"}, "--health-every without --health-cmd"},
		{[]string{"--health-cmd", " "}, "--health-cmd is empty"},
		{[]string{"--health-cmd", "true", "--health-every", "0s"}, "--health-every 0s is not positive"},
		{[]string{"--min-term", "0s"}, "--min-term 0s is not positive"},
	} {
		r := conclave(t, append(append([]string{"--server", url, "election", "run"}, tc.args...), "job", "true")...)
		if r.code != 1 {
			t.Errorf("%v: exit status %d, want 1", tc.args, r.code)
		}
		mustContain(t, "stderr", r.stderr, tc.want)
	}
}

// TestRunPriorityFromConfig: without --priority, run takes the priority
// from the configuration (here its environment override), as the
// framework does; --priority overrides it.
func TestRunPriorityFromConfig(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Second)
	env := []string{"CONCLAVE_PLUGIN_CONCLAVE_ELECTION_PRIORITY=7"}
	startConclave(t, env, "--server", url, "election", "run", "--identity", "r1", "job", "sleep", "600")
	startConclave(t, env, "--server", url, "election", "run", "--identity", "r2", "--priority", "2", "job", "sleep", "600")
	waitCandidate(t, url, "job", "r1", func(c standing.Candidate) bool { return c.Priority == 7 })
	waitCandidate(t, url, "job", "r2", func(c standing.Candidate) bool { return c.Priority == 2 })
}

// TestRunGraceDoesNotStretchMinTerm: --grace delays the command of a new
// leader that took an absent key, and says so, but not its term: the term
// begins when it takes the key, and --min-term counts from then, so that a
// leader with --min-term 1s and --grace 15s hands over to a candidate of a
// higher priority well before its grace has passed (and so never starts its
// command), and the candidate, taking a handed-over key, leads at once.
func TestRunGraceDoesNotStretchMinTerm(t *testing.T) {
	t.Parallel()
	const grace = 15 * time.Second
	url := startBroker(t, time.Second)
	script, log := workerSetup(t)
	began := time.Now()
	r1 := startConclave(t, []string{"LOG=" + log}, "--server", url, "election", "run",
		"--identity", "r1", "--min-term", "1s", "--grace", grace.String(), "job", script)
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 leads job, token \d+, over a key that was absent: starting \S+ in 15s \(--grace\)`))

	c2 := campaign(t, jetStream(t, url), "c2", "job", streams.WithPriority(5))
	term := c2.waitLeading(t)
	if took := time.Since(began); took > grace-3*time.Second {
		t.Errorf("r1 handed over %v after it started: its --min-term 1s counted from after its --grace %v", took, grace)
	}
	if term.From() != streams.KeyReleased {
		t.Errorf("c2's term is from a key that was %v, want released (a hand-over)", term.From())
	}
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 no longer leads job \(handed over\); campaigning again`))
	if strings.Contains(r1.stdout.String(), "started r1") {
		t.Errorf("r1 started its command although it handed over before its --grace passed:\n%s", r1.stdout)
	}
}
