package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// checkPlatform fails early where /proc cannot say what a process used.
func checkPlatform() error {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return fmt.Errorf("this benchmark reads CPU and memory from /proc (Linux only): %w", err)
	}
	return nil
}

// buildCLI builds ./cmd/conclave of the module this program is run from
// into dir and returns the binary's path.
func buildCLI(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the conclave module: run from its root, or pass -conclave")
	}
	bin := filepath.Join(dir, "conclave")
	progress("building the CLI: go build -o %s ./cmd/conclave", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/conclave")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/conclave: %w\n%s", err, out)
	}
	return bin, nil
}

// progress writes a timestamped line to standard error.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// freePort returns a TCP port on the loopback that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// proc is a child OS process the benchmark started: a broker or a candidate
// process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // file receiving its standard error (and a broker's output)
	done chan struct{} // closed once it has exited and been waited for
	err  error         // its exit status, once done
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// describeExit says how the process ended, with the end of its log.
func (p *proc) describeExit() string {
	return fmt.Sprintf("%s (pid %d) exited: %v; end of %s:\n%s", p.name, p.pid(), p.err, p.log, tail(p.log, 15))
}

// kill sends SIGKILL and waits up to 10 s for the process to be reaped.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stop asks the process to end with sig, waits up to grace, then kills it.
func (p *proc) stop(sig os.Signal, grace time.Duration) {
	if p.exited() {
		return
	}
	if sig != nil {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// start starts cmd as a process of the benchmark: in a process group of its
// own (so that a Ctrl-C reaches only the benchmark, which then stops
// everything in order), killed by the kernel should the benchmark die, and
// with its standard error in the file log.
func startProc(name string, cmd *exec.Cmd, log string) (*proc, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd.Stderr = f
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(cleanEnv(), cmd.Env...) // what the caller set, after the rest
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	f.Close() // the child holds its own copy
	return &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}, nil
}

// cleanEnv is this process's environment without CONCLAVE_* variables,
// which would override the generated configuration files.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONCLAVE_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// broker is one `conclave broker run` process.
type broker struct {
	*proc
	identity  string
	clientURL string
	statsURL  string
	peerURL   string
	pprofURL  string // http://127.0.0.1:port when it serves net/http/pprof (-profile), else ""
}

// pprofEnv names the variable that makes the bench's profiling broker
// (bench/scale/pprofbroker) serve net/http/pprof on a loopback address.
const pprofEnv = "BENCH_SCALE_PPROF_ADDR"

// brokerConfig writes the configuration file of a broker: the keys of
// docs/config.md, nothing about the stream beyond its TTL.
func brokerConfig(path, identity, store string, client, stats, peer int, peers []string, ttl time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# generated by bench/scale\n")
	fmt.Fprintf(&b, "identity = %s\n", identity)
	fmt.Fprintf(&b, "loglevel = info\n")
	fmt.Fprintf(&b, "plugin.choria.broker_network = true\n")
	fmt.Fprintf(&b, "plugin.choria.network.listen_address = 127.0.0.1\n")
	fmt.Fprintf(&b, "plugin.choria.network.client_port = %d\n", client)
	fmt.Fprintf(&b, "plugin.choria.network.stream.store = %s\n", store)
	fmt.Fprintf(&b, "plugin.choria.network.stream.leader_election_ttl = %ds\n", int(ttl/time.Second))
	fmt.Fprintf(&b, "plugin.choria.stats_address = 127.0.0.1\n")
	fmt.Fprintf(&b, "plugin.choria.stats_port = %d\n", stats)
	if peer > 0 {
		fmt.Fprintf(&b, "plugin.choria.network.peer_port = %d\n", peer)
		fmt.Fprintf(&b, "plugin.choria.network.peers = %s\n", strings.Join(peers, ", "))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// startBrokers starts n brokers, b1…bn, clustered when n > 1, with their
// files under dir. It does not wait for them to be ready. With pprof, cli
// is the profiling broker and each serves net/http/pprof on a loopback port.
func startBrokers(dir, cli string, n int, ttl time.Duration, pprof bool) ([]*broker, error) {
	type ports struct{ client, stats, peer int }
	ps := make([]ports, n)
	var peers []string
	for i := range ps {
		var err error
		if ps[i].client, err = freePort(); err != nil {
			return nil, err
		}
		if ps[i].stats, err = freePort(); err != nil {
			return nil, err
		}
		if n > 1 {
			if ps[i].peer, err = freePort(); err != nil {
				return nil, err
			}
			peers = append(peers, fmt.Sprintf("nats://127.0.0.1:%d", ps[i].peer))
		}
	}
	var out []*broker
	for i, p := range ps {
		id := fmt.Sprintf("b%d", i+1)
		home := filepath.Join(dir, id)
		if err := os.MkdirAll(home, 0o755); err != nil {
			return out, fmt.Errorf("broker %s: %w", id, err)
		}
		cfg := filepath.Join(home, "broker.conf")
		if err := brokerConfig(cfg, id, filepath.Join(home, "store"), p.client, p.stats, p.peer, peers, ttl); err != nil {
			return out, err
		}
		cmd := exec.Command(cli, "broker", "run", "--config", cfg)
		var pprofURL string
		if pprof {
			port, err := freePort()
			if err != nil {
				return out, err
			}
			cmd.Env = []string{fmt.Sprintf("%s=127.0.0.1:%d", pprofEnv, port)}
			pprofURL = fmt.Sprintf("http://127.0.0.1:%d", port)
		}
		pr, err := startProc("broker "+id, cmd, filepath.Join(home, "broker.log"))
		if err != nil {
			return out, err
		}
		go func() { pr.err = cmd.Wait(); close(pr.done) }()
		b := &broker{proc: pr, identity: id,
			clientURL: fmt.Sprintf("nats://127.0.0.1:%d", p.client),
			statsURL:  fmt.Sprintf("http://127.0.0.1:%d", p.stats), pprofURL: pprofURL}
		if p.peer > 0 {
			b.peerURL = fmt.Sprintf("nats://127.0.0.1:%d", p.peer)
		}
		out = append(out, b)
	}
	return out, nil
}

// varz is what the benchmark reads from a broker's /varz.
type varz struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
}

// readVarz reads the broker's message counters from its monitoring port.
func (b *broker) readVarz(ctx context.Context) (varz, error) {
	var v varz
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.statsURL+"/varz", nil)
	if err != nil {
		return v, fmt.Errorf("%s /varz: %w", b.identity, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, fmt.Errorf("%s /varz: %w", b.identity, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s /varz: %s", b.identity, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("%s /varz: %w", b.identity, err)
	}
	return v, nil
}

// cpuTicks returns the user plus system CPU time of process pid, in clock
// ticks, from /proc/<pid>/stat.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: only %d fields after the name", pid, len(f))
	}
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// rssMB returns the resident set size of process pid in MB (VmRSS in
// /proc/<pid>/status).
func rssMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status VmRSS %q: %w", pid, v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// candidate is a candidate process: this program run with -child, talking
// over its standard input and output.
type candidate struct {
	*proc
	identity string
	keys     []string // the elections it campaigns in
	choria   bool     // a Choria candidate process (bench/choria's scale child)
	baseRSS  float64  // MB, connected and before building any election
	stdin    io.WriteCloser
	msgs     chan childMsg // lines it printed, in order
	mu       sync.Mutex    // serialises requests
}

// startCandidate starts candidate process identity for the elections keys,
// copies candidates in each, with its files under dir, announcing who is
// standing unless announce is false. It does not wait for it to build them.
func startCandidate(dir, self, identity string, urls []string, keys []string, copies int, announce bool) (*candidate, error) {
	keysFile := filepath.Join(dir, identity+".keys")
	if err := writeKeys(keysFile, keys); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, identity+".conf")
	conf := fmt.Sprintf("# generated by bench/scale\nidentity = %s\nloglevel = warn\nplugin.choria.middleware_hosts = %s\n",
		identity, strings.Join(urls, ", "))
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("candidate %s: %w", identity, err)
	}
	cmd := exec.Command(self, "-child", "-child-config", cfg, "-child-keys", keysFile, fmt.Sprintf("-child-announce=%v", announce), fmt.Sprintf("-child-copies=%d", copies))
	return runCandidate(dir, identity, keys, cmd, false)
}

// runCandidate starts cmd as a candidate process and reads its lines: JSON
// messages of a Conclave one, or a Choria one's "READY {}" and status lines.
func runCandidate(dir, identity string, keys []string, cmd *exec.Cmd, choria bool) (*candidate, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("candidate %s: %w", identity, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("candidate %s: %w", identity, err)
	}
	pr, err := startProc("candidate "+identity, cmd, filepath.Join(dir, identity+".log"))
	if err != nil {
		return nil, err
	}
	c := &candidate{proc: pr, identity: identity, keys: keys, choria: choria, stdin: stdin, msgs: make(chan childMsg, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 64<<20)
		for sc.Scan() {
			var m childMsg
			var err error
			if choria {
				m, err = choriaLine(sc.Bytes())
			} else {
				err = json.Unmarshal(sc.Bytes(), &m)
			}
			if err != nil {
				m = childMsg{Type: msgError, Err: fmt.Sprintf("unreadable line %q: %v", sc.Text(), err)}
			}
			c.msgs <- m
		}
		_, _ = io.Copy(io.Discard, stdout)
		pr.err = cmd.Wait()
		close(c.msgs)
		close(pr.done)
	}()
	return c, nil
}

// await returns the next message of type want, failing on an error message,
// the process's exit, ctx or timeout.
func (c *candidate) await(ctx context.Context, want string, timeout time.Duration) (childMsg, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-c.msgs:
			switch {
			case !ok:
				<-c.done
				return m, errors.New(c.describeExit())
			case m.Type == msgError:
				return m, fmt.Errorf("%s: %s", c.name, m.Err)
			case m.Type == want:
				return m, nil
			}
		case <-t.C:
			return childMsg{}, fmt.Errorf("%s: no %q message within %v", c.name, want, timeout)
		case <-ctx.Done():
			return childMsg{}, ctx.Err()
		}
	}
}

// send writes one command line to the candidate.
func (c *candidate) send(line string) error {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return fmt.Errorf("%s: sending %q: %w", c.name, line, err)
	}
	return nil
}

// request sends a command and waits for its answer of type want.
func (c *candidate) request(ctx context.Context, line, want string) (childMsg, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited() {
		return childMsg{}, fmt.Errorf("%s: already exited", c.name)
	}
	if err := c.send(line); err != nil {
		return childMsg{}, err
	}
	return c.await(ctx, want, 30*time.Second)
}

// shutdown closes the candidate's input, which ends its campaigns (leaders
// release), and kills it if it has not exited within grace.
func (c *candidate) shutdown(grace time.Duration) {
	_ = c.stdin.Close()
	c.stop(nil, grace)
}
