package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/cli"
)

// TestNarrowUserListsAndWatchesAPattern: a user that may campaign only in
// app-a.> is refused list and a bare watch (both read every election) with
// an error saying so and what to pass instead, not a timeout; given the
// pattern app-a.> both work, showing that user's elections and none other,
// and the watch follows an election that begins later.
func TestNarrowUserListsAndWatchesAPattern(t *testing.T) {
	t.Parallel()
	u := cli.StartUsersBroker(t)
	admin := u.JetStream(t, "admin")
	campaign(t, admin, "a-1", "app-a.cron").waitLeading(t)
	campaign(t, admin, "b-1", "app-b.cron").waitLeading(t)
	conf := u.Conf["app-a"]

	for _, args := range [][]string{{"election", "list"}, {"election", "watch"}} {
		r := conclave(t, append([]string{"--config", conf, "--timeout", "2s"}, args...)...)
		if r.code != 1 {
			t.Errorf("%s as app-a exited %d, want 1", strings.Join(args, " "), r.code)
		}
		mustContain(t, strings.Join(args, " ")+"'s error", r.stderr,
			`the user "app-a" (logged in by --config `+conf+`) may not read every election`, "pass a pattern of the elections it may read",
			"`conclave "+strings.Join(args, " ")+" 'app-a.>'`", "permission denied")
		if strings.Contains(r.stderr, "deadline exceeded") || strings.Contains(r.stderr, "watching every election") {
			t.Errorf("%s: the refusal reads as a timeout or a watch that began:\n%s", strings.Join(args, " "), r.stderr)
		}
	}

	// In a folder holding app-a's conclave.conf, --server says where to
	// connect but the file still logs in: the error says so.
	dir := t.TempDir()
	raw, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conclave.conf"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	r := conclaveWith(t, runOpts{dir: dir}, "--server", u.URL, "--timeout", "2s", "election", "list")
	if r.code != 1 {
		t.Errorf("list as app-a by ./conclave.conf exited %d, want 1", r.code)
	}
	mustContain(t, "list's error", r.stderr, `the user "app-a" (logged in by `, `conclave.conf, the configuration file found as --config was not given`)

	r = conclave(t, "--config", conf, "election", "list", "app-a.>")
	mustSucceed(t, r)
	mustContain(t, "list app-a.>", r.stdout, "app-a.cron", "a-1", "1 election matching app-a.> in")
	if strings.Contains(r.stdout, "app-b") {
		t.Errorf("list app-a.> shows another user's election:\n%s", r.stdout)
	}
	r = conclave(t, "--config", conf, "election", "list", "app-a.none.>")
	mustSucceed(t, r)
	mustContain(t, "list app-a.none.>", r.stdout, "No elections matching app-a.none.> in CHORIA_LEADER_ELECTION")
	r = conclave(t, "--config", conf, "election", "list", "app-a.*.x>")
	if r.code != 1 || !strings.Contains(r.stderr, "election pattern") {
		t.Errorf("a bad pattern: exit %d, stderr %q; want 1 and an error about the pattern", r.code, r.stderr)
	}

	w := startConclave(t, nil, "--config", conf, "election", "watch", "app-a.>")
	w.stderr.waitFor(t, 0, regexp.MustCompile(`watching the elections matching app-a\.> in`))
	w.stdout.waitFor(t, 0, regexp.MustCompile(`current\s+app-a\.cron: a-1/[0-9a-f]+ leads`))
	a2 := campaign(t, admin, "a-2", "app-a.new")
	a2.waitLeading(t)
	w.stdout.waitFor(t, 0, regexp.MustCompile(`elected\s+app-a\.new: a-2/`+a2.e.Instance()+` leads, token \d+`))
	w.signal(syscall.SIGINT)
	if code := w.wait(); code != 0 {
		t.Errorf("watch app-a.> exited %d after SIGINT, want 0", code)
	}
	if strings.Contains(w.stdout.String(), "app-b") {
		t.Errorf("watch app-a.> shows another user's election:\n%s", w.stdout)
	}
}

// TestNarrowUserReadingAnotherElection: reading an election the user may
// not read reports the broker's refusal, naming the refused watch, rather
// than a timeout.
func TestNarrowUserReadingAnotherElection(t *testing.T) {
	t.Parallel()
	u := cli.StartUsersBroker(t)
	for _, args := range [][]string{{"election", "info", "app-b.cron"}, {"election", "watch", "app-b.cron"}} {
		r := conclave(t, append([]string{"--config", u.Conf["app-a"], "--timeout", "2s"}, args...)...)
		if r.code != 1 {
			t.Errorf("%s as app-a exited %d, want 1", strings.Join(args, " "), r.code)
		}
		mustContain(t, strings.Join(args, " ")+"'s error", r.stderr, "permission denied", "reading election app-b.cron",
			"$JS.API.CONSUMER.CREATE.KV_CHORIA_LEADER_ELECTION.", ".$KV.CHORIA_LEADER_ELECTION.app-b.cron")
		if strings.Contains(r.stderr, "deadline exceeded") {
			t.Errorf("%s: the refusal reads as a timeout:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
}

// TestNonAdminInfoPrintsNoRawNATSError: info as a user who may read every
// election but not the account's JetStream information (no admin) works,
// and its refused account request leaves no raw nats.go line on stderr
// (nats.go prints one for a connection without an error handler); neither
// does a refused list.
func TestNonAdminInfoPrintsNoRawNATSError(t *testing.T) {
	t.Parallel()
	u := cli.StartUsersBroker(t)
	campaign(t, u.JetStream(t, "admin"), "a-1", "app-a.cron").waitLeading(t)
	rawLine := regexp.MustCompile(`(?m)^nats: |Permissions Violation for Publish to "\$JS\.API\.INFO"|on connection \[\d+\]`)

	r := conclave(t, "--config", u.Conf["dash"], "--timeout", "2s", "election", "info", "app-a.cron")
	mustSucceed(t, r)
	mustContain(t, "info as dash", r.stdout, "app-a.cron", "a-1")
	if rawLine.MatchString(r.stderr) {
		t.Errorf("info as dash printed nats.go's raw error:\n%s", r.stderr)
	}

	r = conclave(t, "--config", u.Conf["app-a"], "--timeout", "2s", "election", "list")
	if r.code != 1 {
		t.Errorf("list as app-a exited %d, want 1", r.code)
	}
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "conclave: ") {
		t.Errorf("list as app-a: stderr has %d lines, want its one error:\n%s", len(lines), r.stderr)
	}
}

// TestRefusalsDoNotWaitForTheTimeout: the broker answers a refused request
// with silence, but the CLI learns of the refusal at once from the
// connection and does not wait out --timeout: a refused list or watch of
// every election, a refused read of one election, and info's refused
// request for the account's limits (which info goes without), and a
// refused forced stand-down.
func TestRefusalsDoNotWaitForTheTimeout(t *testing.T) {
	t.Parallel()
	u := cli.StartUsersBroker(t)
	admin := u.JetStream(t, "admin")
	campaign(t, admin, "a-1", "app-a.cron").waitLeading(t)
	campaign(t, admin, "a-2", "app-a.cron")
	// a-2 stands, so that a hand-over to it is asked of the leader.
	waitInfoSays(t, u.Conf["dash"], "app-a.cron", "a-2")
	const timeout, most = 40 * time.Second, 20 * time.Second
	for _, tc := range []struct {
		user string
		args []string
		code int
	}{
		{"app-a", []string{"election", "list"}, 1},
		{"app-a", []string{"election", "watch"}, 1},
		{"app-a", []string{"election", "info", "app-b.cron"}, 1},
		{"dash", []string{"election", "info", "app-a.cron"}, 0},
		// dash may read app-a.cron but not write it.
		{"dash", []string{"election", "stand-down", "--force", "app-a.cron"}, 1},
		// Nor ask its leader to hand it over.
		{"dash", []string{"election", "stand-down", "--force", "--to", "a-2", "app-a.cron"}, 1},
	} {
		began := time.Now()
		r := conclave(t, append([]string{"--config", u.Conf[tc.user], "--timeout", timeout.String()}, tc.args...)...)
		took := time.Since(began)
		if r.code != tc.code {
			t.Errorf("%s as %s exited %d, want %d", strings.Join(tc.args, " "), tc.user, r.code, tc.code)
		}
		if tc.code == 1 {
			mustContain(t, strings.Join(tc.args, " ")+"'s error", r.stderr, "permission denied")
		}
		if took > most {
			t.Errorf("%s as %s took %v: it waited for --timeout %v instead of seeing the refusal", strings.Join(tc.args, " "), tc.user, took, timeout)
		}
	}
}

// TestSecureSetupAppAListCommand: the command the secure setup of
// docs/security.md gives app-a ("The same file works with the CLI: `…`")
// works as written, with app-a's configuration file: app-a may not read
// every election, so the command must name a pattern it may read.
func TestSecureSetupAppAListCommand(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("The same file works with the CLI:\\s+`([^`]+)`").FindSubmatch(raw)
	if m == nil {
		t.Fatal("docs/security.md no longer says which CLI command works with app-a's file")
	}
	u := cli.StartUsersBroker(t)
	campaign(t, u.JetStream(t, "admin"), "a-1", "app-a.cron").waitLeading(t)
	args := strings.Fields(string(m[1]))
	if args[0] != "conclave" {
		t.Fatalf("docs/security.md's command %q does not run conclave", m[1])
	}
	args = args[1:]
	for i, a := range args {
		a = strings.Trim(a, "'")
		if a == "conclave.conf" {
			a = u.Conf["app-a"]
		}
		args[i] = a
	}
	r := conclave(t, args...)
	mustSucceed(t, r)
	mustContain(t, "stdout", r.stdout, "app-a.cron")
}

// TestRefusedLoginSaysItOnce: a refused login reads "conclave: cannot log
// in to the broker: …", not "conclave: conclave: cannot log in …".
func TestRefusedLoginSaysItOnce(t *testing.T) {
	t.Parallel()
	u := cli.StartUsersBroker(t)
	raw, err := os.ReadFile(u.Conf["app-a"])
	if err != nil {
		t.Fatal(err)
	}
	conf := writeFile(t, "nosuch.conf", strings.Replace(string(raw), "plugin.nats.user = app-a", "plugin.nats.user = nosuch", 1))
	r := conclave(t, "--config", conf, "election", "list", "app-a.>")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "cannot log in to the broker")
	if strings.Contains(r.stderr, "conclave: conclave:") {
		t.Errorf("the error stutters:\n%s", r.stderr)
	}
}
