package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/bucket"
)

// natsCLI returns the path of the NATS CLI: $NATS_CLI (CI builds it and sets
// it; ../shared/tools/nats-cli prints its path), else `nats` on the PATH.
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

// runNATS runs the NATS CLI against url, with no context of the machine's.
func runNATS(t *testing.T, cli, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), eventTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"--server", url}, args...)...)
	cmd.Env = cliEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestWhatTheNATSCLIWritesIsARemoval writes to election keys with the tool
// NATS users already have and checks that list and info read each message
// as the election does: `nats kv put KEY ""`, `nats kv del` and `nats kv
// purge` are removals (a forced stand-down), not releases; only a holder's
// release marker (published raw here) is a release.
func TestWhatTheNATSCLIWritesIsARemoval(t *testing.T) {
	t.Parallel()
	cli := natsCLI(t)
	url := startBroker(t, time.Minute)
	b := bucket.Name
	for _, key := range []string{"emptied", "deleted", "purged", "released"} {
		runNATS(t, cli, url, "kv", "create", b, key, "n1.example.net")
	}
	runNATS(t, cli, url, "kv", "put", b, "emptied", "")
	runNATS(t, cli, url, "kv", "del", b, "deleted", "--force")
	runNATS(t, cli, url, "kv", "purge", b, "purged", "--force")
	runNATS(t, cli, url, "pub", "$KV."+b+".released", "released by n1.example.net", "-H", "KV-Operation:DEL")

	r := conclave(t, "--server", url, "election", "list", "--json")
	mustSucceed(t, r)
	var out listOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for _, e := range out.Elections {
		got[e.Election] = e.State + " " + e.ReleasedBy
	}
	want := map[string]string{
		"emptied":  "removed ",
		"deleted":  "removed ",
		"purged":   "removed ",
		"released": "released n1.example.net",
	}
	for key, w := range want {
		if got[key] != w {
			t.Errorf("%s is %q, want %q (all: %q)", key, got[key], w, got)
		}
	}
	r = conclave(t, "--server", url, "election", "list")
	mustSucceed(t, r)
	mustContain(t, "list", r.stdout, "(released by n1.example.net)")
	if n := strings.Count(r.stdout, "(removed)"); n != 3 {
		t.Errorf("list shows %d removed keys, want 3:\n%s", n, r.stdout)
	}
	r = conclave(t, "--server", url, "election", "info", "purged")
	mustSucceed(t, r)
	mustContain(t, "info purged", r.stdout, "none: removed (purged)")
}

// TestNATSCLIShowsBucketLimits: what the README says `nats stream info`
// shows of a bucket a broker provisioned.
func TestNATSCLIShowsBucketLimits(t *testing.T) {
	t.Parallel()
	cli := natsCLI(t)
	url := startBroker(t, time.Minute)
	out := runNATS(t, cli, url, "stream", "info", "KV_"+bucket.Name)
	for _, want := range []string{"Maximum Consumers: 1,000,000", "Allows Per-Message TTL: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("nats stream info does not say %q:\n%s", want, out)
		}
	}
}
