package cli_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
	watch.stdout.waitFor(t, 0, regexp.MustCompile(`  current\s+demo: vm leads, revision \d+ \(token \d+\)$`))
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
	mustContain(t, "stderr", r.stderr, "n1 is unhealthy in jobs", "n2 keeps leading")
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
