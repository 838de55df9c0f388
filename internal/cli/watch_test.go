package cli_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// watchLine is one line of watch --json as a script reads it.
type watchLine struct {
	Time           string  `json:"time"`
	Election       string  `json:"election"`
	Event          string  `json:"event"`
	State          string  `json:"state"`
	Leader         string  `json:"leader"`
	PreviousLeader string  `json:"previous_leader"`
	ReleasedBy     string  `json:"released_by"`
	Token          *uint64 `json:"token"`
	Revision       uint64  `json:"revision"`
	Written        *string `json:"written"`
	ExpiresAt      *string `json:"expires_at"`
}

// TestWatch follows every election in text and one election in JSON while
// leaders win, renew, release, are removed and expire.
func TestWatch(t *testing.T) {
	// Not parallel: a key of a 2s TTL must still be held when the watch starts.
	url := startBroker(t, 2*time.Second)
	kv := electionBucket(t, url)

	// A leader that will never renew: it leads when the watch starts, so
	// its token is unknown, and its key expires during the test.
	ghostRev, err := kv.Create(testCtx(t), "old", []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	all := startConclave(t, nil, "--server", url, "election", "watch", "--verbose")
	one := startConclave(t, nil, "--server", url, "election", "watch", "job", "--json")
	all.stdout.waitFor(t, 0, regexp.MustCompile(`  current\s+old: ghost leads, revision `+itoa(ghostRev)+` \(token unknown`))
	one.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"current"`))
	// With renewals, as a script that merges the streams reads it.
	merged := startConclave(t, nil, "--server", url, "election", "watch", "job", "--json", "--verbose")
	merged.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"current"`))

	// A new election: the watch of the whole bucket discovers the key and
	// reports the term's start with its token. (w1 stops without releasing:
	// the test writes its release marker, as the campaign does.)
	js := jetStream(t, url)
	c1 := campaign(t, js, "w1", "job", streams.WithReleaseOnStop(false))
	term := c1.waitLeading(t)
	_, m := all.stdout.waitFor(t, 0, regexp.MustCompile(`  elected\s+job: w1/`+c1.e.Instance()+` leads, token (\d+)$`))
	if m[1] != itoa(term.Token()) {
		t.Errorf("watch reported token %s, the term's is %d", m[1], term.Token())
	}
	all.stdout.waitFor(t, 0, regexp.MustCompile(`  renewed\s+job: w1/`+c1.e.Instance()+` renewed, revision \d+ \(token `+itoa(term.Token())+`\)$`))

	// Graceful release: the holder's release marker.
	c1.stop()
	marker := publishRelease(t, url, "job", "w1", revisionOf(t, kv, "job"))
	i, _ := all.stdout.waitFor(t, 0, regexp.MustCompile(`  released\s+job: released by w1, revision `+itoa(marker)+`: it stepped down; a candidate can lead at once$`))

	// An empty value is not a release: a removal.
	blankRev, err := kv.Create(testCtx(t), "blank", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	all.stdout.waitFor(t, 0, regexp.MustCompile(`  elected\s+blank: x leads, token `+itoa(blankRev)+`$`))
	emptied, err := kv.Put(testCtx(t), "blank", nil)
	if err != nil {
		t.Fatal(err)
	}
	all.stdout.waitFor(t, 0, regexp.MustCompile(`  removed\s+blank: key removed while x led, revision `+itoa(emptied)+`: a forced stand-down$`))

	// Forced stand-down: the key deleted under a leader.
	c2 := campaign(t, js, "w2", "job")
	term2 := c2.waitLeading(t)
	i, _ = all.stdout.waitFor(t, i, regexp.MustCompile(`  elected\s+job: w2/`+c2.e.Instance()+` leads, token `+itoa(term2.Token())+`$`))
	if err := kv.Delete(testCtx(t), "job"); err != nil {
		t.Fatal(err)
	}
	all.stdout.waitFor(t, i, regexp.MustCompile(`  removed\s+job: key removed while w2/`+c2.e.Instance()+` led, revision \d+: a forced stand-down$`))

	// Expiry: the ghost never renewed.
	all.stdout.waitFor(t, 0, regexp.MustCompile(`  expired\s+old: ghost stopped renewing: its key expired \(last revision `+itoa(ghostRev)+`\)$`))
	c2.stop()

	for _, p := range []*proc{all, one, merged} {
		p.signal(syscall.SIGINT)
		if code := p.wait(); code != 0 {
			t.Errorf("watch exited with status %d after SIGINT, want 0", code)
		}
	}

	// The JSON watch of "job" alone saw the same story.
	lines, _ := one.stdout.snapshot()
	var events []watchLine
	for _, l := range lines {
		var w watchLine
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("watch --json line %q: %v", l, err)
		}
		if w.Election != "job" {
			t.Errorf("watch job reported election %q", w.Election)
		}
		if _, err := time.Parse(time.RFC3339, w.Time); err != nil {
			t.Errorf("time %q: %v", w.Time, err)
		}
		if w.Event == "renewed" {
			t.Errorf("renewal reported without --verbose: %s", l)
		}
		events = append(events, w)
	}
	want := []string{
		"current absent ",
		fmt.Sprintf("elected held w1 token=%d", term.Token()),
		"released released  prev=w1 by=w1",
		fmt.Sprintf("elected held w2 token=%d", term2.Token()),
		"removed removed  prev=w2",
	}
	var got []string
	for _, e := range events {
		s := e.Event + " " + e.State + " " + e.Leader
		if e.Token != nil {
			s += fmt.Sprintf(" token=%d", *e.Token)
		}
		if e.PreviousLeader != "" {
			s += " prev=" + e.PreviousLeader
		}
		if e.ReleasedBy != "" {
			s += " by=" + e.ReleasedBy
		}
		got = append(got, s)
	}
	// The deposed w2 takes the key again a TTL later: that may or may not
	// have been seen before the interrupt.
	if len(got) < len(want) {
		t.Fatalf("watch job --json reported\n%q\nwant it to begin with\n%q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("watch job --json reported\n%q\nwant it to begin with\n%q", got, want)
		}
	}
	// Standard error is JSON too (the "waiting for it to begin" line), so
	// that 2>&1 stays JSON; previous_leader is set only on released,
	// removed and expired events, renewals included.
	for _, p := range []*proc{one, merged} {
		errLines, _ := p.stderr.snapshot()
		if len(errLines) == 0 {
			t.Errorf("watch %s said nothing on standard error; want its waiting line", p.name)
		}
		for _, l := range errLines {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil || v["event"] == nil || v["time"] == nil {
				t.Errorf("watch %s printed a line on standard error that is not a JSON event: %q", p.name, l)
			}
		}
	}
	renewals := 0
	for _, l := range func() []string { ls, _ := merged.stdout.snapshot(); return ls }() {
		var w watchLine
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("watch --json line %q: %v", l, err)
		}
		if w.Event == "renewed" {
			renewals++
		}
		switch w.Event {
		case "released", "removed", "expired":
		default:
			if w.PreviousLeader != "" {
				t.Errorf("a %s event has previous_leader %q, want it only on released, removed and expired: %s", w.Event, w.PreviousLeader, l)
			}
		}
	}
	if renewals == 0 {
		t.Error("watch job --json --verbose reported no renewal")
	}

	if e := events[1]; e.Written == nil || e.ExpiresAt == nil {
		t.Errorf("elected event without written or expires_at: %+v", e)
	} else {
		written, _ := time.Parse(time.RFC3339, *e.Written)
		expires, _ := time.Parse(time.RFC3339, *e.ExpiresAt)
		if expires.Sub(written) != 2*time.Second {
			t.Errorf("expires_at - written = %v, want the TTL 2s", expires.Sub(written))
		}
	}
}

// TestWatchSaysWhenTheBrokerGoesAway: with the broker stopped, watch prints
// a disconnected line, and a reconnected line once it is back, in text and
// in JSON, and then goes on reporting changes (issue 20: 35 s of only
// "consumer not active" warnings).
func TestWatchSaysWhenTheBrokerGoesAway(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 1, func(_ int, cfg *config.Config) { cfg.LeaderElectionTTL = 2 * time.Second })
	url := c.ClientURLs()[0]
	text := startConclave(t, nil, "--server", url, "election", "watch", "job")
	asJSON := startConclave(t, nil, "--server", url, "election", "watch", "job", "--json")
	text.stderr.waitFor(t, 0, regexp.MustCompile(`waiting for it to begin`))
	asJSON.stderr.waitFor(t, 0, regexp.MustCompile(`waiting for it to begin`))

	c.Stop(0)
	text.stdout.waitFor(t, 0, regexp.MustCompile(`  disconnected  lost the connection to nats://127\.0\.0\.1:\d+.*: reconnecting$`))
	_, m := asJSON.stdout.waitFor(t, 0, regexp.MustCompile(`^(\{.*"event":"disconnected".*\})$`))
	var line struct{ Time, Event, Server string }
	if err := json.Unmarshal([]byte(m[1]), &line); err != nil || line.Time == "" || line.Server != url {
		t.Errorf("disconnected line %s: %v; want its time and the server %s", m[1], err, url)
	}

	c.Restart(0)
	text.stdout.waitFor(t, 0, regexp.MustCompile(`  reconnected  connected to nats://127\.0\.0\.1:\d+: the watch resumes$`))
	asJSON.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"reconnected","server":"`+regexp.QuoteMeta(url)+`"`))

	// And it still follows the election: a leader that began while the
	// watch was still resuming is reported as current, as after any
	// restart of the watch.
	candidate := campaign(t, jetStream(t, url), "w1", "job")
	candidate.waitLeading(t)
	text.stdout.waitFor(t, 0, regexp.MustCompile(`  (elected|current)\s+job: w1/`+candidate.e.Instance()+` leads, `))
	asJSON.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"(elected|current)".*"leader":"w1"`))
	text.signal(syscall.SIGINT)
	asJSON.signal(syscall.SIGINT)
	if code := text.wait(); code != 0 {
		t.Errorf("watch exited %d after Ctrl-C, want 0", code)
	}
	asJSON.wait()
}

// TestWatchOfManyElectionsStartsThemTogether: watching a bucket of 40
// elections prints each one's current state, in order, once all their
// observers have started together: in about the time one takes to find
// its state, where one after another took a second each past the first
// few (the shared watch takes new keys in at most once a second).
func TestWatchOfManyElectionsStartsThemTogether(t *testing.T) {
	t.Parallel()
	const n = 40
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	var keys []string
	for i := range n {
		key := fmt.Sprintf("many-%02d", i)
		if _, err := kv.Create(testCtx(t), key, []byte("holder")); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	began := time.Now()
	w := startConclave(t, nil, "--server", url, "election", "watch", "--json")
	last, _ := w.stdout.waitFor(t, 0, regexp.MustCompile(`"election":"many-39"`))
	took := time.Since(began)
	lines, _ := w.stdout.snapshot()
	var order []string
	for _, line := range lines[:last+1] {
		var l watchLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if l.Event != "current" {
			t.Fatalf("line %q: want each election's current state first", line)
		}
		order = append(order, l.Election)
	}
	if fmt.Sprint(order) != fmt.Sprint(keys) {
		t.Errorf("the initial states came as %v, want each election once, in order", order)
	}
	t.Logf("%d elections' current states printed %v after the watch started", n, took)
	if took > 15*time.Second {
		t.Errorf("the %d elections' current states took %v: their observers did not start together (one after another takes about %ds)", n, took, n-15)
	}
}
