package streams

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// natsCLI returns the path of the NATS CLI: $NATS_CLI (CI builds it and sets
// it), else `nats` on the PATH.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NATS_CLI"); p != "" {
		return p
	}
	p, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("no NATS CLI: set NATS_CLI to its path (.ci/run builds it)")
	}
	return p
}

func runNATS(t *testing.T, cli, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append([]string{"--server", url}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestTheNATSCLISeesAndStandsDownOurLeader checks compatibility with the tool
// NATS users already have: `nats kv get` prints our leader's identity, `nats
// kv ls` lists the election, and `nats kv del` forces a stand-down, as
// Choria's documentation describes for `choria kv`.
func TestTheNATSCLISeesAndStandsDownOurLeader(t *testing.T) {
	t.Parallel()
	cli := natsCLI(t)
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "n1.example.net", "my_app", kv, rec.options("n1")...))
	evs := rec.waitFor(t, 5*time.Second, "n1 to win", func(evs []event) bool { return wins(evs, "n1") == 1 })

	if got := strings.TrimSpace(runNATS(t, cli, ts.url(), "kv", "get", bucketName, "my_app", "--raw")); got != "n1.example.net" {
		t.Fatalf("nats kv get --raw printed %q, want the leader's identity", got)
	}
	if out := runNATS(t, cli, ts.url(), "kv", "ls", bucketName); !strings.Contains(out, "my_app") {
		t.Fatalf("nats kv ls does not list the election:\n%s", out)
	}
	runNATS(t, cli, ts.url(), "kv", "del", bucketName, "my_app", "--force")
	evs = rec.waitFor(t, 5*time.Second, "a forced stand-down", func(evs []event) bool { return len(evs) >= 2 })
	if evs[1].cause != CauseDeposed {
		t.Fatalf("after nats kv del: %s", describe(evs))
	}
	if evs[0].term.Valid() {
		t.Fatal("the deposed term is still valid")
	}
}
