package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFile waits until the file's existence is want, failing after d.
func waitFile(t *testing.T, path string, want bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := os.Stat(path)
		if (err == nil) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s exists: %v after %v, want %v", path, err == nil, d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestElectionFileExistsOnlyWhileLeading: the file appears when file leads,
// holding its identity and token, stays absent while another candidate
// leads, moves to the next leader on a stop, and is removed on SIGTERM with
// status 0; a stale file from an earlier run is removed before campaigning.
func TestElectionFileExistsOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.leader"), filepath.Join(dir, "b.leader")
	if err := os.WriteFile(pathB, []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	a := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fa", "job", pathA)
	a.stderr.waitFor(t, 0, regexp.MustCompile(`fa leads job, token [0-9]+: wrote `))
	waitFile(t, pathA, true, 10*time.Second)
	raw, err := os.ReadFile(pathA)
	if err != nil || !regexp.MustCompile(`^fa [0-9]+\n$`).Match(raw) {
		t.Fatalf("the file holds %q, %v; want the identity and token", raw, err)
	}

	b := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fb", "job", pathB)
	b.stderr.waitFor(t, 0, regexp.MustCompile(`removed .*b\.leader \(left from an earlier run\)`))
	b.stderr.waitFor(t, 0, regexp.MustCompile(`fb campaigning in job`))
	if _, err := os.Stat(pathB); err == nil {
		t.Fatal("the standby's file exists while fa leads")
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(); code != 0 {
		t.Errorf("file exited %d after SIGTERM, want 0", code)
	}
	if _, err := os.Stat(pathA); err == nil {
		t.Error("the leader's file outlived its process")
	}
	// Stopping is not losing: the file goes because of the stop, and the
	// release is said once.
	all := strings.Split(strings.TrimSpace(a.stderr.String()), "\n")
	if last := all[len(all)-1]; !regexp.MustCompile(`conclave: (handed job over to fb, which leads at once|released job \(no standby took it up\)); exiting with status 0$`).MatchString(last) {
		t.Errorf("last line %q, want it to say it handed over or released", last)
	}
	mustContain(t, "stderr", a.stderr.String(), "a.leader (stopping: handing job over)")
	if strings.Contains(a.stderr.String(), "leadership lost") {
		t.Errorf("a stop was logged as leadership lost:\n%s", a.stderr)
	}
	waitFile(t, pathB, true, 10*time.Second) // a released: fb leads at once
	// A standby that stops released nothing.
	pathC := filepath.Join(dir, "c.leader")
	c := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fc", "job", pathC)
	c.stderr.waitFor(t, 0, regexp.MustCompile(`fc campaigning in job`))
	c.signal(syscall.SIGTERM)
	if code := c.wait(); code != 0 {
		t.Errorf("standby file exited %d after SIGTERM, want 0", code)
	}
	mustContain(t, "standby's stderr", c.stderr.String(), "stopped campaigning in job (not leading); exiting with status 0")

	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("file exited %d after SIGINT, want 0", code)
	}
	waitFile(t, pathB, false, time.Second)
}
