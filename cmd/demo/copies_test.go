package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// firstWork waits for the first line of work from a leader of demo p and
// returns it, with the broker URL and the election its banner names.
func firstWork(t *testing.T, p *process) (first line, url, key string) {
	first, url, key, _ = firstWorkWithMetrics(t, p)
	return first, url, key
}

// firstWorkWithMetrics is firstWork that also returns where the banner
// says the demo serves its metrics ("" when it does not).
func firstWorkWithMetrics(t *testing.T, p *process) (first line, url, key, metrics string) {
	t.Helper()
	first = p.next(15*time.Second, "work from a leader", isWork, func(l line) {
		if m := watchLine.FindStringSubmatch(l.text); m != nil {
			url, key = m[1], m[2]
		}
		if m := metricsLine.FindStringSubmatch(l.text); m != nil {
			metrics = m[1]
		}
	})
	if url == "" {
		t.Fatalf("the banner names no broker to watch")
	}
	return first, url, key, metrics
}

// awaitLeaderKnowsStandbys waits until the demo's metrics say that the
// leader of key has heard of at least one standby: it counts every
// candidate it hears of, a standby itself alone. A leader that steps down
// before then knows no one to hand over to, and releases the key.
func awaitLeaderKnowsStandbys(t *testing.T, metrics, key string) {
	t.Helper()
	series := regexp.MustCompile(`(?m)^conclave_election_candidates\{election="` + regexp.QuoteMeta(key) + `",health="healthy"\} (\d+)`)
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second) // a new leader asks who stands within half its 10s minimum term
	for {
		resp, err := client.Get(metrics + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := series.FindSubmatch(body); m != nil && string(m[1]) != "0" && string(m[1]) != "1" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader of %s knew no standby within 20s (metrics at %s: %v)", key, metrics, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDemoWorkersAreTenCandidatesToInfoAndWatch: the demo's ten workers
// share the host's identity; `election info` lists ten instances with the
// leader marked, and `s` shows in `election watch` as a hand-over from
// one worker to another with the new term's token.
func TestDemoWorkersAreTenCandidatesToInfoAndWatch(t *testing.T) {
	bin, cli := buildDemo(t), buildConclave(t)
	p := startDemo(t, bin, []string{"NOSPLAY=1", "CONCLAVE_IDENTITY=vm"}, "--ttl", "2s", "--metrics", "127.0.0.1:0")
	first, url, key, metrics := firstWorkWithMetrics(t, p)
	a := workerOf(first)

	seen, leading := candidates(t, cli, url, key, 10)
	if len(seen) != 10 || len(leading) != 1 || leading[0] != a {
		t.Fatalf("info lists instances %v with %v leading, want ten workers and %s leading", seen, leading, a)
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
	waitLine(t, lines, regexp.MustCompile(`  current +`+key+`: vm/`+regexp.QuoteMeta(a)+` leads`))
	awaitLeaderKnowsStandbys(t, metrics, key)
	p.send("s")
	next := p.next(5*time.Second, "work from another worker", func(l line) bool { return isWork(l) && workerOf(l) != a }, nil)
	b := workerOf(next)
	m := waitLine(t, lines, regexp.MustCompile(`  elected +`+key+`: handed over from vm/`+regexp.QuoteMeta(a)+` to vm/`+regexp.QuoteMeta(b)+`, token (\d+)$`))
	if tok := regexp.MustCompile(`token=(\d+)`).FindStringSubmatch(next.text); tok == nil || tok[1] != m[1] {
		t.Fatalf("watch reported token %s; %s works with %q", m[1], b, next.text)
	}
	t.Logf("watch: %s", m[0])
}

// candidates asks `election info` about key until it lists n candidates,
// failing the test when it does not within 15s, and returns their
// instances and the instances it marks leading. Every candidate must run
// as vm.
func candidates(t *testing.T, cli, url, key string, n int) (seen map[string]bool, leading []string) {
	t.Helper()
	var info struct {
		Candidates []struct {
			Identity string `json:"identity"`
			Instance string `json:"instance"`
			Leading  bool   `json:"leading"`
		} `json:"candidates"`
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(info.Candidates) != n {
		if time.Now().After(deadline) {
			t.Fatalf("election info lists %d candidates, want %d: %+v", len(info.Candidates), n, info.Candidates)
		}
		out, err := exec.Command(cli, "--server", url, "election", "info", "--json", key).Output()
		if err != nil {
			t.Fatalf("election info: %v", err)
		}
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatalf("election info --json: %v\n%s", err, out)
		}
	}
	seen = map[string]bool{}
	for _, c := range info.Candidates {
		seen[c.Instance] = true
		if c.Identity != "vm" {
			t.Errorf("candidate %+v, want identity vm", c)
		}
		if c.Leading {
			leading = append(leading, c.Instance)
		}
	}
	return seen, leading
}

var bannerLine = regexp.MustCompile(`^Conclave demo: \d+ workers campaigning in election "\S+" as vm/worker-N\.([0-9a-f]{8})$`)

// TestTwoDemosOnOneHostAreSixCandidates: two copies of the demo on one
// host, under one identity and on one broker (the second connects with
// --config), run three workers each. Their instances differ: `election
// info` lists six candidates, one of them leading, and `stand-down --to`
// with an instance of the second copy hands over to that worker alone.
func TestTwoDemosOnOneHostAreSixCandidates(t *testing.T) {
	bin, cli := buildDemo(t), buildConclave(t)
	env := []string{"NOSPLAY=1", "CONCLAVE_IDENTITY=vm", "WORKERS=3"}
	a := startDemo(t, bin, env, "--ttl", "2s", "--metrics", "")
	first, url, key := firstWork(t, a)
	conf := filepath.Join(t.TempDir(), "client.conf")
	if err := os.WriteFile(conf, []byte("plugin.choria.middleware_hosts = "+url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startDemo(t, bin, env, "--config", conf, "--metrics", "")

	seen, leading := candidates(t, cli, url, key, 6)
	leader := workerOf(first)
	if len(leading) != 1 || leading[0] != leader {
		t.Fatalf("info marks %v leading, want %s, whose work the first demo logs", leading, leader)
	}
	bannerB := b.next(5*time.Second, "the second demo's banner", func(l line) bool { return bannerLine.MatchString(l.text) }, nil)
	_, copyA, _ := strings.Cut(leader, ".")
	copyB := bannerLine.FindStringSubmatch(bannerB.text)[1]
	if copyB == copyA {
		t.Fatalf("both demos' instances end in %q, want a part of each", copyA)
	}
	for _, part := range []string{copyA, copyB} {
		for n := 1; n <= 3; n++ {
			if !seen["worker-"+itoa(n)+"."+part] {
				t.Errorf("info lists %v, without worker-%d.%s", seen, n, part)
			}
		}
	}

	to := "worker-2." + copyB
	out, err := exec.Command(cli, "--server", url, "election", "stand-down", "--to", to, "--force", "--wait", "20s", key).CombinedOutput()
	if err != nil {
		t.Fatalf("stand-down --to %s: %v\n%s", to, err, out)
	}
	if want := "vm/" + to + " leads " + key + " now"; !strings.Contains(string(out), want) {
		t.Fatalf("stand-down --to %s says %q, want %q", to, out, want)
	}
	b.next(10*time.Second, "work from "+to, func(l line) bool { return isWork(l) && workerOf(l) == to }, nil)
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
