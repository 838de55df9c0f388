package cli_test

import (
	"encoding/json"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/conclave-io/conclave/internal/natstest"
)

// TestMissingOrUnknownCommand: a group command without a command, or with an
// unknown one, fails with status 1 instead of printing help and
// succeeding (a typo in a service's start command must not "succeed"), and
// an unknown command gets a suggestion.
func TestMissingOrUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"broker"}, []string{"Available Commands:", "conclave broker needs a command: one of run"}},
		{[]string{"election"}, []string{"Available Commands:", "conclave election needs a command: one of "}},
		{[]string{}, []string{"Available Commands:", "conclave needs a command: one of "}},
		{[]string{"broker", "rnu", "--config", "broker.conf"}, []string{`unknown command "rnu" for "conclave broker": did you mean run?`}},
		{[]string{"election", "lst"}, []string{`unknown command "lst" for "conclave election": did you mean list?`}},
		{[]string{"election", "stand-dwn", "x"}, []string{`did you mean stand-down?`}},
		{[]string{"brokr", "run"}, []string{`unknown command "brokr" for "conclave": did you mean broker?`}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate" for "conclave": use one of broker, `}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := conclave(t, tc.args...)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			if r.stdout != "" {
				t.Errorf("stdout is not empty:\n%s", r.stdout)
			}
			mustContain(t, "stderr", r.stderr, tc.want...)
		})
	}
}

// TestBrokerRunRootConfig: --config before the command configures the
// broker too (it is one flag of the root), and broker run's help lists no
// connection flags, which it would ignore; passing one is an error.
func TestBrokerRunRootConfig(t *testing.T) {
	t.Parallel()
	cfg := brokerConfig(t, -1)
	b := startConclave(t, nil, "--config", cfg, "broker", "run")
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker test-broker ready`))
	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}

	help := conclave(t, "broker", "run", "--help")
	mustSucceed(t, help)
	mustContain(t, "help", help.stdout, "--config FILE")
	for _, flag := range []string{"--server", "--creds", "--context", "--timeout"} {
		if strings.Contains(help.stdout, flag) {
			t.Errorf("broker run --help lists %s, which it ignores:\n%s", flag, help.stdout)
		}
	}
	r := conclave(t, "broker", "run", "--config", cfg, "--server", "nats://127.0.0.1:4222")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "conclave broker run does not take --server")
}

// TestHelpHasExamplesAndNoLocalDocs: every command's help has examples, and
// points to documents by URL, not to docs/ files that a user who ran go
// install does not have.
func TestHelpHasExamplesAndNoLocalDocs(t *testing.T) {
	t.Parallel()
	localDoc := regexp.MustCompile(`(^|[^/])docs/[a-z]+\.md`)
	for _, path := range []string{"", "broker", "broker run", "election", "election list", "election info",
		"election watch", "election stand-down", "election run", "hash-password", "version"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			r := conclave(t, append(strings.Fields(path), "--help")...)
			mustSucceed(t, r)
			mustContain(t, "help", r.stdout, "Examples:\n  conclave ")
			if m := localDoc.FindString(r.stdout); m != "" {
				t.Errorf("help points to the local file %q:\n%s", m, r.stdout)
			}
		})
	}
}

// TestVersion: conclave version and --version print the build the Go
// toolchain recorded: module version, revision when known, Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	v := conclave(t, "version")
	mustSucceed(t, v)
	flag := conclave(t, "--version")
	mustSucceed(t, flag)
	if v.stdout != flag.stdout {
		t.Errorf("version printed %q, --version %q", v.stdout, flag.stdout)
	}
	if !regexp.MustCompile(`^conclave \S+ \((revision [0-9a-f]{12}|revision unknown).*; ` + regexp.QuoteMeta(runtime.Version()) + ` ` + runtime.GOOS + `/` + runtime.GOARCH + `\)\n$`).MatchString(v.stdout) {
		t.Errorf("version printed %q", v.stdout)
	}
	j := conclave(t, "version", "--json")
	mustSucceed(t, j)
	var info struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal([]byte(j.stdout), &info); err != nil || info.Version == "" || info.GoVersion != runtime.Version() {
		t.Errorf("version --json: %v %+v\n%s", err, info, j.stdout)
	}
}

// TestCompleteElectionNames: shell completion offers the bucket's elections
// for a NAME argument, and nothing, silently, when no broker answers.
func TestCompleteElectionNames(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	for _, k := range []string{"billing", "backup", "reports"} {
		if _, err := kv.Create(testCtx(t), k, []byte("n1")); err != nil {
			t.Fatal(err)
		}
	}
	r := conclave(t, "--server", url, "__complete", "election", "info", "b")
	mustSucceed(t, r)
	if r.stdout != "backup\nbilling\n:4\n" {
		t.Errorf("completion of info b printed %q, want backup, billing and :4", r.stdout)
	}
	r = conclave(t, "--server", url, "__complete", "election", "run", "")
	mustSucceed(t, r)
	mustContain(t, "completion of run", r.stdout, "backup\nbilling\nreports\n")

	r = conclave(t, "--server", "nats://127.0.0.1:"+strconv.Itoa(natstest.FreePort(t)), "__complete", "election", "stand-down", "")
	mustSucceed(t, r)
	if r.stdout != ":4\n" {
		t.Errorf("completion without a broker printed %q, want only the directive", r.stdout)
	}
	if strings.Contains(r.stderr, "no broker") {
		t.Errorf("completion without a broker complained:\n%s", r.stderr)
	}

	script := conclave(t, "completion", "bash")
	mustSucceed(t, script)
	mustContain(t, "bash completion", script.stdout, "__start_conclave")
}

// TestRunHelpIsTidy: election run --help says no "(default 0s)" (a zero
// duration's usage says what 0 means, or its default in words), and every
// line fits 80 columns, flag usages wrapped under their start, rather than
// left for the terminal to break anywhere.
func TestRunHelpIsTidy(t *testing.T) {
	t.Parallel()
	r := conclave(t, "election", "run", "--help")
	mustSucceed(t, r)
	if strings.Contains(r.stdout, "(default 0s)") {
		t.Errorf("run --help says (default 0s):\n%s", r.stdout)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a line of run --help has %d columns, want at most 80: %q", n, l)
		}
	}
	mustContain(t, "run --help", r.stdout, "--min-term duration", "--lead-timeout duration", "(default 10s)")
}
