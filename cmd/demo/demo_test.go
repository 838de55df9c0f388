package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// demoBinary is built once for all the tests that run it.
var demoBinary struct {
	once sync.Once
	dir  string // made by TestMain, removed after the tests
	path string
	err  error
}

// buildDemo builds the demo binary, once, with the race detector when the
// tests have it, and returns its path.
func buildDemo(t *testing.T) string {
	t.Helper()
	demoBinary.once.Do(func() {
		bin := filepath.Join(demoBinary.dir, "demo")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			demoBinary.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		demoBinary.path = bin
	})
	if demoBinary.err != nil {
		t.Fatal(demoBinary.err)
	}
	return demoBinary.path
}

// line is a line the demo printed, and when the test read it.
type line struct {
	text string
	at   time.Time
}

// process is a running demo whose output (stdout and stderr together) the
// test reads line by line.
type process struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan line
	read  sync.WaitGroup

	mu  sync.Mutex
	all []string // every line read, for failure messages

	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startDemo runs the demo binary with args and extra environment variables.
// It is killed, if still running, when the test ends.
func startDemo(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the demo: %v", err)
	}
	w.Close() // the child has its copy: r reaches EOF when the child exits
	p := &process{t: t, cmd: cmd, stdin: stdin, lines: make(chan line, 1000), exited: make(chan struct{})}
	p.read.Go(func() {
		defer close(p.lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.all = append(p.all, sc.Text())
			p.mu.Unlock()
			p.lines <- line{text: sc.Text(), at: time.Now()}
		}
	})
	go func() {
		p.read.Wait() // Wait must not run before the output is read
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			go func() {
				for range p.lines { // let the reader finish
				}
			}()
			// Stopped as a user stops it, so that it removes its broker's
			// store from the temporary directory; killed if it hangs.
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-p.exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("demo output:\n%s", p.output())
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.all, "\n")
}

// send types a command line into the demo.
func (p *process) send(cmd string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.t.Fatalf("sending %q: %v", cmd, err)
	}
}

// next returns the next line that satisfies match, failing the test when
// none comes within d. Lines that do not match are passed to skip, if not nil.
func (p *process) next(d time.Duration, what string, match func(line) bool, skip func(line)) line {
	p.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("the demo ended its output before %s", what)
			}
			if match(l) {
				return l
			}
			if skip != nil {
				skip(l)
			}
		case <-deadline.C:
			p.t.Fatalf("no %s within %v", what, d)
		}
	}
}

// waitExit waits for the demo to exit and returns its status.
func (p *process) waitExit(d time.Duration) int {
	p.t.Helper()
	go func() {
		for range p.lines { // keep reading so the demo never blocks on output
		}
	}()
	select {
	case <-p.exited:
	case <-time.After(d):
		p.t.Fatalf("the demo did not exit within %v", d)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	default:
		p.t.Fatalf("waiting for the demo: %v", p.err)
		return -1
	}
}

var (
	timeField   = regexp.MustCompile(`^time="([0-9-]+ [0-9:.]+)"`)
	workerField = regexp.MustCompile(`\binstance=(\S+)`)
	metricsLine = regexp.MustCompile(`Metrics: (http://\S+)/metrics`)
	storeNote   = regexp.MustCompile(`store (\S+), removed at exit`)
)

// workerOf returns the instance of the worker a log line is about, or "".
func workerOf(l line) string {
	m := workerField.FindStringSubmatch(l.text)
	if m == nil {
		return ""
	}
	return m[1]
}

// loggedAt returns the time of day a log line was written, by the demo's
// clock.
func loggedAt(t *testing.T, l line) time.Time {
	t.Helper()
	m := timeField.FindStringSubmatch(l.text)
	if m == nil {
		t.Fatalf("no time in %q", l.text)
	}
	at, err := time.Parse("2006-01-02 15:04:05.000", m[1]) // the date too: logs are read days later
	if err != nil {
		t.Fatalf("time in %q: %v", l.text, err)
	}
	return at
}

func isWork(l line) bool { return strings.Contains(l.text, `msg="Doing work as the leader"`) }

func is(msg, worker string) func(line) bool {
	return func(l line) bool {
		return strings.Contains(l.text, `msg="`+msg+`"`) && workerOf(l) == worker
	}
}

// collectWork reads n work lines and checks that one worker did them all,
// about a second apart. It returns that worker's instance.
func collectWork(t *testing.T, p *process, n int, first line) string {
	t.Helper()
	leader, prev := workerOf(first), first
	for i := 0; i < n; i++ {
		l := p.next(5*time.Second, "further work", isWork, nil)
		if w := workerOf(l); w != leader {
			t.Fatalf("%s did work while %s leads: %q", w, leader, l.text)
		}
		// One line per second from one worker: never two within half a
		// second, never a second skipped (generously, on a loaded machine).
		gap := loggedAt(t, l).Sub(loggedAt(t, prev))
		if gap < 0 {
			gap += 24 * time.Hour // past midnight
		}
		if gap < 500*time.Millisecond || gap > 2*time.Second {
			t.Errorf("work lines %v apart, want about 1s", gap.Round(time.Millisecond))
		}
		prev = l
	}
	return leader
}

func TestDemoStepDownHandsOver(t *testing.T) {
	bin := buildDemo(t)
	start := time.Now()
	p := startDemo(t, bin, []string{"WORKERS=5", "NOSPLAY=1"}, "--ttl", "2s", "--metrics", "127.0.0.1:0")

	var metricsURL, store string
	banner := func(l line) {
		if m := metricsLine.FindStringSubmatch(l.text); m != nil {
			metricsURL = m[1]
		}
		if m := storeNote.FindStringSubmatch(l.text); m != nil {
			store = m[1]
		}
	}
	first := p.next(15*time.Second, "work from a leader", isWork, banner)
	a := workerOf(first)
	if !regexp.MustCompile(`^worker-[1-5]\.[0-9a-f]{8}$`).MatchString(a) {
		t.Fatalf("work from worker %q, want worker-1 to worker-5 and the process's part: %q", a, first.text)
	}
	collectWork(t, p, 2, first)

	if metricsURL == "" || store == "" {
		t.Fatalf("the banner named no metrics URL (%q) or store (%q)", metricsURL, store)
	}
	checkHealthz(t, metricsURL)

	// A graceful step-down: another worker leads within milliseconds, and
	// its first line of work comes a second later.
	p.send("s")
	sent := time.Now()
	var aWorkedAfter []string
	lost := false
	next := p.next(5*time.Second, "work from another worker", func(l line) bool {
		return isWork(l) && workerOf(l) != a
	}, func(l line) {
		switch {
		case isWork(l) && lost:
			t.Errorf("%s worked after it lost leadership: %q", a, l.text)
		case isWork(l):
			aWorkedAfter = append(aWorkedAfter, l.text)
		case is("Lost leadership", a)(l):
			lost = true
		}
	})
	if !lost {
		t.Errorf("%s did not log Lost leadership before %s worked", a, workerOf(next))
	}
	// A work line of a's already on its way when s was typed is fine; one
	// after its Lost leadership is not (checked above).
	if len(aWorkedAfter) > 1 {
		t.Errorf("%s kept working after the step-down: %q", a, aWorkedAfter)
	}
	if took := next.at.Sub(sent); took > 3*time.Second {
		t.Errorf("the next leader's first work came %v after the step-down, want about 1s", took.Round(time.Millisecond))
	}
	b := collectWork(t, p, 2, next)
	t.Logf("%s stepped down, %s took over", a, b)

	p.send("q")
	if code := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit status %d after q, want 0", code)
	}
	out := p.output()
	for _, want := range []string{
		fmt.Sprintf(`msg="Lost leadership" cause=released component=worker instance=%s`, b),
		`msg="All workers stopped"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	// The step-down says where the key went: handed over, naming who took
	// it (the workers share one identity and stand apart by instance), or
	// released when no standby took the offer up in time. The election's
	// own line does not call a stop that may hand over a release.
	qa := regexp.QuoteMeta(a)
	handed := regexp.MustCompile(`msg="Handed the key over: [^"]*" component=worker instance=` + qa + ` to=\S+`).MatchString(out)
	released := regexp.MustCompile(`msg="Released the key: [^"]*" component=worker instance=` + qa + `\b`).MatchString(out)
	if handed == released {
		t.Errorf("%s's step-down is logged as handed over %v, released %v: want one of them", a, handed, released)
	}
	if handed && regexp.MustCompile(qa+`: election \S+: \S+ stopped leading \(released\)`).MatchString(out) {
		t.Errorf("%s's hand-over is logged as a release", a)
	}
	if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the embedded broker's store %s is still there: %v", store, err)
	}
	t.Logf("demo ran %v", time.Since(start).Round(time.Millisecond))
}

// checkHealthz asks the demo's /healthz, which must say ok.
func checkHealthz(t *testing.T, base string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("/healthz: %d %q, want 200 ok", resp.StatusCode, body)
	}
	resp, err = client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `conclave_election_leader{election="demo"} 1`) {
		t.Errorf("/metrics does not show the leader:\n%s", body)
	}
}

func TestDemoExitsCleanlyOnSignal(t *testing.T) {
	bin := buildDemo(t)
	p := startDemo(t, bin, []string{"WORKERS=3", "NOSPLAY=1"}, "--ttl", "2s", "--metrics", "")
	won := p.next(15*time.Second, "a leader", func(l line) bool { return strings.Contains(l.text, `msg="Became leader"`) }, nil)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.next(10*time.Second, "the leader's release", is("Lost leadership", workerOf(won)), nil)
	if code := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGINT, want 0", code)
	}
}

func TestDemoBadCommandLine(t *testing.T) {
	var stderr strings.Builder
	code := Run(t.Context(), []string{"--workers", "0"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &stderr)
	if code != 2 {
		t.Errorf("exit status %d for --workers 0, want 2", code)
	}
	if !strings.Contains(stderr.String(), "0 workers") || !strings.Contains(stderr.String(), "demo --help") {
		t.Errorf("stderr does not explain the error: %q", stderr.String())
	}
}

// TestDemoCrashLogsWhatHappened: a crashed leader's log says its term ended
// with its connection, not that it released the key (and then could not),
// and no error is reported for the crash asked for. Every election line
// names its worker in the message, as the workers share the host identity.
func TestDemoCrashLogsWhatHappened(t *testing.T) {
	bin := buildDemo(t)
	p := startDemo(t, bin, []string{"WORKERS=3", "NOSPLAY=1"}, "--ttl", "2s", "--metrics", "")
	first := p.next(15*time.Second, "work from a leader", isWork, nil)
	a := workerOf(first)

	p.send("c")
	p.next(15*time.Second, "work from another worker", func(l line) bool {
		return isWork(l) && workerOf(l) != a
	}, nil)
	p.next(15*time.Second, "the crashed worker rejoining", is("Worker starting", a), nil)
	p.send("q")
	if code := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit status %d after q, want 0", code)
	}

	out := p.output()
	_, afterCrash, ok := strings.Cut(out, "Leader crashing")
	if !ok {
		t.Fatalf("the demo did not log the crash:\n%s", out)
	}
	crashed := func(l string) bool { return workerField.FindStringSubmatch(l) != nil && workerOf(line{text: l}) == a }
	var stopped string
	for _, l := range strings.Split(afterCrash, "\n") {
		if !crashed(l) {
			continue
		}
		if stopped == "" && strings.Contains(l, "stopped leading") {
			stopped = l
		}
		if strings.Contains(l, "could not release") || strings.Contains(l, "Cannot campaign") {
			t.Errorf("the crashed worker %s logged a failure of its own crash: %s", a, l)
		}
		if strings.Contains(l, "Worker starting") {
			break
		}
	}
	switch {
	case stopped == "":
		t.Errorf("the crashed worker %s did not log that it stopped leading", a)
	case strings.Contains(stopped, "(released)"):
		t.Errorf("the crashed worker %s says it released the key: %s", a, stopped)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "component=election") && workerOf(line{text: l}) != "" &&
			!strings.Contains(l, `msg="`+workerOf(line{text: l})+`: `) {
			t.Errorf("an election line does not name its worker in the message: %s", l)
		}
	}
}
