package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/shards"
)

// shardWorker prints the shards it was started with, and its SIGTERM.
const shardWorker = `#!/bin/sh
trap 'echo "term $CONCLAVE_IDENTITY"; exit 0' TERM
echo "started $CONCLAVE_IDENTITY $CONCLAVE_GROUP $CONCLAVE_SHARDS $CONCLAVE_SHARD_TOKENS"
while true; do sleep 0.1; done
`

// shardsInfoOutput is the part of shards info --json the tests read.
type shardsInfoOutput struct {
	ShardCount int `json:"shard_count"`
	Held       int `json:"held"`
	Members    []struct {
		Identity string `json:"identity"`
		Held     int    `json:"held"`
		Weight   int    `json:"weight"`
		Healthy  bool   `json:"healthy"`
	} `json:"members"`
	Shards []struct {
		Shard  int     `json:"shard"`
		Holder string  `json:"holder"`
		Token  *uint64 `json:"token"`
		Since  *string `json:"since"`
	} `json:"shards"`
}

// TestShardsRunCopiesUnderOneIdentity: two copies of shards run under one
// identity (as on one host) are two members that split the group; info
// names each as identity/instance, and names each shard's holding copy.
func TestShardsRunCopiesUnderOneIdentity(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	script := filepath.Join(t.TempDir(), "worker.sh")
	if err := os.WriteFile(script, []byte(shardWorker), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() *proc {
		return startConclave(t, nil, "--server", url, "shards", "run", "--identity", "vm", "--grace", "2s", "copies", "4", "--", script)
	}
	first := run()
	first.stdout.waitFor(t, 0, regexp.MustCompile(`^started vm copies 0,1,2,3 `))
	second := run()
	second.stdout.waitFor(t, 0, regexp.MustCompile(`^started vm copies \d,\d `))
	first.stdout.waitFor(t, 1, regexp.MustCompile(`^started vm copies \d,\d `))

	type member struct {
		Identity string `json:"identity"`
		Instance string `json:"instance"`
		Held     int    `json:"held"`
	}
	var info struct {
		Members []member `json:"members"`
		Shards  []struct {
			Holder         string `json:"holder"`
			HolderInstance string `json:"holder_instance"`
		} `json:"shards"`
	}
	r := conclave(t, "--server", url, "shards", "info", "copies", "--json")
	mustSucceed(t, r)
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(info.Members) != 2 || info.Members[0].Instance == "" || info.Members[0].Instance == info.Members[1].Instance {
		t.Fatalf("members %+v, want two copies of vm with their own instances", info.Members)
	}
	held := map[string]int{}
	for _, s := range info.Shards {
		held[s.Holder+"/"+s.HolderInstance]++
	}
	for _, m := range info.Members {
		if m.Identity != "vm" || m.Held != 2 || held["vm/"+m.Instance] != 2 {
			t.Errorf("member %+v holds %d shards by the keys, want vm holding 2 (shards %+v)", m, held["vm/"+m.Instance], info.Shards)
		}
	}
	r = conclave(t, "--server", url, "shards", "info", "copies")
	mustSucceed(t, r)
	for _, m := range info.Members {
		mustContain(t, "stdout", r.stdout, "vm/"+m.Instance+"  ")
	}
	// Each copy's first line names its instance, as info lists it.
	for _, p := range []*proc{first, second} {
		_, m := p.stderr.waitFor(t, 0, regexp.MustCompile(`vm joining shard group copies of 4 shards \(identity from --identity, instance (\S+);`))
		if !slices.ContainsFunc(info.Members, func(mm member) bool { return mm.Instance == m[1] }) {
			t.Errorf("a copy says it joins as instance %s, which info does not list: %+v", m[1], info.Members)
		}
	}
}

// TestShardsRunSplitsAGroupAndHandsOverOnStop: two shards run members of a
// 4-shard group run their commands with 2 shards each, info shows them,
// and when one stops the other is restarted with all four.
func TestShardsRunSplitsAGroupAndHandsOverOnStop(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	script := filepath.Join(t.TempDir(), "worker.sh")
	if err := os.WriteFile(script, []byte(shardWorker), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(id string) *proc {
		return startConclave(t, nil, "--server", url, "shards", "run", "--identity", id, "--grace", "2s", "jobs", "4", "--", script)
	}
	r1 := run("r1")
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^started r1 jobs 0,1,2,3 0:\d+,1:\d+,2:\d+,3:\d+$`))
	r2 := run("r2")
	_, m := r2.stdout.waitFor(t, 0, regexp.MustCompile(`^started r2 jobs (\d,\d) `))
	i, m1 := r1.stdout.waitFor(t, 1, regexp.MustCompile(`^started r1 jobs (\d,\d) `))
	if got := strings.Split(m[1]+","+m1[1], ","); len(got) != 4 {
		t.Errorf("r1 runs %s and r2 %s", m1[1], m[1])
	}

	r := conclave(t, "--server", url, "shards", "info", "jobs", "--json")
	mustSucceed(t, r)
	var info shardsInfoOutput
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if info.ShardCount != 4 || info.Held != 4 || len(info.Members) != 2 {
		t.Errorf("info: %d shards, %d held, %d members; want 4, 4, 2", info.ShardCount, info.Held, len(info.Members))
	}
	for _, mem := range info.Members {
		if mem.Held != 2 || mem.Weight != 1 || !mem.Healthy {
			t.Errorf("member %+v, want 2 held, weight 1, healthy", mem)
		}
	}
	for _, s := range info.Shards {
		if s.Holder == "" || s.Token == nil || s.Since == nil {
			t.Errorf("shard %d: holder %q, token %v, since %v", s.Shard, s.Holder, s.Token, s.Since)
		}
	}
	text := conclave(t, "--server", url, "shards", "info", "jobs")
	mustSucceed(t, text)
	mustContain(t, "info", text.stdout, "Group jobs: 4 shards", "r1", "r2", "jobs.3")

	r2.signal(syscall.SIGTERM)
	if code := r2.wait(); code != 0 {
		t.Errorf("shards run r2 exited with %d after SIGTERM, want 0", code)
	}
	r2.stdout.waitFor(t, 0, regexp.MustCompile(`^term r2$`))
	r1.stdout.waitFor(t, i+1, regexp.MustCompile(`^started r1 jobs 0,1,2,3 `))
	r1.signal(syscall.SIGINT)
	if code := r1.wait(); code != 0 {
		t.Errorf("shards run r1 exited with %d after SIGINT, want 0", code)
	}
}

// TestShardsWatchShowsHoldersAndMembers: watch prints a line as a member
// joins and as it takes each shard.
func TestShardsWatchShowsHoldersAndMembers(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	w := startConclave(t, nil, "--server", url, "shards", "watch", "feed")
	w.stdout.waitFor(t, 0, regexp.MustCompile(`watching group feed`))

	runGroup(t, url, "m1", "feed", 2)
	w.stdout.waitFor(t, 0, regexp.MustCompile(`member m1/\S+ is in the group`))
	w.stdout.waitFor(t, 0, regexp.MustCompile(`shard 0 \(feed\.0\) held by m1`))
	w.stdout.waitFor(t, 0, regexp.MustCompile(`shard 1 \(feed\.1\) held by m1`))
	w.signal(syscall.SIGINT)
	if code := w.wait(); code != 0 {
		t.Errorf("watch exited with %d", code)
	}
}

// TestShardsCommandsIgnoreElectionsUnderTheGroupsName: an election whose
// key starts with the group's name but is no shard key (GROUP.job,
// GROUP.01) is not taken for a shard by info or watch.
func TestShardsCommandsIgnoreElectionsUnderTheGroupsName(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	for _, key := range []string{"app-a.job", "app-a.01", "app-a.99999999"} {
		if _, err := kv.Create(testCtx(t), key, []byte("a1")); err != nil {
			t.Fatal(err)
		}
	}
	r := conclave(t, "--server", url, "shards", "info", "app-a")
	if r.code == 0 || !strings.Contains(r.stderr, `no shard group "app-a"`) {
		t.Errorf("shards info of a group with no shard key: status %d, stderr %q; want no shard group", r.code, r.stderr)
	}
	w := startConclave(t, nil, "--server", url, "shards", "watch", "app-a")
	w.stdout.waitFor(t, 0, regexp.MustCompile(`watching group app-a`))
	if _, err := kv.Create(testCtx(t), "app-a.0", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	w.stdout.waitFor(t, 0, regexp.MustCompile(`shard 0 \(app-a\.0\) held by a1`))
	if out := w.stdout.String(); strings.Contains(out, "app-a.job") || strings.Contains(out, "app-a.01") || strings.Contains(out, "app-a.9") {
		t.Errorf("watch took an election that is no shard key for a shard:\n%s", out)
	}
	w.signal(syscall.SIGINT)
	w.wait()
}

// TestShardsWatchFollowsCopiesOfOneIdentity: watch names members and
// holders as identity/instance, prints each hand-over between copies that
// share an identity (their writes read alike through the KV API), and says
// when a member goes silent without leaving.
func TestShardsWatchFollowsCopiesOfOneIdentity(t *testing.T) {
	t.Parallel()
	const group = "copied"
	url := startBroker(t, 2*time.Second)
	w := startConclave(t, nil, "--server", url, "shards", "watch", group, "--json")
	w.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"current"`))

	first := runGroup(t, url, "svc", group, 4)
	for s := range 4 {
		w.stdout.waitFor(t, 0, regexp.MustCompile(fmt.Sprintf(`"event":"shard".*"holder":"svc","holder_instance":%q,"key":"copied\.%d".*"token":\d+`, first.Member()[len("svc/"):], s)))
	}
	nc, js := natstest.Connect(t, url)
	second, err := shards.NewGroup("svc", group, 4, js)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Start(context.Background()) }()
	inst := second.Member()[len("svc/"):]
	w.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"joined".*"instance":"`+inst+`"`))
	i, _ := w.stdout.waitFor(t, 0, regexp.MustCompile(`"holder_instance":"`+inst+`"`))
	i, _ = w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+inst+`"`)) // the two shards it takes
	// The second copy is cut off: it never says it leaves. Its keys
	// expire and the first copy takes them, a line each, and it is said
	// to be silent (in either order).
	nc.Close()
	<-done
	firstInst := first.Member()[len("svc/"):]
	j, _ := w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+firstInst+`"`))
	j, _ = w.stdout.waitFor(t, j+1, regexp.MustCompile(`"holder_instance":"`+firstInst+`"`))
	k, _ := w.stdout.waitFor(t, i+1, regexp.MustCompile(`"event":"silent".*"instance":"`+inst+`"`))
	i = max(j, k)

	// A third copy joins, takes two shards, and leaves as copies do,
	// handing them back: a line for each move, both ways.
	_, js3 := natstest.Connect(t, url)
	third, err := shards.NewGroup("svc", group, 4, js3)
	if err != nil {
		t.Fatal(err)
	}
	ctx3, stop3 := context.WithCancel(context.Background())
	done3 := make(chan error, 1)
	go func() { done3 <- third.Start(ctx3) }()
	inst3 := third.Member()[len("svc/"):]
	i, _ = w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+inst3+`"`))
	i, _ = w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+inst3+`"`))
	stop3()
	if err := <-done3; err != nil {
		t.Fatal(err)
	}
	i, _ = w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+firstInst+`"`))
	w.stdout.waitFor(t, i+1, regexp.MustCompile(`"holder_instance":"`+firstInst+`"`))
	w.signal(syscall.SIGINT)
	w.wait()
}

func TestShardsArgumentErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"shards", "info", "bad group"}, "invalid group name"},
		{[]string{"shards", "run", "g", "zero", "--", "true"}, "not a number"},
		{[]string{"shards", "run", "g", "0", "--", "true"}, "invalid shard count"},
		{[]string{"shards", "run", "g", "4"}, "missing GROUP, N or COMMAND"},
	} {
		r := conclave(t, append([]string{"--server", "nats://127.0.0.1:1"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("conclave %v: status %d, stderr %q; want an error mentioning %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestShardsRunExitStatusForACommandItCannotStart: as run and shells do,
// shards run exits 127 for a command not found and 126 for one that is
// there but is no executable file.
func TestShardsRunExitStatusForACommandItCannotStart(t *testing.T) {
	t.Parallel()
	plain := filepath.Join(t.TempDir(), "plain.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command string
		code    int
		want    string
	}{
		{filepath.Join(t.TempDir(), "missing"), 127, "cannot run"},
		{plain, 126, "not an executable file"},
		{t.TempDir(), 126, "not an executable file"},
	} {
		r := conclave(t, "--server", "nats://127.0.0.1:1", "shards", "run", "--identity", "m1", "g", "4", "--", tc.command)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("shards run %s: status %d, stderr %q; want %d mentioning %q", tc.command, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

// TestElectionCommandsSeeShardKeys: each shard of a group is an election,
// key G.i, that `election list` lists and `election info` shows with its
// holder and the token of the holder's term.
func TestElectionCommandsSeeShardKeys(t *testing.T) {
	// Not parallel: on a busy machine a shard's 2s lease lapsed and g.Term was nil.
	url := startBroker(t, 2*time.Second)
	g := runGroup(t, url, "m1", "feed", 2)
	deadline := time.Now().Add(eventTimeout)
	for len(g.Held()) != 2 || g.Term(0) == nil || g.Term(1) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("m1 holds %v of feed's 2 shards after %v", g.Held(), eventTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}

	r := conclave(t, "--server", url, "election", "list")
	mustSucceed(t, r)
	for _, key := range []string{"feed.0", "feed.1"} {
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(key) + `\s+m1\b`).MatchString(r.stdout) {
			t.Errorf("election list does not show %s held by m1:\n%s", key, r.stdout)
		}
	}
	// A term that began on a write saying it waits (a later term of the
	// hold, after a lease lapsed on a busy machine) is named by the next
	// renewal: info shows its token from then.
	for shard := range 2 {
		key := shards.Key("feed", shard)
		deadline := time.Now().Add(eventTimeout)
		for {
			r := conclave(t, "--server", url, "election", "info", key)
			mustSucceed(t, r)
			term := g.Term(shard)
			if term != nil && regexp.MustCompile(`Leader: +m1\b.*token `+itoa(term.Token())+`\b`).MatchString(r.stdout) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("election info %s does not show m1 leading with its term's token (%v) after %v:\n%s", key, term, eventTimeout, r.stdout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// runGroup runs member's part of a shard group of n shards until the test
// ends, and then checks that Start returned without an error.
func runGroup(t *testing.T, url, member, group string, n int) *shards.Group {
	t.Helper()
	g, err := shards.NewGroup(member, group, n, jetStream(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return g
}

// TestShardsInfoOfAnUnknownGroup: shards info of a group with no shard
// keys and no member is an error, as election info of an unknown election
// is, that says how to list what there is.
func TestShardsInfoOfAnUnknownGroup(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	r := conclave(t, "--server", url, "shards", "info", "nosuch")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, `no shard group "nosuch" in CHORIA_LEADER_ELECTION`, "`conclave election list` lists the elections")
}

// TestShardsRunWaitsGraceForAShardNotHandedOver: a shard taken other than
// by a hand-over (here, new keys) may still be worked on by an earlier
// holder's command until its --grace runs out, so the command starts with
// it only --grace after; a shard handed over comes at once.
func TestShardsRunWaitsGraceForAShardNotHandedOver(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	url := startBroker(t, time.Second)
	script := filepath.Join(t.TempDir(), "worker.sh")
	if err := os.WriteFile(script, []byte(shardWorker), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(id string) *proc {
		return startConclave(t, nil, "--server", url, "shards", "run", "--identity", id, "--grace", grace.String(), "jobs", "2", "--", script)
	}
	r1 := run("r1")
	r1.stderr.waitFor(t, 0, regexp.MustCompile(`holding shard \d of jobs`))
	assigned := time.Now()
	r1.stdout.waitFor(t, 0, regexp.MustCompile(`^started r1 jobs 0,1 `))
	if waited := time.Since(assigned); waited < grace-500*time.Millisecond {
		t.Fatalf("r1 started its command %v after taking new shards; want --grace (%v)", waited, grace)
	}
	mustContain(t, "r1's log", r1.stderr.String(), "its command starts with it in 3s (--grace)")

	r2 := run("r2")
	r2.stderr.waitFor(t, 0, regexp.MustCompile(`holding shard \d of jobs`))
	handed := time.Now()
	r2.stdout.waitFor(t, 0, regexp.MustCompile(`^started r2 jobs \d `))
	if waited := time.Since(handed); waited > grace-time.Second {
		t.Fatalf("r2 started its command %v after a shard was handed to it; want at once", waited)
	}
	if strings.Contains(r2.stderr.String(), "(--grace)") {
		t.Fatalf("r2 waited for a shard handed over:\n%s", r2.stderr.String())
	}
}
