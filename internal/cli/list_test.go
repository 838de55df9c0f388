package cli_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// listOutput is list --json's output as a script reads it.
type listOutput struct {
	Bucket struct {
		Name       string  `json:"name"`
		TTLSeconds float64 `json:"ttl_seconds"`
	} `json:"bucket"`
	Elections []electionItem `json:"elections"`
}

type electionItem struct {
	Election          string   `json:"election"`
	State             string   `json:"state"`
	Leader            string   `json:"leader"`
	ReleasedBy        string   `json:"released_by"`
	Revision          uint64   `json:"revision"`
	Written           string   `json:"written"`
	WrittenAgeSeconds float64  `json:"written_age_seconds"`
	ExpiresAt         *string  `json:"expires_at"`
	ExpiresInSeconds  *float64 `json:"expires_in_seconds"`
}

// listSetup starts a broker with a one minute TTL, so that nothing expires
// during the test, with a leader in "alpha", "beta" released by its holder
// b1.example.net, and "delta", "epsilon" and "zeta" removed: deleted,
// emptied (an empty value is not a release) and purged.
func listSetup(t *testing.T) (url string, kv jetstream.KeyValue, alphaRev uint64, removed map[string]uint64) {
	t.Helper()
	url = startBroker(t, time.Minute)
	kv = electionBucket(t, url)
	c1 := campaign(t, jetStream(t, url), "c1.example.net", "alpha")
	c1.waitLeading(t)
	alphaRev = revisionOf(t, kv, "alpha")
	removed = map[string]uint64{}
	rev, err := kv.Create(testCtx(t), "beta", []byte("b1.example.net"))
	if err != nil {
		t.Fatal(err)
	}
	removed["beta"] = publishRelease(t, url, "beta", "b1.example.net", rev)
	for _, key := range []string{"delta", "epsilon", "zeta"} {
		if _, err := kv.Create(testCtx(t), key, []byte("gone.example.net")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(testCtx(t), "delta"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), "epsilon", nil); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(testCtx(t), "zeta"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"delta", "epsilon", "zeta"} {
		hist, err := kv.History(testCtx(t), key)
		if err != nil || len(hist) == 0 {
			t.Fatalf("%s's latest message: %v", key, err)
		}
		removed[key] = hist[len(hist)-1].Revision()
	}
	return url, kv, alphaRev, removed
}

// revisionOf returns key's latest revision.
func revisionOf(t *testing.T, kv jetstream.KeyValue, key string) uint64 {
	t.Helper()
	ent, err := kv.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return ent.Revision()
}

func TestListTable(t *testing.T) {
	t.Parallel()
	url, kv, alphaRev, removed := listSetup(t)
	r := conclave(t, "--server", url, "election", "list")
	mustSucceed(t, r)
	alphaLatest := revisionOf(t, kv, "alpha") // a renewal may have moved it

	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 6 {
		t.Fatalf("want a header and 5 rows, got:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`^ELECTION\s+LEADER\s+REVISION\s+LAST WRITE\s+EXPIRES$`).MatchString(lines[0]) {
		t.Errorf("header is %q", lines[0])
	}
	rows := []*regexp.Regexp{
		regexp.MustCompile(`^alpha\s+c1\.example\.net\s+(\d+)\s+[0-9hms.]+ ago\s+in [0-9hms.]+$`),
		regexp.MustCompile(`^beta\s+\(released by b1\.example\.net\)\s+` + itoa(removed["beta"]) + `\s+[0-9hms.]+ ago\s+-$`),
		regexp.MustCompile(`^delta\s+\(removed\)\s+` + itoa(removed["delta"]) + `\s+[0-9hms.]+ ago\s+-$`),
		regexp.MustCompile(`^epsilon\s+\(removed\)\s+` + itoa(removed["epsilon"]) + `\s+[0-9hms.]+ ago\s+-$`),
		regexp.MustCompile(`^zeta\s+\(removed\)\s+` + itoa(removed["zeta"]) + `\s+[0-9hms.]+ ago\s+-$`),
	}
	for i, re := range rows {
		m := re.FindStringSubmatch(lines[i+1])
		if m == nil {
			t.Errorf("row %d is %q, want it to match %q", i+1, lines[i+1], re)
			continue
		}
		if i == 0 {
			if rev, _ := strconv.ParseUint(m[1], 10, 64); rev < alphaRev || rev > alphaLatest {
				t.Errorf("alpha's revision is %s, want %d (or up to %d after renewals)", m[1], alphaRev, alphaLatest)
			}
		}
	}
	mustContain(t, "list", r.stdout, "5 elections in CHORIA_LEADER_ELECTION, TTL 1m0s", "fencing token only if")
}

func TestListJSON(t *testing.T) {
	t.Parallel()
	url, _, _, removed := listSetup(t)
	before := time.Now()
	r := conclave(t, "--server", url, "election", "list", "--json")
	mustSucceed(t, r)

	var out listOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("list --json is not the documented JSON: %v\n%s", err, r.stdout)
	}
	if out.Bucket.Name != "CHORIA_LEADER_ELECTION" || out.Bucket.TTLSeconds != 60 {
		t.Errorf("bucket %+v; want CHORIA_LEADER_ELECTION, 60", out.Bucket)
	}
	if len(out.Elections) != 5 {
		t.Fatalf("want 5 elections, got %+v", out.Elections)
	}
	alpha, beta := out.Elections[0], out.Elections[1]
	if alpha.Election != "alpha" || alpha.State != "held" || alpha.Leader != "c1.example.net" || alpha.ReleasedBy != "" || alpha.Revision == 0 {
		t.Errorf("alpha is %+v", alpha)
	}
	if beta.Election != "beta" || beta.State != "released" || beta.ReleasedBy != "b1.example.net" || beta.Leader != "" || beta.Revision != removed["beta"] {
		t.Errorf("beta is %+v, want released by b1.example.net at revision %d", beta, removed["beta"])
	}
	for i, key := range []string{"delta", "epsilon", "zeta"} {
		e := out.Elections[2+i]
		if e.Election != key || e.State != "removed" || e.Leader != "" || e.ReleasedBy != "" || e.Revision != removed[key] {
			t.Errorf("%s is %+v, want removed at revision %d", key, e, removed[key])
		}
	}
	for _, e := range out.Elections {
		written, err := time.Parse(time.RFC3339, e.Written)
		if err != nil {
			t.Errorf("%s: written %q is not RFC 3339: %v", e.Election, e.Written, err)
			continue
		}
		if written.After(before.Add(time.Second)) || e.WrittenAgeSeconds < 0 || e.WrittenAgeSeconds > 60 {
			t.Errorf("%s: written %v, age %vs: not a recent write", e.Election, written, e.WrittenAgeSeconds)
		}
		if held := e.State == "held"; held != (e.ExpiresAt != nil) || held != (e.ExpiresInSeconds != nil) {
			t.Errorf("%s: expires_at %v, expires_in_seconds %v: want them exactly when held", e.Election, e.ExpiresAt, e.ExpiresInSeconds)
		}
	}
	expires, err := time.Parse(time.RFC3339, *alpha.ExpiresAt)
	if err != nil {
		t.Fatalf("expires_at %q: %v", *alpha.ExpiresAt, err)
	}
	written, _ := time.Parse(time.RFC3339, alpha.Written)
	if got := expires.Sub(written); got != time.Minute {
		t.Errorf("expires_at - written = %v, want the TTL 1m", got)
	}
	if *alpha.ExpiresInSeconds <= 0 || *alpha.ExpiresInSeconds > 60 {
		t.Errorf("expires_in_seconds %v, want within the TTL", *alpha.ExpiresInSeconds)
	}
}

// TestListAbsentKey checks that a key that expired is gone from the list,
// in a bucket of its own with a short TTL (--bucket).
func TestListAbsentKey(t *testing.T) {
	// Not parallel: a key of a 1s TTL must still be held when list reads it.
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)
	kv, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "SHORT", TTL: time.Second, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(testCtx(t), "gamma", []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	r := conclave(t, "--server", url, "election", "list", "--bucket", "SHORT")
	mustSucceed(t, r)
	mustContain(t, "list before expiry", r.stdout, "gamma", "ghost")

	deadline := time.Now().Add(eventTimeout)
	for {
		_, err := kv.Get(testCtx(t), "gamma")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gamma did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r = conclave(t, "--server", url, "election", "list", "--bucket", "SHORT")
	mustSucceed(t, r)
	if strings.Contains(r.stdout, "gamma") || !strings.Contains(r.stdout, "No elections in SHORT") {
		t.Errorf("an expired key is still listed:\n%s", r.stdout)
	}
	r = conclave(t, "--server", url, "election", "list", "--bucket", "SHORT", "--json")
	mustSucceed(t, r)
	var out listOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Elections == nil || len(out.Elections) != 0 {
		t.Errorf("want an empty elections array, got %v (%v):\n%s", out.Elections, err, r.stdout)
	}
}
