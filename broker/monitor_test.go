package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

func TestMonitoringEndpoints(t *testing.T) {
	b := brokertest.StartSingle(t, func(c *config.Config) {
		c.Identity = "watched-node"
		c.StatsPort = -1
	})
	base := b.StatsURL()
	if base == "" || !strings.HasSuffix(base, b.MetricsAddr()) {
		t.Fatalf("StatsURL %q, MetricsAddr %q", base, b.MetricsAddr())
	}

	var varz struct {
		ServerName string `json:"server_name"`
		JetStream  struct {
			Config struct {
				SyncAlways bool `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.Unmarshal(get(t, base+"/varz"), &varz); err != nil {
		t.Fatalf("/varz: %v", err)
	}
	if varz.ServerName != "watched-node" || !varz.JetStream.Config.SyncAlways {
		t.Errorf("/varz: server name %q, sync always %v; want the identity and true", varz.ServerName, varz.JetStream.Config.SyncAlways)
	}
	for _, path := range []string{"/connz", "/routez", "/jsz", "/healthz"} {
		var doc map[string]any
		if err := json.Unmarshal(get(t, base+path), &doc); err != nil {
			t.Errorf("%s: not JSON: %v", path, err)
		}
	}

	ctx := testContext(t, 30*time.Second)
	js := connect(t, b.ClientURL())
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	for _, key := range []string{"a", "b"} {
		if _, err := kv.Create(ctx, key, []byte("watched-node")); err != nil {
			t.Fatalf("Create %s: %v", key, err)
		}
	}

	metrics := string(get(t, base+"/metrics"))
	want := map[string]string{
		broker.MetricUp:                     "1",
		broker.MetricJetStreamEnabled:       "1",
		broker.MetricJetStreamMetaLeader:    "1",
		broker.MetricElectionBucketMessages: "2",
		broker.MetricRoutes:                 "0",
	}
	for name, value := range want {
		line := name + `{identity="watched-node"} ` + value
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	conns := regexp.MustCompile(broker.MetricConnections + `\{identity="watched-node"\} (\d+)`).FindStringSubmatch(metrics)
	if conns == nil || conns[1] == "0" {
		t.Errorf("/metrics connections: %v, want at least our client", conns)
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if !strings.Contains(metrics, "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	b.Shutdown()
	client := &http.Client{Timeout: 2 * time.Second}
	if resp, err := client.Get(base + "/varz"); err == nil {
		resp.Body.Close()
		t.Fatal("monitoring still answers after Shutdown")
	}
	client.CloseIdleConnections()
}

func TestMonitoringOff(t *testing.T) {
	b := brokertest.StartSingle(t, nil)
	if b.StatsURL() != "" || b.MetricsAddr() != "" {
		t.Fatalf("StatsURL %q, MetricsAddr %q with stats port 0", b.StatsURL(), b.MetricsAddr())
	}
}

// get fetches url and returns the body, failing the test unless it is 200.
func get(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return body
}
