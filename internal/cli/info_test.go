package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

// infoOutput is info --json's output as a script reads it.
type infoOutput struct {
	Elections []electionItem `json:"elections"`
	Bucket    struct {
		Name                  string  `json:"name"`
		TTLSeconds            float64 `json:"ttl_seconds"`
		Replicas              int     `json:"replicas"`
		History               int64   `json:"history"`
		Storage               string  `json:"storage"`
		LimitMarkers          bool    `json:"limit_markers"`
		LimitMarkerTTLSeconds float64 `json:"limit_marker_ttl_seconds"`
		PerKeyTTL             bool    `json:"per_key_ttl"`
		MaxValueSize          int32   `json:"max_value_size"`
		Cluster               string  `json:"cluster"`
		Values                uint64  `json:"values"`
		Consumers             int     `json:"consumers"`
		MaxConsumers          int     `json:"max_consumers"`
		MaxConsumersSource    string  `json:"max_consumers_source"`
		MaxConsumersAssumed   bool    `json:"max_consumers_assumed"`
	} `json:"bucket"`
	Warnings []string `json:"warnings"`
}

// election is the election info NAME shows, nil without NAME.
func (o infoOutput) election() *electionItem {
	if len(o.Elections) == 0 {
		return nil
	}
	return &o.Elections[0]
}

func TestInfo(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	campaign(t, jetStream(t, url), "c1.example.net", "alpha").waitLeading(t)

	r := conclave(t, "--server", url, "election", "info", "alpha")
	mustSucceed(t, r)
	mustContain(t, "info", r.stdout,
		"Election:", "alpha", "Leader:", "c1.example.net", "Revision:", "fencing token only if it began the term",
		"Last write:", "Expires:", "unless renewed",
		"Bucket:", "CHORIA_LEADER_ELECTION", "TTL:", "1m0s", "Replicas:", "History:", "Storage:", "file",
		"Limit markers:", "off", "Max value size:", "1024 B",
		"No problems found")
	if strings.Contains(r.stdout, "WARNINGS") {
		t.Errorf("warnings for the broker's own bucket:\n%s", r.stdout)
	}

	r = conclave(t, "--server", url, "election", "info", "alpha", "--json")
	mustSucceed(t, r)
	var out infoOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	if out.election() == nil || out.election().Election != "alpha" || out.election().State != "held" || out.election().Leader != "c1.example.net" || out.election().ExpiresAt == nil {
		t.Errorf("election is %+v", out.election())
	}
	b := out.Bucket
	if b.Name != "CHORIA_LEADER_ELECTION" || b.TTLSeconds != 60 || b.Replicas != 1 || b.History != 1 || b.Storage != "file" || b.LimitMarkers || b.MaxValueSize != 1024 {
		t.Errorf("bucket is %+v", b)
	}
	if out.Warnings == nil || len(out.Warnings) != 0 {
		t.Errorf("warnings is %#v, want []", out.Warnings)
	}

	// Without NAME: the bucket only.
	r = conclave(t, "--server", url, "election", "info")
	mustSucceed(t, r)
	if strings.Contains(r.stdout, "Election:") || !strings.Contains(r.stdout, "TTL:") {
		t.Errorf("info without NAME:\n%s", r.stdout)
	}
}

func TestInfoWarnings(t *testing.T) {
	// Not parallel: a key of a 500ms or 2s TTL must still be held when info reads it.
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)
	for _, tc := range []struct {
		name string
		cfg  jetstream.KeyValueConfig
		want []string // in the text output
	}{
		{
			name: "history and limit markers",
			cfg:  jetstream.KeyValueConfig{Bucket: "HISTORY5", TTL: 2 * time.Second, History: 5, LimitMarkerTTL: time.Second},
			want: []string{"history is 5", "limit markers are on", "Choria's candidates cannot take it over"},
		},
		{
			name: "no TTL",
			cfg:  jetstream.KeyValueConfig{Bucket: "NOTTL", History: 1},
			want: []string{"the bucket has no TTL", "never expires"},
		},
		{
			name: "TTL below the minimum",
			cfg:  jetstream.KeyValueConfig{Bucket: "TINYTTL", TTL: 500 * time.Millisecond, History: 1},
			want: []string{"TTL 500ms is below 1s"},
		},
		{
			name: "TTL above an hour",
			cfg:  jetstream.KeyValueConfig{Bucket: "LONGTTL", TTL: 2 * time.Hour, History: 1},
			want: []string{"TTL 2h0m0s is over 1h0m0s"},
		},
		{
			name: "memory storage",
			cfg:  jetstream.KeyValueConfig{Bucket: "MEMORY", TTL: time.Minute, History: 1, Storage: jetstream.MemoryStorage},
			want: []string{"memory storage", "fencing tokens repeat"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.TTL == 0 || tc.cfg.TTL >= time.Minute {
				// Its key outlives any wait for a turn: it runs beside
				// the others. A key of a shorter TTL must still be held
				// when info reads it: those cases, and so this test, run
				// alone.
				t.Parallel()
			}
			kv, err := js.CreateKeyValue(testCtx(t), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Create(testCtx(t), "job", []byte("n1")); err != nil {
				t.Fatal(err)
			}
			r := conclave(t, "--server", url, "election", "info", "job", "--bucket", tc.cfg.Bucket)
			mustSucceed(t, r)
			mustContain(t, "info", r.stdout, append([]string{"WARNINGS:", "Leader:", "n1"}, tc.want...)...)

			r = conclave(t, "--server", url, "election", "info", "--bucket", tc.cfg.Bucket, "--json")
			mustSucceed(t, r)
			var out infoOutput
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("info --json: %v\n%s", err, r.stdout)
			}
			joined := strings.Join(out.Warnings, "\n")
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("JSON warnings %q lack %q", out.Warnings, w)
				}
			}
			if out.election() != nil {
				t.Errorf("election without NAME: %+v", out.election())
			}
		})
	}
}

// TestInfoOneReplicaOnCluster checks the warning about a bucket with one
// replica on a cluster of brokers.
func TestInfoOneReplicaOnCluster(t *testing.T) {
	// Not parallel: it starts a cluster of three.
	if testing.Short() {
		t.Skip("starts a cluster of three brokers")
	}
	c := brokertest.StartCluster(t, 3, func(_ int, cfg *config.Config) { cfg.LeaderElectionReplicas = 1 })
	r := conclave(t, "--server", strings.Join(c.ClientURLs(), ","), "election", "info", "--json")
	mustSucceed(t, r)
	var out infoOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	if out.Bucket.Replicas != 1 || out.Bucket.Cluster == "" {
		t.Errorf("bucket is %+v, want 1 replica on a named cluster", out.Bucket)
	}
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "1 replica on a cluster") {
		t.Errorf("warnings %q, want the one about 1 replica on a cluster", out.Warnings)
	}
}

// TestInfoReleasedAndRemoved checks what info says of a key its holder
// released (a release marker) and of one someone emptied (not a release).
func TestInfoReleasedAndRemoved(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	rev, err := kv.Create(testCtx(t), "beta", []byte("b1.example.net"))
	if err != nil {
		t.Fatal(err)
	}
	marker := publishRelease(t, url, "beta", "b1.example.net", rev)
	if _, err := kv.Create(testCtx(t), "blank", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), "blank", nil); err != nil {
		t.Fatal(err)
	}

	r := conclave(t, "--server", url, "election", "info", "beta")
	mustSucceed(t, r)
	mustContain(t, "info beta", r.stdout, "Leader:", "none: released by b1.example.net (it stepped down; a candidate can lead at once)", "Revision:", itoa(marker))
	if strings.Contains(r.stdout, "Expires:") {
		t.Errorf("a released key has no expiry:\n%s", r.stdout)
	}
	r = conclave(t, "--server", url, "election", "info", "beta", "--json")
	mustSucceed(t, r)
	var out infoOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	if e := out.election(); e == nil || e.State != "released" || e.ReleasedBy != "b1.example.net" || e.Leader != "" || e.Revision != marker || e.ExpiresAt != nil {
		t.Errorf("election is %+v, want released by b1.example.net at revision %d", e, marker)
	}

	r = conclave(t, "--server", url, "election", "info", "blank")
	mustSucceed(t, r)
	mustContain(t, "info blank", r.stdout, "none: removed (emptied) by someone other than the leader", "a forced stand-down")
	if strings.Contains(r.stdout, "released") {
		t.Errorf("an empty value reported as a release:\n%s", r.stdout)
	}
}

// TestInfoShowsAReplicaOffline: with one of three brokers stopped, info
// names the replica that is not in step and warns that the cluster can
// lose no more, instead of "Replicas: 3" and no problems (issue 20).
func TestInfoShowsAReplicaOffline(t *testing.T) {
	// Not parallel: a cluster of three, whose replicas must first be in step.
	c := brokertest.StartCluster(t, 3, nil)
	url := c.ClientURLs()[0]
	r := conclave(t, "--server", url, "election", "info")
	mustSucceed(t, r)
	mustContain(t, "info of a whole cluster", r.stdout, "leader node-", "No problems found")

	// A replica that does not lead the bucket: the bucket keeps its
	// leader, and info answers at once.
	stopped := (c.BucketLeader() + 1) % 3
	if stopped == 0 {
		stopped = (stopped + 1) % 3 // keep the node info connects to
	}
	name := fmt.Sprintf("node-%d", stopped)
	c.Stop(stopped)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = conclave(t, "--server", url, "election", "info")
		mustSucceed(t, r)
		if strings.Contains(r.stdout, name+" offline") || strings.Contains(r.stdout, name+" behind") || strings.Contains(r.stdout, name+" not current") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("info never showed %s out of step, 30s after it stopped:\n%s", name, r.stdout)
		}
		time.Sleep(200 * time.Millisecond) // polling the broker's view, which changes on its own clock
	}
	mustContain(t, "info with a replica stopped", r.stdout, "WARNINGS:", "replica "+name+" of the bucket is", "just a majority")
	if strings.Contains(r.stdout, "No problems found") {
		t.Errorf("info says no problems with a replica stopped:\n%s", r.stdout)
	}
	r = conclave(t, "--server", url, "election", "info", "--json")
	mustSucceed(t, r)
	var out infoOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(out.Warnings, "\n"), "replica "+name) {
		t.Errorf("info --json does not warn of %s: %v", name, out.Warnings)
	}
}
