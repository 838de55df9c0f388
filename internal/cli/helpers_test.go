package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// eventTimeout bounds every wait for something to happen. It is generous:
// the machine is shared and runs the race detector.
const eventTimeout = 30 * time.Second

// cliEnv is the environment the binary runs in: the test's, without NATS or
// Conclave settings, and with a home and config directory of its own so that
// no NATS CLI context of the machine is picked up.
func cliEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "NATS_"), strings.HasPrefix(name, "CONCLAVE_"),
			name == "HOME", name == "XDG_CONFIG_HOME":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	if os.Getenv("GORACE") == "" {
		// A race-built binary sleeps a second as it exits (for reports from
		// other goroutines to finish): a tenth is enough for those, and the
		// package runs the binary hundreds of times.
		env = append(env, "GORACE=atexit_sleep_ms=100")
	}
	return append(env, extra...)
}

// result is how a finished conclave command went.
type result struct {
	stdout, stderr string
	code           int
}

// runOpts change how conclave runs.
type runOpts struct {
	stdin string
	// devNull gives the command /dev/null as its standard input, a
	// character device as a terminal is, instead of stdin.
	devNull bool
	env     []string // added to cliEnv
	dir     string   // the working directory; "" for the test's
}

// conclave runs the binary with args to completion.
func conclave(t *testing.T, args ...string) result {
	t.Helper()
	return conclaveWith(t, runOpts{}, args...)
}

func conclaveWith(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*eventTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, conclaveBin, args...)
	cmd.Env = cliEnv(t, o.env...)
	cmd.Dir = o.dir
	cmd.Stdin = strings.NewReader(o.stdin)
	if o.devNull {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("conclave %s: %v", strings.Join(args, " "), err)
	}
	checkNoRace(t, r.stderr)
	t.Logf("conclave %s → %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// checkNoRace fails the test when the race detector reported a race in the
// binary.
func checkNoRace(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "WARNING: DATA RACE") {
		t.Errorf("the race detector found a race in conclave:\n%s", stderr)
	}
}

// mustSucceed fails the test unless r exited with status 0.
func mustSucceed(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
}

// lines collects what a process writes, line by line, and lets a test wait
// for a line.
type lines struct {
	mu      sync.Mutex
	partial []byte
	all     []string
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.all = append(l.all, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *lines) snapshot() ([]string, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...), l.changed
}

func (l *lines) String() string {
	all, _ := l.snapshot()
	return strings.Join(all, "\n")
}

// waitFor waits for the first line after the first skip lines that matches
// re, and returns its index and submatches.
func (l *lines) waitFor(t *testing.T, from int, re *regexp.Regexp) (int, []string) {
	t.Helper()
	deadline := time.NewTimer(eventTimeout)
	defer deadline.Stop()
	for {
		all, changed := l.snapshot()
		for i := from; i < len(all); i++ {
			if m := re.FindStringSubmatch(all[i]); m != nil {
				return i, m
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no line matching %q within %v; got:\n%s", re, eventTimeout, strings.Join(all, "\n"))
		}
	}
}

// proc is a conclave process running in the background.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdout *lines
	stderr *lines
	done   chan struct{}
	code   int
}

// startConclave starts the binary with args in the background; it is killed
// when the test ends if it still runs.
func startConclave(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: strings.Join(args, " "), stdout: newLines(), stderr: newLines(), done: make(chan struct{})}
	p.cmd = exec.Command(conclaveBin, args...)
	p.cmd.Env = cliEnv(t, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting conclave %s: %v", p.name, err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			p.code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		default:
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		checkNoRace(t, p.stderr.String())
		t.Logf("conclave %s\nstdout:\n%s\nstderr:\n%s", p.name, p.stdout, p.stderr)
	})
	return p
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to conclave %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(eventTimeout):
		p.t.Fatalf("conclave %s still runs after %v\nstdout:\n%s\nstderr:\n%s", p.name, eventTimeout, p.stdout, p.stderr)
		return 0
	}
}

// startBroker starts a Conclave broker whose election bucket has the given
// TTL and returns its client URL.
func startBroker(t *testing.T, ttl time.Duration) string {
	t.Helper()
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = ttl })
	return b.ClientURL()
}

// plainServer starts a nats-server that is not a Conclave broker: with
// JetStream, or without when js is false, and no election bucket.
func plainServer(t *testing.T, js bool, opts ...func(*server.Options)) string {
	t.Helper()
	o := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: js, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
	}
	for _, opt := range opts {
		opt(o)
	}
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready for connections")
	}
	return srv.ClientURL()
}

// jetStream connects to url and returns a JetStream context, closed when the
// test ends.
func jetStream(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	_, js := natstest.Connect(t, url, opts...)
	return js
}

// electionBucket opens the election bucket on the broker at url.
func electionBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	kv, err := jetStream(t, url).KeyValue(testCtx(t), bucket.Name)
	if err != nil {
		t.Fatalf("election bucket: %v", err)
	}
	return kv
}

// testCtx bounds one request made by the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// candidate is a streams.Election run by the test.
type candidate struct {
	e     *streams.Election
	terms chan *streams.Term
	done  chan struct{}
}

// campaign starts a candidate named identity in election key, over js; it
// stops when the test ends.
func campaign(t *testing.T, js jetstream.JetStream, identity, key string, opts ...streams.Option) *candidate {
	t.Helper()
	c := &candidate{terms: make(chan *streams.Term, 16), done: make(chan struct{})}
	log := &memoryLog{}
	t.Cleanup(func() { // runs after c.stop: the log is whole
		if t.Failed() {
			t.Logf("%s's log in %s:\n%s", identity, key, log.String())
		}
	})
	opts = append([]streams.Option{streams.WithLogger(log)}, opts...)
	opts = append(opts, streams.OnLeading(func(term *streams.Term) { c.terms <- term }))
	e, err := streams.NewElection(identity, key, js, opts...)
	if err != nil {
		t.Fatalf("election: %v", err)
	}
	c.e = e
	go func() {
		defer close(c.done)
		if err := e.Start(context.Background()); err != nil {
			t.Errorf("election %s of %s: %v", key, identity, err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

// memoryLog keeps a candidate's log lines, with the time of each, to show
// them when its test fails.
type memoryLog struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (l *memoryLog) add(level, format string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.lines, "%s %s %s\n", time.Now().Format("15:04:05.000"), level, fmt.Sprintf(format, args...))
}

func (l *memoryLog) Debugf(format string, args ...any) { l.add("DEBUG", format, args) }
func (l *memoryLog) Infof(format string, args ...any)  { l.add("INFO", format, args) }
func (l *memoryLog) Warnf(format string, args ...any)  { l.add("WARN", format, args) }
func (l *memoryLog) Errorf(format string, args ...any) { l.add("ERROR", format, args) }

func (l *memoryLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.String()
}

// waitLeading waits until the candidate begins a term and returns it.
func (c *candidate) waitLeading(t *testing.T) *streams.Term {
	t.Helper()
	select {
	case term := <-c.terms:
		return term
	case <-time.After(eventTimeout):
		t.Fatalf("%s did not become leader of %s within %v", c.e.Identity(), c.e.Key(), eventTimeout)
		return nil
	}
}

// publishRelease writes identity's release marker over revision rev of key
// in the election bucket, as a holder's graceful release does: a delete
// marker with a revision check whose payload names the holder. It returns
// the marker's revision.
func publishRelease(t *testing.T, url, key, identity string, rev uint64) uint64 {
	t.Helper()
	m := nats.NewMsg("$KV." + bucket.Name + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	m.Data = []byte("released by " + identity)
	ack, err := jetStream(t, url).PublishMsg(testCtx(t), m, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		t.Fatalf("release marker of %s: %v", key, err)
	}
	return ack.Sequence
}

// stop stops the candidate and waits until it has released the key.
func (c *candidate) stop() {
	c.e.Stop()
	<-c.done
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// mustContain fails the test unless s contains each of want.
func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, s)
		}
	}
}

// writeFile writes content to name in a temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
