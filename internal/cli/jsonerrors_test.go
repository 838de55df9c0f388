package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/natstest"
)

// TestJSONErrors: a command given --json reports the error it ends with as
// one JSON object on standard error, with the message in "error" and the
// exit status in "exit_status", and prints nothing else: a script that asked
// for JSON gets JSON, errors included.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	nothing := "nats://127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"info unknown election", []string{"--server", url, "election", "info", "nosuch", "--json"}, `no election "nosuch" in CHORIA_LEADER_ELECTION`},
		{"list without a broker", []string{"--server", nothing, "--timeout", "2s", "election", "list", "--json"}, "no broker at " + nothing},
		{"stand-down without a name", []string{"--server", url, "election", "stand-down", "--json"}, "election stand-down: accepts 1 arg(s), received 0\nUsage: conclave election stand-down NAME [flags]"},
		{"watch a bad pattern", []string{"--server", url, "election", "watch", "my*", "--json"}, `"my*" has the token "my*"`},
		{"run --once with a bad name", []string{"--server", url, "election", "run", "--once", "--json", "a b", "--", "true"}, "election name: invalid key"},
		{"file with a flag error", []string{"--server", url, "election", "file", "--json", "--bogus", "x", "/tmp/x"}, "unknown flag: --bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclave(t, tc.args...)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			var out struct {
				Time       string `json:"time"`
				Event      string `json:"event"`
				Error      string `json:"error"`
				ExitStatus *int   `json:"exit_status"`
			}
			dec := json.NewDecoder(strings.NewReader(r.stderr))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&out); err != nil {
				t.Fatalf("stderr is not a JSON error object: %v\n%s", err, r.stderr)
			}
			if dec.More() {
				t.Errorf("stderr has more than one JSON object:\n%s", r.stderr)
			}
			if out.Event != "error" || out.Time == "" || out.ExitStatus == nil || *out.ExitStatus != 1 || !strings.Contains(out.Error, tc.want) {
				t.Errorf("error object %+v, want event error, a time, exit_status 1 and an error containing %q", out, tc.want)
			}
			if strings.HasPrefix(out.Error, "conclave:") {
				t.Errorf("error %q starts with conclave:", out.Error)
			}
		})
	}
}

// TestErrorTexts: error messages do not stutter, argument errors show how
// the command is used, and a wildcard inside a token is explained.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{"invalid name", []string{"election", "stand-down", "a b", "--force"},
			[]string{`conclave: election name: invalid key: "a b" contains ' '`}, []string{"election: invalid"}},
		{"missing argument", []string{"election", "stand-down"},
			[]string{"conclave: election stand-down: accepts 1 arg(s), received 0\nUsage: conclave election stand-down NAME [flags]\n(`conclave election stand-down --help` shows"}, []string{"conclave: conclave"}},
		{"too many arguments", []string{"election", "file", "a"},
			[]string{"Usage: conclave election file [flags] NAME PATH"}, nil},
		{"wildcard inside a token", []string{"election", "list", "my*"},
			[]string{`"my*" has the token "my*": * and > must be whole tokens between dots`, "as in my.*"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclave(t, append([]string{"--server", url}, tc.args...)...)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want...)
			for _, w := range tc.notWant {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr contains %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// TestJSONWarnings: with --json, the warnings a command writes to standard
// error are JSON lines too (event "log", level "warning").
func TestJSONWarnings(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	cfgHome := t.TempDir()
	ctxDir := filepath.Join(cfgHome, "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "prod.json"), []byte(`{"url": "`+url+`", "nsc": "nsc://x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := conclaveWith(t, runOpts{env: []string{"XDG_CONFIG_HOME=" + cfgHome}}, "--context", "prod", "election", "list", "--json")
	mustSucceed(t, r)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("no warning about nsc")
	}
	for _, l := range lines {
		var ev struct{ Event, Level, Message string }
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Event != "log" || ev.Level != "warning" || !strings.Contains(ev.Message, "nsc") {
			t.Errorf("stderr line %q is not a JSON warning about nsc (%v)", l, err)
		}
	}
}

// TestRunOnceJSONError: run --once --json that finds another leader logs
// JSON lines only, the last the error it ends with.
func TestRunOnceJSONError(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	campaign(t, jetStream(t, url), "other", "busy").waitLeading(t)
	r := conclave(t, "--server", url, "election", "run", "--once", "--json", "--identity", "r1", "busy", "--", "true")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	for i, l := range lines {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", l, err)
		}
		if i == len(lines)-1 && (ev["event"] != "error" || ev["error"] == "" || ev["exit_status"] != float64(1)) {
			t.Errorf("last line %s, want the error with exit_status 1", l)
		}
	}
}
