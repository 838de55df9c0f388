package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The CPU scenario runs brokers and candidates in child processes, each a
// re-execution of this binary (or of the test binary) told what to be by
// childEnv, so that /proc can say how much CPU each used. A child prints
// one line "READY {json}" when it is up, answers a "status" line on stdin
// with one JSON line, and exits when stdin closes, so it never outlives the
// parent.
const childEnv = "CONCLAVE_CHORIA_BENCH_CHILD"

type childArgs struct {
	Kind        string        `json:"kind"` // "broker", "clients" or "scale"
	TTL         time.Duration `json:"ttl"`
	Lib         lib           `json:"lib"`
	URL         string        `json:"url,omitempty"`
	Elections   int           `json:"elections,omitempty"`
	PerElection int           `json:"per_election,omitempty"`
	Prefix      string        `json:"prefix,omitempty"` // scale: the elections' keys are Prefix0, Prefix1, …
	Proc        int           `json:"proc,omitempty"`   // scale: the process's number, in its identity
	// KeysFile, when set, names a file of election keys, one a line, that
	// the scale child campaigns in instead of Prefix0 … (bench/scale runs
	// Choria's side of its comparison this way).
	KeysFile string `json:"keys_file,omitempty"`
	// Copies is how many candidates the scale child runs in each of its
	// elections (all under its one identity); 0 or 1 means one.
	Copies int `json:"copies,omitempty"`
}

type brokerReady struct {
	URL     string `json:"url"`
	Monitor string `json:"monitor"`
}

type clientStatus struct {
	Leaders int `json:"leaders"` // candidates that believe they lead now
	Wins    int `json:"wins"`
	Losses  int `json:"losses"`
}

// childMain runs this process as a child if the environment says so, and
// reports whether it did and the exit code.
func childMain() (bool, int) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return false, 0
	}
	var a childArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return true, 2
	}
	var err error
	switch a.Kind {
	case "broker":
		err = runBrokerChild(a)
	case "clients":
		err = runClientsChild(a)
	case "scale":
		err = runScaleChild(a)
	default:
		err = fmt.Errorf("unknown child kind %q", a.Kind)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", a.Kind, err)
		return true, 1
	}
	return true, 0
}

func runBrokerChild(a childArgs) error {
	dir, err := os.MkdirTemp("", "conclave-choria-bench-broker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir, true)
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if err := createBucket(context.Background(), srv.ClientURL(), a.TTL); err != nil {
		return err
	}
	ready, _ := json.Marshal(brokerReady{URL: srv.ClientURL(), Monitor: "http://" + srv.MonitorAddr().String()})
	fmt.Printf("READY %s\n", ready)
	serveStdin(func(string) any { return struct{}{} })
	return nil
}

func runClientsChild(a childArgs) error {
	var mu sync.Mutex
	leading := map[*candidate]bool{}
	var st clientStatus
	sink := func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.kind {
		case evWon:
			st.Wins++
			leading[ev.c] = true
		case evLost:
			st.Losses++
			delete(leading, ev.c)
		case evStopped:
			delete(leading, ev.c)
		}
	}
	ctx := context.Background()
	var cs []*candidate
	for i := range a.Elections {
		for j := range a.PerElection {
			c, err := newCandidate(ctx, spec{
				lib: a.Lib, url: a.URL, key: fmt.Sprintf("cpu_%d", i),
				id: fmt.Sprintf("%s-cpu-%d-%d", strings.ToLower(a.Lib.String()), i, j), sink: sink,
			})
			if err != nil {
				return err
			}
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		c.start()
	}
	fmt.Println("READY {}")
	serveStdin(func(string) any {
		mu.Lock()
		defer mu.Unlock()
		s := st
		s.Leaders = len(leading)
		return s
	})
	// Exit without stopping: the broker goes away with us, and 600
	// graceful stops would only slow the benchmark down.
	return nil
}

// serveStdin answers each line on stdin with status() as JSON until stdin
// closes.
func serveStdin(status func(line string) any) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		b, _ := json.Marshal(status(strings.TrimSpace(sc.Text())))
		fmt.Printf("%s\n", b)
	}
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	ready json.RawMessage
	mu    sync.Mutex
}

// spawn starts a child and waits for it to say it is ready.
func spawn(a childArgs, within time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(a)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("child %s: %w", a.Kind, err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outPipe)}
	line, err := c.readLine(within)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("child %s: %w", a.Kind, err)
	}
	rest, ok := strings.CutPrefix(line, "READY ")
	if !ok {
		c.close()
		return nil, fmt.Errorf("child %s said %q, not READY", a.Kind, line)
	}
	c.ready = json.RawMessage(rest)
	return c, nil
}

func (c *child) readLine(within time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := c.out.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(within):
		return "", fmt.Errorf("no answer within %v", within)
	}
}

// status asks the child for its status and decodes it into v.
func (c *child) status(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.in, "status\n"); err != nil {
		return err
	}
	line, err := c.readLine(10 * time.Second)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(line), v)
}

// close closes the child's stdin, which makes it exit, and waits for it,
// killing it if it takes too long.
func (c *child) close() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

func (c *child) cpu() (time.Duration, error) { return procCPU(c.cmd.Process.Pid) }

// userHZ is the unit of the CPU times in /proc: fixed at 100 on Linux,
// whatever the kernel's internal tick rate.
const userHZ = 100

// procCPU returns the user + system CPU time a process has used, all its
// threads included, from /proc/PID/stat (10ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/PID/stat format")
	}
	// After "pid (comm) ": state is field 3; utime is 14 and stime 15.
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// machineCPU returns the busy and total CPU time of the whole machine, all
// cores summed, from /proc/stat: the difference over a window says how busy
// the machine was, our processes and other people's.
func machineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, errors.New("unexpected /proc/stat format")
	}
	var sum, idle uint64
	for i, s := range f[1:] {
		if i >= 8 { // guest times are already counted in user
			break
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		sum += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	tick := time.Second / userHZ
	return time.Duration(sum-idle) * tick, time.Duration(sum) * tick, nil
}
