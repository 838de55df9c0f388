package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// conclaveBinary is the conclave command, built once for the tests that
// look at the demo as a user does.
var conclaveBinary struct {
	once sync.Once
	path string
	err  error
}

func buildConclave(t *testing.T) string {
	t.Helper()
	conclaveBinary.once.Do(func() {
		bin := filepath.Join(demoBinary.dir, "conclave")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/conclave-io/conclave/cmd/conclave").CombinedOutput()
		if err != nil {
			conclaveBinary.err = err
			t.Logf("go build: %s", out)
			return
		}
		conclaveBinary.path = bin
	})
	if conclaveBinary.err != nil {
		t.Fatal(conclaveBinary.err)
	}
	return conclaveBinary.path
}

var watchLine = regexp.MustCompile(`^Watch: +conclave election watch --server (\S+) (\S+)$`)

// TestDemoWorkersAreTenCandidatesToInfoAndWatch: the demo's ten workers
// share the host's identity; `election info` lists ten instances with the
// leader marked, and `s` shows in `election watch` as a hand-over from
// one worker to another with the new term's token.
func TestDemoWorkersAreTenCandidatesToInfoAndWatch(t *testing.T) {
	bin, cli := buildDemo(t), buildConclave(t)
	p := startDemo(t, bin, []string{"NOSPLAY=1", "CONCLAVE_IDENTITY=vm"}, "--ttl", "2s")
	var url, key string
	first := p.next(15*time.Second, "work from a leader", isWork, func(l line) {
		if m := watchLine.FindStringSubmatch(l.text); m != nil {
			url, key = m[1], m[2]
		}
	})
	if url == "" {
		t.Fatalf("the banner names no broker to watch")
	}
	a := workerOf(first)

	var info struct {
		Candidates []struct {
			Identity string `json:"identity"`
			Instance string `json:"instance"`
			Leading  bool   `json:"leading"`
		} `json:"candidates"`
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(info.Candidates) != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("election info lists %d candidates, want the ten workers: %+v", len(info.Candidates), info.Candidates)
		}
		out, err := exec.Command(cli, "--server", url, "election", "info", "--json", key).Output()
		if err != nil {
			t.Fatalf("election info: %v", err)
		}
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatalf("election info --json: %v\n%s", err, out)
		}
	}
	seen, leading := map[string]bool{}, []string{}
	for _, c := range info.Candidates {
		seen[c.Instance] = true
		if c.Identity != "vm" {
			t.Errorf("candidate %+v, want identity vm", c)
		}
		if c.Leading {
			leading = append(leading, c.Instance)
		}
	}
	if len(seen) != 10 || len(leading) != 1 || leading[0] != "worker-"+itoa(a) {
		t.Fatalf("info lists instances %v with %v leading, want ten workers and worker-%d leading", seen, leading, a)
	}

	watch := exec.Command(cli, "--server", url, "election", "watch", key)
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine(t, lines, regexp.MustCompile(`  current +`+key+`: vm leads`))
	p.send("s")
	next := p.next(5*time.Second, "work from another worker", func(l line) bool { return isWork(l) && workerOf(l) != a }, nil)
	b := workerOf(next)
	m := waitLine(t, lines, regexp.MustCompile(`  elected +`+key+`: handed over from vm/worker-`+itoa(a)+` to vm/worker-`+itoa(b)+`, token (\d+)$`))
	if tok := regexp.MustCompile(`token=(\d+)`).FindStringSubmatch(next.text); tok == nil || tok[1] != m[1] {
		t.Fatalf("watch reported token %s; worker %d works with %q", m[1], b, next.text)
	}
	t.Logf("watch: %s", m[0])
}

// waitLine waits for a line matching re.
func waitLine(t *testing.T, lines <-chan string, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the output ended before a line matching %s", re)
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s within 10s", re)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
