package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// worker is the command the run tests lead with: it announces its start and
// its SIGTERM on standard output and in the shared file $LOG (appends are
// ordered by the kernel, so the file orders events across processes), and
// otherwise runs until stopped.
const worker = `#!/bin/sh
trap 'echo "term $CONCLAVE_IDENTITY" >> "$LOG"; echo "term $CONCLAVE_IDENTITY"; exit 0' TERM
echo "started $CONCLAVE_IDENTITY $CONCLAVE_TOKEN $CONCLAVE_ELECTION" >> "$LOG"
echo "started $CONCLAVE_IDENTITY $CONCLAVE_TOKEN $CONCLAVE_ELECTION"
while true; do sleep 0.1; done
`

// workerSetup writes the worker script and returns it and the log file's path.
func workerSetup(t *testing.T) (script, log string) {
	t.Helper()
	dir := t.TempDir()
	script = filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte(worker), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, filepath.Join(dir, "events.log")
}

// checkOneAtATime reads the workers' shared log and checks that their runs
// did not overlap: every start is followed by the same worker's SIGTERM
// before the next start. It returns the identities in order of their start
// and the tokens they got.
func checkOneAtATime(t *testing.T, log string) (who []string, tokens []uint64) {
	t.Helper()
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	running := ""
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "started":
			if running != "" {
				t.Errorf("%s started while %s still ran:\n%s", f[1], running, raw)
			}
			running = f[1]
			tok, _ := strconv.ParseUint(f[2], 10, 64)
			who, tokens = append(who, f[1]), append(tokens, tok)
		case len(f) == 2 && f[0] == "term":
			if f[1] != running {
				t.Errorf("%s got SIGTERM while %q ran:\n%s", f[1], running, raw)
			}
			running = ""
		default:
			t.Errorf("unexpected line %q in the workers' log", line)
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens did not grow: %v", tokens)
		}
	}
	return who, tokens
}

func TestRunOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	script, log := workerSetup(t)
	env := []string{"LOG=" + log}
	run := func(identity string) *proc {
		return startConclave(t, env, "--server", url, "election", "run", "job", "--identity", identity, "--grace", "2s", "--", script)
	}
	started := func(p *proc, from int, identity string) (int, string) {
		i, m := p.stdout.waitFor(t, from, regexp.MustCompile(`^started `+identity+` (\d+) job$`))
		return i, m[1]
	}

	r1 := run("r1")
	started(r1, 0, "r1")
	r2 := run("r2")
	r2.stderr.waitFor(t, 0, regexp.MustCompile(`r2 campaigning in job`))

	// Force r1 to stand down: r2 takes over and starts its command, after
	// r1's command got SIGTERM.
	sd := conclave(t, "--server", url, "election", "stand-down", "job", "--force", "--wait", "20s")
	mustSucceed(t, sd)
	m := regexp.MustCompile(`r2/[0-9a-f]+ leads job now, token (\d+)`).FindStringSubmatch(sd.stdout)
	if m == nil {
		t.Fatalf("stand-down did not see r2 take over:\n%s", sd.stdout)
	}
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^term r1$`))
	if _, token := started(r2, 0, "r2"); token != m[1] {
		t.Errorf("r2's command got CONCLAVE_TOKEN=%s, stand-down reported token %s", token, m[1])
	}
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`r1 no longer leads job \(deposed\): stopping`))

	// Stop the leading run: it stops its command and hands over to r1 at
	// once, which starts its command again.
	r2.signal(syscall.SIGTERM)
	if code := r2.wait(); code != 0 {
		t.Errorf("run r2 exited with status %d after SIGTERM, want the command's 0", code)
	}
	r2.stdout.waitFor(t, 0, regexp.MustCompile(`^term r2$`))
	started(r1, 1, "r1")

	r1.signal(syscall.SIGINT)
	if code := r1.wait(); code != 0 {
		t.Errorf("run r1 exited with status %d after SIGINT, want 0", code)
	}
	who, _ := checkOneAtATime(t, log)
	if strings.Join(who, ",") != "r1,r2,r1" {
		t.Errorf("commands started in the order %v, want r1, r2, r1", who)
	}
	// Both released on the way out: nobody holds the key.
	r := conclave(t, "--server", url, "election", "list", "--json")
	var out listOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	for _, e := range out.Elections {
		if e.State == "held" {
			t.Errorf("%s is still held by %s after both runs stopped", e.Election, e.Leader)
		}
	}
}

// TestRunLeaderKilled kills the leading run outright: its command gets
// SIGTERM from the kernel, and the other run takes over once the key has
// expired and the grace has passed.
func TestRunLeaderKilled(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	url := startBroker(t, 2*time.Second)
	script, log := workerSetup(t)
	env := []string{"LOG=" + log}
	r1 := startConclave(t, env, "--server", url, "election", "run", "job", "--identity", "r1", "--grace", "1s", "--", script)
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^started r1 `))
	r2 := startConclave(t, env, "--server", url, "election", "run", "job", "--identity", "r2", "--grace", "1s", "--", script)
	r2.stderr.waitFor(t, 0, regexp.MustCompile(`r2 campaigning in job`))

	r1.signal(syscall.SIGKILL)
	r1.wait()
	r2.stdout.waitFor(t, 0, regexp.MustCompile(`^started r2 `))
	r2.signal(syscall.SIGINT)
	if code := r2.wait(); code != 0 {
		t.Errorf("run r2 exited with status %d after SIGINT, want 0", code)
	}
	who, _ := checkOneAtATime(t, log)
	if strings.Join(who, ",") != "r1,r2" {
		t.Errorf("commands started in the order %v, want r1, r2", who)
	}
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	r := conclave(t, "--server", url, "election", "run", "job", "--identity", "r1", "--grace", "1s", "--", "sh", "-c", `echo "token $CONCLAVE_TOKEN identity $CONCLAVE_IDENTITY"; exit 3`)
	if r.code != 3 {
		t.Errorf("exit status %d, want the command's 3", r.code)
	}
	mustContain(t, "stdout", r.stdout, "identity r1")
	mustContain(t, "stderr", r.stderr, "exited with status 3: handing job over")

	// Released on the way out.
	lr := conclave(t, "--server", url, "election", "list", "--json")
	var out listOutput
	if err := json.Unmarshal([]byte(lr.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Elections) != 1 || out.Elections[0].State == "held" {
		t.Errorf("after run exited the election is %+v, want it released or removed", out.Elections)
	}
}

func TestRunRestart(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	p := startConclave(t, nil, "--server", url, "election", "run", "job", "--identity", "r1", "--grace", "1s", "--restart", "--", "sh", "-c", `echo "run $CONCLAVE_TOKEN"`)
	i, first := p.stdout.waitFor(t, 0, regexp.MustCompile(`^run (\d+)$`))
	_, second := p.stdout.waitFor(t, i+1, regexp.MustCompile(`^run (\d+)$`))
	if first[1] != second[1] {
		t.Errorf("the restarted command got token %s, the first %s: a restart keeps the term", second[1], first[1])
	}
	// Interrupt once the second run has exited too: no command runs then,
	// so run exits with 0. (Interrupted while one runs, it would pass on
	// the status SIGTERM gave the command.)
	restarted := regexp.MustCompile(`exited with status 0 while leading job: starting it again in 1s \(--restart\)`)
	i, _ = p.stderr.waitFor(t, 0, restarted)
	p.stderr.waitFor(t, i+1, restarted)
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	if _, err := jetStream(t, url).CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "HISTORY5", TTL: 2 * time.Second, History: 5}); err != nil {
		t.Fatal(err)
	}
	notExecutable := writeFile(t, "job.sh", "#!/bin/sh\necho ran\n") // mode 0644
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"command not found", []string{"job", "--", "no-such-command-here"}, 127, `cannot run "no-such-command-here"`},
		{"command not executable", []string{"job", "--", notExecutable}, 126, `cannot run "` + notExecutable + `": it is not an executable file`},
		{"a directory", []string{"job", "--", t.TempDir()}, 126, "it is not an executable file"},
		{"no command", []string{"job"}, 1, "missing the COMMAND to run"},
		{"flags after NAME without --", []string{"job", "--grace", "1s", "true"}, 1, "flags after NAME need -- before the command"},
		{"a second word is the command", []string{"job", "other", "--", "true"}, 127, `cannot run "other"`},
		{"NAME after flags and --", []string{"job", "--grace", "1s", "other", "--", "true"}, 1, `only NAME goes before --, got ["job" "other"]`},
		{"missing NAME", []string{"--", "true"}, 1, "missing NAME before --"},
		{"invalid name", []string{"a*b", "--", "true"}, 1, "election name: invalid key"},
		{"bucket unfit for elections", []string{"job", "--bucket", "HISTORY5", "--", "true"}, 1, "bucket HISTORY5: the bucket keeps 5 values per key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclave(t, append([]string{"--server", url, "election", "run"}, tc.args...)...)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d", r.code, tc.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want)
		})
	}
}

// TestRunCommandFlags: the command after NAME needs no "--" even when it has
// flags of its own (as with consul lock and etcdctl lock); "--" still
// works, and run's flags go before NAME or between NAME and "--".
func TestRunCommandFlags(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no dash", []string{"--identity", "r1", "job1", "sh", "-c", `echo "args $0 $CONCLAVE_IDENTITY"`, "-l"}},
		{"dash", []string{"job2", "--", "sh", "-c", `echo "args $0 $CONCLAVE_IDENTITY"`, "-l"}},
		{"flags between NAME and dash", []string{"job3", "--identity", "r1", "--grace", "1s", "--", "sh", "-c", `echo "args $0 $CONCLAVE_IDENTITY"`, "-l"}},
		{"dash inside the command", []string{"job4", "sh", "-c", `echo "args $0 $1"`, "-l", "--"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each in an election of its own
			// A short --grace: taking over the absent key waits it out.
			r := conclave(t, append([]string{"--server", url, "election", "run", "--grace", "100ms"}, tc.args...)...)
			mustSucceed(t, r)
			mustContain(t, "stdout", r.stdout, "args -l ")
		})
	}
	r := conclave(t, "election", "run", "job", "--help")
	mustSucceed(t, r)
	mustContain(t, "help", r.stdout, "Usage:")
}

// TestRunInterrupted: Ctrl-C or SIGTERM on a leading run whose command dies
// of the SIGTERM it is sent is the stop that was asked for: exit 0, and a
// last line saying it released.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startConclave(t, nil, "--server", url, "election", "run", "--identity", "r1", "--grace", "5s", "job", "sh", "-c", "echo up; exec sleep 1000")
			p.stdout.waitFor(t, 0, regexp.MustCompile(`^up$`))
			p.signal(sig)
			if code := p.wait(); code != 0 {
				t.Errorf("exit status %d after %v, want 0", code, sig)
			}
			all := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
			if last := all[len(all)-1]; !strings.Contains(last, "released job (no standby took it up); exiting with status 0") {
				t.Errorf("last line %q, want it to say run released job", last)
			}
		})
	}
}

// TestRunWaitsForBroker: run started before its broker says it waits and
// keeps trying, then campaigns and starts its command once the broker is
// up; the commands that inspect still fail at once (TestErrorsSayWhatToDo).
func TestRunWaitsForBroker(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	p := startConclave(t, nil, "--server", url, "election", "run", "--identity", "r1", "--grace", "100ms", "job", "sh", "-c", "echo up; exec sleep 1000")
	p.stderr.waitFor(t, 0, regexp.MustCompile(`waiting for the broker \(retrying until it answers; Ctrl-C to stop\): no broker at `+regexp.QuoteMeta(url)))

	brokertest.StartSingle(t, func(c *config.Config) { c.ClientPort = port })
	p.stdout.waitFor(t, 0, regexp.MustCompile(`^up$`))
	p.stderr.waitFor(t, 0, regexp.MustCompile(`connected to `+regexp.QuoteMeta(url)+` and opened bucket CHORIA_LEADER_ELECTION after waiting`))
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}

	// Interrupted while waiting: nothing to release, status 0.
	p = startConclave(t, nil, "--server", "nats://127.0.0.1:"+strconv.Itoa(natstest.FreePort(t)), "election", "run", "job", "true")
	p.stderr.waitFor(t, 0, regexp.MustCompile(`waiting for the broker`))
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGTERM while waiting, want 0", code)
	}
	mustContain(t, "stderr", p.stderr.String(), "interrupted before campaigning in job")
}

// TestRunJSON: run --json logs one JSON object per line on standard error,
// each with its time and event, and the date is on every text line.
func TestRunJSON(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	r := conclave(t, "--server", url, "--timeout", "5", "election", "run", "--json", "--identity", "r1", "--grace", "100ms", "job", "sh", "-c", "exit 3")
	if r.code != 3 {
		t.Errorf("exit status %d, want the command's 3", r.code)
	}
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var ev struct {
			Time, Event, Election, Identity, Message string
			Token                                    uint64
			Status                                   *int
			ExitStatus                               *int `json:"exit_status"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		if _, err := time.Parse(time.RFC3339, ev.Time); err != nil || ev.Election != "job" || ev.Identity != "r1" || ev.Message == "" {
			t.Errorf("event %+v lacks its time, election, identity or message", ev)
		}
		switch {
		case ev.Event == "elected" && ev.Token == 0:
			t.Errorf("elected without a token: %s", line)
		case ev.Event == "exited" && (ev.Status == nil || *ev.Status != 3):
			t.Errorf("%s without status 3: %s", ev.Event, line)
		case ev.Event == "released" && (ev.ExitStatus == nil || *ev.ExitStatus != 3):
			t.Errorf("%s without exit_status 3: %s", ev.Event, line)
		}
		events = append(events, ev.Event)
	}
	if got := strings.Join(events, ","); got != "campaigning,elected,starting,exited,released" {
		t.Errorf("events %s, want campaigning,elected,starting,exited,released (a new election: the command starts --grace after the term)", got)
	}

	text := conclave(t, "--server", url, "election", "run", "--identity", "r1", "--grace", "100ms", "job", "true")
	mustSucceed(t, text)
	date := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ conclave: `)
	for _, line := range strings.Split(strings.TrimSpace(text.stderr), "\n") {
		if !date.MatchString(line) {
			t.Errorf("log line %q does not start with the date and time", line)
		}
	}
}

// TestRunTimeoutAndOnce: --lead-timeout gives up with status 1 unless leading in
// time; --once does not campaign against a leader, and runs the command
// once when it can lead.
func TestRunTimeoutAndOnce(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	campaign(t, jetStream(t, url), "n1", "job").waitLeading(t)

	start := time.Now()
	r := conclave(t, "--server", url, "election", "run", "--identity", "r1", "--lead-timeout", "1", "job", "true")
	if r.code != 1 {
		t.Errorf("--lead-timeout: exit status %d, want 1", r.code)
	}
	if !regexp.MustCompile(`r1/\S+ does not lead job \(--lead-timeout 1s\): giving up`).MatchString(r.stderr) {
		t.Errorf("stderr does not say which copy gave up:\n%s", r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "stopped campaigning in job (not leading)")
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("--lead-timeout 1 took %v", d)
	}

	r = conclave(t, "--server", url, "election", "run", "--identity", "r1", "--once", "job", "true")
	if r.code != 1 {
		t.Errorf("--once against a leader: exit status %d, want 1", r.code)
	}
	if !regexp.MustCompile(`n1/[0-9a-f]+ leads job \(--once\): not campaigning`).MatchString(r.stderr) {
		t.Errorf("--once against a leader does not name it with its instance:\n%s", r.stderr)
	}

	// Another copy of run's own identity is another candidate too.
	campaign(t, jetStream(t, url), "r1", "copies", streams.WithInstance("elsewhere")).waitLeading(t)
	r = conclave(t, "--server", url, "election", "run", "--identity", "r1", "--once", "copies", "true")
	if r.code != 1 {
		t.Errorf("--once against a copy of its identity: exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "r1/elsewhere leads copies (--once): not campaigning")

	r = conclave(t, "--server", url, "election", "run", "--identity", "r1", "--once", "--grace", "0", "free", "sh", "-c", "echo ran")
	mustSucceed(t, r)
	if strings.Count(r.stdout, "ran\n") != 1 {
		t.Errorf("--once ran the command %d times, want 1:\n%s", strings.Count(r.stdout, "ran\n"), r.stdout)
	}
}

// TestRunInterruptedWhileTheBrokerIsSilent: Ctrl-C stops run at once even
// while its campaign waits for requests the broker never answers (here a
// NATS context's JetStream API prefix whose reads and watches are dropped),
// instead of after their request timeouts (issue 20: SIGINT ignored for
// seconds).
func TestRunInterruptedWhileTheBrokerIsSilent(t *testing.T) {
	// Not parallel: it bounds the stop at 2s.
	url := startBroker(t, time.Minute) // requests time out after 5s
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	dropped := make(chan string, 100)
	// "silent.X" forwards to "$JS.API.X", but for the requests of reads,
	// watches and writes, which are never answered.
	_, err = nc.Subscribe("silent.>", func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, "silent.")
		if strings.HasPrefix(rest, "CONSUMER.") || strings.HasPrefix(rest, "DIRECT.GET.") ||
			strings.HasPrefix(rest, "STREAM.MSG.GET.") || strings.HasPrefix(rest, "$KV.") {
			select {
			case dropped <- rest:
			default:
			}
			return
		}
		reply, err := nc.Request("$JS.API."+rest, m.Data, 5*time.Second)
		if err == nil {
			_ = m.Respond(reply.Data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	xdg := t.TempDir()
	dir := filepath.Join(xdg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "silent.json"), []byte(`{"url": "`+url+`", "jetstream_api_prefix": "silent"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	p := startConclave(t, []string{"XDG_CONFIG_HOME=" + xdg}, "--context", "silent", "election", "run", "job", "--identity", "r1", "--", "sleep", "60")
	select {
	case subj := <-dropped:
		t.Logf("in flight, never to be answered: %s", subj)
	case <-time.After(eventTimeout):
		t.Fatal("run made no request to the silent broker")
	}
	interrupted := time.Now()
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}
	if took := time.Since(interrupted); took > 2*time.Second {
		t.Errorf("run took %v to stop after SIGINT: it waited for requests the broker never answers (timeout 5s)", took)
	}
}

// TestRunStopHandsOverAndSaysSo: a run leader stopped by SIGTERM while
// another run stands hands the election over to it, and its log says so,
// naming it (event handed_over, new_leader), instead of "released"; the
// standby, taking a handed-over key, starts its command without waiting
// its --grace.
func TestRunStopHandsOverAndSaysSo(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	script, log := workerSetup(t)
	r1 := startConclave(t, []string{"LOG=" + log}, "--server", url, "election", "run", "--json", "--identity", "r1", "--grace", "100ms", "job", "sh", "-c", "echo up; exec sleep 1000")
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^up$`))
	r2 := startConclave(t, []string{"LOG=" + log}, "--server", url, "election", "run", "--identity", "r2", "--grace", "30s", "job", script)
	waitStanding(t, url, "job", "r1", "r2")

	r1.signal(syscall.SIGTERM)
	if code := r1.wait(); code != 0 {
		t.Errorf("r1 exited %d after SIGTERM, want 0", code)
	}
	r2.stdout.waitFor(t, 0, regexp.MustCompile(`^started r2 \d+ job$`)) // at once, not after --grace 30s
	var events []string
	var handedOver map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r1.stderr.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		events = append(events, ev["event"].(string))
		if ev["event"] == "handed_over" {
			handedOver = ev
		}
	}
	if handedOver == nil || handedOver["new_leader"] != "r2" || handedOver["exit_status"] != 0.0 {
		t.Errorf("r1 logged no handed_over event naming r2 with exit_status 0: events %v, handed_over %v", events, handedOver)
	}
	if slices.Contains(events, "released") {
		t.Errorf("r1 logged released although it handed over: %v", events)
	}
}

// TestRunSaysWhenTheBrokerGoesAway: run logs, without --verbose, that it
// lost its connection to the broker and that it is back, as watch does:
// while the broker is away the leader cannot renew its term.
func TestRunSaysWhenTheBrokerGoesAway(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 1, func(_ int, cfg *config.Config) { cfg.LeaderElectionTTL = 2 * time.Second })
	url := c.ClientURLs()[0]
	text := startConclave(t, nil, "--server", url, "election", "run", "--identity", "r1", "--grace", "0", "job", "sleep", "600")
	asJSON := startConclave(t, nil, "--server", url, "election", "run", "--identity", "r2", "--json", "job", "sleep", "600")
	text.stderr.waitFor(t, 0, regexp.MustCompile(`campaigning in job`))
	asJSON.stderr.waitFor(t, 0, regexp.MustCompile(`"event":"campaigning"`))

	c.Stop(0)
	text.stderr.waitFor(t, 0, regexp.MustCompile(`conclave: warning: lost the connection to nats://127\.0\.0\.1:\d+.*: reconnecting`))
	_, m := asJSON.stderr.waitFor(t, 0, regexp.MustCompile(`^(\{.*"event":"disconnected".*\})$`))
	var line struct{ Server, Identity string }
	if err := json.Unmarshal([]byte(m[1]), &line); err != nil || line.Server != url || line.Identity != "r2" {
		t.Errorf("disconnected line %s: %v; want the server %s and identity r2", m[1], err, url)
	}

	c.Restart(0)
	text.stderr.waitFor(t, 0, regexp.MustCompile(`conclave: connected to nats://127\.0\.0\.1:\d+ again`))
	asJSON.stderr.waitFor(t, 0, regexp.MustCompile(`"event":"reconnected"`))
	text.signal(syscall.SIGINT)
	asJSON.signal(syscall.SIGINT)
	text.wait()
	asJSON.wait()
}
