package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// TestCopiesOfOneIdentityInInfoAndWatch: three copies of one identity (the
// demo's shape) are three candidates to info, with the one leading marked,
// and a hand-over between two of them is a hand-over to watch, from
// instance to instance, with the new term's token.
func TestCopiesOfOneIdentityInInfoAndWatch(t *testing.T) {
	// Not parallel: under load stand-down --to reported the hand-over's revision as the new term's token.
	url := startBroker(t, 2*time.Second)
	js := jetStream(t, url)
	w1 := campaign(t, js, "vm", "demo", streams.WithInstance("worker-1"))
	w1.waitLeading(t)
	campaign(t, js, "vm", "demo", streams.WithInstance("worker-2"))
	w3 := campaign(t, js, "vm", "demo", streams.WithInstance("worker-3"))
	waitInstances(t, url, "demo", 3)

	r := conclave(t, "--server", url, "election", "info", "demo")
	mustSucceed(t, r)
	mustContain(t, "stdout", r.stdout, "Candidates that answer: 3", "  vm/worker-1", "  vm/worker-2", "  vm/worker-3")
	if n := strings.Count(r.stdout, ", leader,"); n != 1 || !regexp.MustCompile(`vm/worker-1 +priority 0, healthy, leader,`).MatchString(r.stdout) {
		t.Errorf("info marks %d candidates as leader, want worker-1 alone:\n%s", n, r.stdout)
	}
	if !regexp.MustCompile(`Leader: +vm/worker-1, token \d+`).MatchString(r.stdout) {
		t.Errorf("info does not name the leading instance and its token:\n%s", r.stdout)
	}

	watch := startConclave(t, nil, "--server", url, "election", "watch", "demo")
	watch.stdout.waitFor(t, 0, regexp.MustCompile(`  current\s+demo: vm/worker-1 leads, revision \d+ \(token \d+\)$`))
	r = conclave(t, "--server", url, "election", "stand-down", "--to", "worker-3", "--force", "--wait", "20s", "demo")
	mustSucceed(t, r)
	term := w3.waitLeading(t)
	watch.stdout.waitFor(t, 0, regexp.MustCompile(`  elected\s+demo: handed over from vm/worker-1 to vm/worker-3, token `+itoa(term.Token())+`$`))
	mustContain(t, "stdout", r.stdout, "vm/worker-3 leads demo now, token "+itoa(term.Token()))
	watch.signal(syscall.SIGINT)
	if code := watch.wait(); code != 0 {
		t.Errorf("watch exited with status %d, want 0", code)
	}
}

// TestInfoNamesTheCopyThatReleased: info of a key a copy released names
// the copy, identity/instance, as watch does, and its JSON gives the
// instance as released_by_instance, not as a leader's instance.
func TestInfoNamesTheCopyThatReleased(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 10*time.Second)
	c := campaign(t, jetStream(t, url), "rel", "released", streams.WithInstance("w9"))
	c.waitLeading(t)
	c.stop() // no standby: the key is released
	r := conclave(t, "--server", url, "election", "info", "released")
	mustSucceed(t, r)
	mustContain(t, "stdout", r.stdout, "none: released by rel/w9 (it stepped down")
	r = conclave(t, "--server", url, "election", "info", "released", "--json")
	mustSucceed(t, r)
	var got struct {
		Elections []struct {
			Leader             string `json:"leader"`
			Instance           string `json:"instance"`
			ReleasedBy         string `json:"released_by"`
			ReleasedByInstance string `json:"released_by_instance"`
		} `json:"elections"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Elections) != 1 {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	if e := got.Elections[0]; e.Leader != "" || e.Instance != "" || e.ReleasedBy != "rel" || e.ReleasedByInstance != "w9" {
		t.Errorf("info --json of a release by rel/w9: %+v, want released_by rel, released_by_instance w9, no leader or instance", e)
	}
}

// TestStandDownToAnUnhealthyCandidateIsRefused: stand-down --to a candidate
// whose health check fails is refused with the reason, and the leader goes
// on leading: the hand-over would leave the election without a leader.
func TestStandDownToAnUnhealthyCandidateIsRefused(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	js := jetStream(t, url)
	n2 := campaign(t, js, "n2", "jobs")
	term := n2.waitLeading(t)
	notReady := func(context.Context) error { return errors.New("not ready") }
	campaign(t, js, "n1", "jobs", streams.WithHealthCheck(notReady, time.Second))
	waitStanding(t, url, "jobs", "n1", "n2")
	r := conclave(t, "--server", url, "election", "stand-down", "--to", "n1", "--force", "jobs")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "n1 is unhealthy in jobs", "n2/"+n2.e.Instance()+" keeps leading")
	if !n2.e.IsLeader() || n2.e.Term() == nil || n2.e.Term().Token() != term.Token() {
		t.Errorf("after the refused hand-over n2 leads %v with %v, want its term %d going on", n2.e.IsLeader(), n2.e.Term(), term.Token())
	}
}

// waitInstances waits until n candidates answer who is standing in key.
func waitInstances(t *testing.T, url, key string, n int) {
	t.Helper()
	nc := jetStream(t, url).Conn()
	deadline := time.Now().Add(eventTimeout)
	for {
		cs, err := standing.Standing(testCtx(t), nc, "CHORIA_LEADER_ELECTION", key, 0)
		if err == nil && len(cs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d candidates answer in %s, want %d: %+v (%v)", len(cs), key, n, cs, err)
		}
	}
}

// TestStandDownToIdentitySlashInstance: stand-down --to takes a candidate
// as info names it among copies of one identity, identity/instance, and
// hands over to that copy.
func TestStandDownToIdentitySlashInstance(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 10*time.Second)
	js := jetStream(t, url)
	campaign(t, js, "vm", "demo", streams.WithInstance("worker-1")).waitLeading(t)
	campaign(t, js, "vm", "demo", streams.WithInstance("worker-2"))
	w7 := campaign(t, js, "vm", "demo", streams.WithInstance("worker-7"))
	waitInstances(t, url, "demo", 3)

	r := conclave(t, "--server", url, "election", "stand-down", "--to", "vm/worker-7", "--force", "--wait", "20s", "demo")
	mustSucceed(t, r)
	term := w7.waitLeading(t)
	mustContain(t, "stdout", r.stdout, "vm/worker-7 leads demo now, token "+itoa(term.Token()))
}

// TestStandDownToACopyOfAnotherIdentity: --to identity/instance lands on
// that candidate where candidates of other identities, the leader among
// them, have the same instance name.
func TestStandDownToACopyOfAnotherIdentity(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 10*time.Second)
	js := jetStream(t, url)
	campaign(t, js, "a", "demo", streams.WithInstance("w1")).waitLeading(t)
	b := campaign(t, js, "b", "demo", streams.WithInstance("w1"))
	campaign(t, js, "c", "demo", streams.WithInstance("w1"))
	waitInstances(t, url, "demo", 3)

	r := conclave(t, "--server", url, "election", "stand-down", "--to", "b/w1", "--force", "--wait", "20s", "demo")
	mustSucceed(t, r)
	term := b.waitLeading(t)
	mustContain(t, "stdout", r.stdout, "a/w1 handed demo over to b/w1.", "b/w1 leads demo now, token "+itoa(term.Token()))
}

// TestStandDownAndWatchNameCopies: among copies of one identity, stand-down
// and watch name the leader as identity/instance, and a copy of the removed
// leader's identity that takes over leads "now", not "again".
func TestStandDownAndWatchNameCopies(t *testing.T) {
	t.Parallel()
	// A TTL long enough for the hung copy's key to outlast the setup.
	url := startBroker(t, 10*time.Second)
	js := jetStream(t, url)
	// worker-1 is a copy that holds the key and stops renewing it (it
	// hung): only worker-2 can take over after the stand-down.
	held := nats.NewMsg("$KV." + bucket.Name + ".demo")
	held.Header.Set(keymsg.InstanceHeader, "worker-1")
	held.Data = []byte("vm")
	if _, err := js.PublishMsg(testCtx(t), held, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatal(err)
	}
	watch := startConclave(t, nil, "--server", url, "election", "watch", "demo")
	asJSON := startConclave(t, nil, "--server", url, "election", "watch", "demo", "--json")
	i, _ := watch.stdout.waitFor(t, 0, regexp.MustCompile(`  current\s+demo: vm/worker-1 leads, `))
	asJSON.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"current"`))
	campaign(t, js, "vm", "demo", streams.WithInstance("worker-2"))
	waitInstances(t, url, "demo", 1)

	r := conclaveWith(t, runOpts{stdin: "n\n"}, "--server", url, "election", "stand-down", "demo")
	mustContain(t, "stderr", r.stderr, "Really force vm/worker-1 to stand down from demo? [y/N]", "not confirmed: vm/worker-1 still leads demo")

	r = conclave(t, "--server", url, "election", "stand-down", "--force", "--wait", "20s", "demo")
	mustSucceed(t, r)
	mustContain(t, "stdout", r.stdout, ": vm/worker-1 must stand down.")
	// A removed leader sits the takeover out: the other copy takes over,
	// which is another candidate, not the same one again.
	mustContain(t, "stdout", r.stdout, "vm/worker-2 leads demo now, token ")
	watch.stdout.waitFor(t, i, regexp.MustCompile(`  removed\s+demo: key removed while vm/worker-1 led, revision \d+: a forced stand-down$`))
	watch.stdout.waitFor(t, i, regexp.MustCompile(`  (elected|taking)\s+demo: vm/worker-\d (leads|took the key)`))
	_, m := asJSON.stdout.waitFor(t, 0, regexp.MustCompile(`^(\{.*"event":"removed".*\})$`))
	var line struct {
		PreviousLeader   string `json:"previous_leader"`
		PreviousInstance string `json:"previous_leader_instance"`
	}
	if err := json.Unmarshal([]byte(m[1]), &line); err != nil || line.PreviousLeader != "vm" || line.PreviousInstance != "worker-1" {
		t.Errorf("removed line %s: %v; want previous_leader vm and previous_leader_instance worker-1", m[1], err)
	}
}

// TestRunNamesCopies: run says its instance as it starts, and names the
// copy of an identity it hands over to as identity/instance.
func TestRunNamesCopies(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	run := startConclave(t, nil, "--server", url, "election", "run", "--identity", "vm", "--grace", "0", "job", "sleep", "600")
	_, m := run.stderr.waitFor(t, 0, regexp.MustCompile(`vm campaigning in job \(identity from --identity, instance ([0-9a-f]+): .* lists it as vm/([0-9a-f]+);`))
	if m[1] != m[2] {
		t.Errorf("run names its instance %s, then %s", m[1], m[2])
	}
	run.stderr.waitFor(t, 0, regexp.MustCompile(`vm leads job, token \d+`))
	campaign(t, jetStream(t, url), "vm", "job", streams.WithInstance("worker-9"))
	waitInstances(t, url, "job", 2)
	run.signal(syscall.SIGINT)
	if code := run.wait(); code != 0 {
		t.Errorf("run exited %d after SIGINT, want 0", code)
	}
	mustContain(t, "stderr", run.stderr.String(), "handed job over to vm/worker-9, which leads at once")
}
