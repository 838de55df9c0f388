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
// status 0; a stale file from an earlier run (of a term no longer running)
// is removed before campaigning.
func TestElectionFileExistsOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.leader"), filepath.Join(dir, "b.leader")
	if err := os.WriteFile(pathB, []byte("fb 12345\n"), 0o644); err != nil { // a term long gone
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

// TestElectionFileRemovesOnlyWhatItWrote: a path that holds anything but a
// leader file, or is a directory, is refused before campaigning and left
// as it was; a copy of the same identity started with the leader's path
// leaves the leader's file alone, at its start and as it stops.
func TestElectionFileRemovesOnlyWhatItWrote(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	dir := t.TempDir()
	precious := filepath.Join(dir, "important.txt")
	if err := os.WriteFile(precious, []byte("important data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	others := filepath.Join(dir, "others.leader")
	if err := os.WriteFile(others, []byte("version 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, says := range map[string]string{
		precious: "was not written by election file",
		emptyDir: "is a directory, not a file",
		others:   "holds the leader file of version, not of fz",
	} {
		p := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fz", "guarded", path)
		if code := p.wait(); code == 0 {
			t.Errorf("file with PATH %s exited 0, want a refusal", path)
		}
		mustContain(t, "stderr", p.stderr.String(), says)
	}
	if raw, err := os.ReadFile(precious); err != nil || string(raw) != "important data\n" {
		t.Errorf("the file given as PATH holds %q, %v after the refusal, want it untouched", raw, err)
	}
	if raw, err := os.ReadFile(others); err != nil || string(raw) != "version 3\n" {
		t.Errorf("the file of another identity holds %q, %v after the refusal, want it untouched", raw, err)
	}
	if _, err := os.Stat(emptyDir); err != nil {
		t.Errorf("the directory given as PATH: %v after the refusal, want it untouched", err)
	}

	shared := filepath.Join(dir, "fw.leader")
	a := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fw", "shared", shared)
	a.stderr.waitFor(t, 0, regexp.MustCompile(`fw leads shared, token [0-9]+: wrote `))
	written, err := os.ReadFile(shared)
	if err != nil {
		t.Fatal(err)
	}
	b := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fw", "shared", shared)
	b.stderr.waitFor(t, 0, regexp.MustCompile(`belongs to the running term of fw/`))
	b.stderr.waitFor(t, 0, regexp.MustCompile(`fw campaigning in shared`))
	b.signal(syscall.SIGTERM)
	if code := b.wait(); code != 0 {
		t.Errorf("the standby copy exited %d after SIGTERM, want 0", code)
	}
	if raw, err := os.ReadFile(shared); err != nil || string(raw) != string(written) {
		t.Fatalf("the leader's file holds %q, %v after a standby copy with its path came and went, want %q", raw, err, written)
	}
	if strings.Contains(b.stderr.String(), "removed") {
		t.Errorf("the standby copy removed a file:\n%s", b.stderr)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(); code != 0 {
		t.Errorf("the leader exited %d after SIGTERM, want 0", code)
	}
	waitFile(t, shared, false, time.Second)
}

// TestElectionFileRemovesItsLeftoverFromACrash: a file command killed
// while leading leaves its file; run again with the same path, it finds
// the file names a term still running, not renewed since: its own from
// before the crash. It removes the file before that term's lease runs out
// (here as it stops, waiting for that), so that no other host leads while
// this one's file says it does.
func TestElectionFileRemovesItsLeftoverFromACrash(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	path := filepath.Join(t.TempDir(), "fa.leader")
	a := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fa", "crashed", path)
	a.stderr.waitFor(t, 0, regexp.MustCompile(`fa leads crashed, token [0-9]+: wrote `))
	a.signal(syscall.SIGKILL)
	a.wait()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the killed leader's file: %v, want it left behind", err)
	}
	again := startConclave(t, nil, "--server", url, "election", "file", "--identity", "fa", "crashed", path)
	again.stderr.waitFor(t, 0, regexp.MustCompile(`belongs to the running term of fa/`))
	again.signal(syscall.SIGTERM)
	if code := again.wait(); code != 0 {
		t.Errorf("file exited %d after SIGTERM, want 0", code)
	}
	mustContain(t, "stderr", again.stderr.String(), "which is no longer renewed")
	if raw, err := os.ReadFile(path); err == nil {
		t.Fatalf("the crashed term's file outlived the run that found it: %q", raw)
	}
}
