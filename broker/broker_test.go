package broker_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

func TestNewValidatesConfig(t *testing.T) {
	base := func(t *testing.T) *config.Config { return brokertest.Config(t, "node-a") }
	cases := []struct {
		name   string
		mutate func(*config.Config)
		target error
		says   []string
	}{
		{"no identity", func(c *config.Config) { c.Identity = "" }, broker.ErrInvalidConfig, []string{"identity is empty"}},
		{"identity with space", func(c *config.Config) { c.Identity = "a b" }, broker.ErrInvalidConfig, []string{`"a b"`, "white space"}},
		{"identity with a wildcard", func(c *config.Config) { c.Identity = "node*" }, broker.ErrInvalidConfig, []string{`"node*"`, "wildcard"}},
		{"no store", func(c *config.Config) { c.StreamStore = "" }, broker.ErrInvalidConfig, []string{"plugin.choria.network.stream.store"}},
		{"client port 0", func(c *config.Config) { c.ClientPort = 0 }, broker.ErrInvalidConfig, []string{"plugin.choria.network.client_port is 0"}},
		{"client port too big", func(c *config.Config) { c.ClientPort = 70000 }, broker.ErrInvalidConfig, []string{"70000"}},
		{"peer port negative", func(c *config.Config) { c.PeerPort = -2 }, broker.ErrInvalidConfig, []string{"plugin.choria.network.peer_port is -2"}},
		{"stats port negative", func(c *config.Config) { c.StatsPort = -5 }, broker.ErrInvalidConfig, []string{"plugin.choria.stats_port"}},
		{"same client and peer port", func(c *config.Config) { c.ClientPort, c.PeerPort = 4222, 4222 }, broker.ErrInvalidConfig, []string{"different ports"}},
		{"peers without peer port", func(c *config.Config) { c.Peers = []string{"nats://10.0.0.2:5222"} }, broker.ErrInvalidConfig, []string{"plugin.choria.network.peer_port is 0"}},
		{"bad peer", func(c *config.Config) { c.PeerPort = 5222; c.Peers = []string{"http://x:1"} }, broker.ErrInvalidConfig, []string{`scheme "http"`}},
		{"peer without port", func(c *config.Config) { c.PeerPort = 5222; c.Peers = []string{"nats://x"} }, broker.ErrInvalidConfig, []string{"want host:port"}},
		{"peers only self", func(c *config.Config) { c.PeerPort = 5222; c.Peers = []string{"127.0.0.1:5222"} }, broker.ErrInvalidConfig, []string{"names only this server"}},
		{"TTL too short", func(c *config.Config) { c.LeaderElectionTTL = 100 * time.Millisecond }, broker.ErrInvalidConfig, []string{"leader_election_ttl is 100ms"}},
		{"replicas 0", func(c *config.Config) { c.LeaderElectionReplicas = 0 }, broker.ErrInvalidConfig, []string{"leader_election_replicas is 0"}},
		{"replicas 6", func(c *config.Config) { c.LeaderElectionReplicas = 6 }, broker.ErrInvalidConfig, []string{"1 to 5"}},
		{"file named", func(c *config.Config) { c.Path = "/etc/conclave.conf"; c.StreamStore = "" }, broker.ErrInvalidConfig, []string{"/etc/conclave.conf: "}},
		{
			"replicas 3 on a single node",
			func(c *config.Config) { c.LeaderElectionReplicas = 3 },
			broker.ErrNotEnoughServers,
			[]string{"plugin.choria.network.stream.leader_election_replicas is 3", "1 server", "to 1 or less"},
		},
		{
			"replicas 5 on three nodes",
			func(c *config.Config) {
				c.LeaderElectionReplicas = 5
				c.PeerPort = 5222
				c.Peers = []string{"nats://10.0.0.1:5222", "nats://10.0.0.2:5222", "nats://10.0.0.3:5222"}
			},
			broker.ErrNotEnoughServers,
			[]string{"is 5", "4 servers", "plugin.choria.network.peers", "to 4 or less"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base(t)
			tc.mutate(cfg)
			b, err := broker.New(cfg, nil)
			if !errors.Is(err, tc.target) {
				t.Fatalf("New: %v, want %v", err, tc.target)
			}
			if b != nil {
				t.Fatal("New returned a broker with an error")
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
	if _, err := broker.New(nil, nil); !errors.Is(err, broker.ErrInvalidConfig) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := broker.New(base(t), nil, broker.WithClusterName("has space")); !errors.Is(err, broker.ErrInvalidConfig) {
		t.Errorf("WithClusterName with a space: %v", err)
	}
}

func TestNewCountsClusterSize(t *testing.T) {
	host, _ := osHostname()
	cases := []struct {
		name  string
		peers []string
		want  int
	}{
		{"no peers", nil, 1},
		{"others only", []string{"nats://10.1.0.2:5222", "10.1.0.3:5222"}, 3},
		{"self included", []string{"nats://127.0.0.1:5222", "nats://10.1.0.2:5222", "nats://10.1.0.3:5222"}, 3},
		{"self by name", []string{"nats://localhost:5222", "nats://node-a:5222", "nats://10.1.0.2:5222"}, 2},
		{"self by host name", []string{"nats://" + host + ":5222", "nats://10.1.0.2:5222"}, 2},
		{"duplicates", []string{"nats://10.1.0.2:5222", "nats-route://10.1.0.2:5222", "10.1.0.2:5222"}, 2},
		{"same host, other port", []string{"nats://127.0.0.1:5223", "nats://127.0.0.1:5224"}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := brokertest.Config(t, "node-a")
			if tc.peers != nil {
				cfg.PeerPort = 5222
				cfg.Peers = tc.peers
			}
			b, err := broker.New(cfg, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if b.ClusterSize() != tc.want || b.BucketSpec().Replicas != tc.want {
				t.Fatalf("cluster size %d, replicas %d; want %d", b.ClusterSize(), b.BucketSpec().Replicas, tc.want)
			}
		})
	}
}

func TestStartAndShutdown(t *testing.T) {
	cfg := brokertest.Config(t, "lifecycle")
	cfg.SyncAlways = true
	log, hook := hookedLogger(logrus.InfoLevel)
	b, err := broker.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if b.ClientURL() != "" || b.Server() != nil || b.StatsURL() != "" || b.MetricsAddr() != "" || b.ClusterURL() != "" {
		t.Fatal("accessors return values before Start")
	}
	ctx := testContext(t, 30*time.Second)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Shutdown)
	if err := b.Start(ctx); !errors.Is(err, broker.ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}

	srv := b.Server()
	if srv.Name() != "lifecycle" {
		t.Errorf("server name %q, want the identity", srv.Name())
	}
	if !srv.JetStreamConfig().SyncAlways {
		t.Error("JetStream runs without SyncAlways")
	}
	if b.ClusterURL() != "" {
		t.Errorf("ClusterURL %q without a cluster", b.ClusterURL())
	}
	if r := b.ProvisionReport(); !r.Created {
		t.Errorf("ProvisionReport %q, want created", r)
	}

	js := connect(t, b.ClientURL())
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	if _, err := kv.Create(ctx, "app", []byte("lifecycle")); err != nil {
		t.Fatalf("Create: %v", err)
	}

	// Logs come through the entry: the broker's own and nats-server's.
	if !hasMessagePrefix(hook, "Created election bucket CHORIA_LEADER_ELECTION: TTL 1m0s, 1 replicas, history 1, max value size 1024 B, revisions from ") {
		t.Error("no provisioning log line")
	}
	if !hasComponentEntry(hook, "nats-server", logrus.InfoLevel) {
		t.Error("no nats-server log line at info level")
	}
	if hasComponentEntry(hook, "nats-server", logrus.DebugLevel) {
		t.Error("nats-server debug lines reached an info-level logger")
	}

	b.Shutdown()
	b.Shutdown()
	select {
	case <-b.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
	if srv.Running() {
		t.Fatal("server still running after Shutdown")
	}
}

func TestSyncAlwaysOff(t *testing.T) {
	b := brokertest.StartSingle(t, func(c *config.Config) { c.SyncAlways = false })
	if b.Server().JetStreamConfig().SyncAlways {
		t.Fatal("SyncAlways on although the config turned it off")
	}
}

func TestDebugLoggingReachesServer(t *testing.T) {
	cfg := brokertest.Config(t, "debugging")
	log, hook := hookedLogger(logrus.DebugLevel)
	b, err := broker.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	b.Shutdown()
	if !hasComponentEntry(hook, "nats-server", logrus.DebugLevel) {
		t.Error("no nats-server debug lines with a debug-level logger")
	}
	if hasComponentEntry(hook, "nats-server", logrus.TraceLevel) {
		t.Error("nats-server trace lines with a debug-level logger")
	}
}

func TestStartWithEndedContext(t *testing.T) {
	b, err := broker.New(brokertest.Config(t, "cancelled"), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start: %v, want context.Canceled", err)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("a failed Start left the broker running")
	}
	if err := b.Start(t.Context()); !errors.Is(err, broker.ErrShutdown) {
		t.Fatalf("Start after a failed Start: %v, want ErrShutdown", err)
	}
}

// loneClusterNode returns the configuration of one node of a three node
// cluster whose other nodes never start.
func loneClusterNode(t *testing.T) *config.Config {
	cfg := brokertest.Config(t, "lonely")
	ports := reservePorts(t, 3)
	cfg.PeerPort = ports[0]
	for _, p := range ports {
		cfg.Peers = append(cfg.Peers, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	return cfg
}

func TestStartGivesUpWhenTheClusterNeverForms(t *testing.T) {
	cfg := loneClusterNode(t)
	log, hook := hookedLogger(logrus.InfoLevel)
	b, err := broker.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if b.BucketSpec().Replicas != 3 {
		t.Fatalf("replicas %d, want 3", b.BucketSpec().Replicas)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err = b.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "JetStream not ready") {
		t.Fatalf("Start: %v, want the deadline and the last reason", err)
	}
	retries := 0
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "Election bucket CHORIA_LEADER_ELECTION not ready yet, retrying: JetStream not ready") {
			retries++
		}
	}
	if retries == 0 {
		t.Error("no retry was logged")
	}
}

func TestShutdownInterruptsStart(t *testing.T) {
	b, err := broker.New(loneClusterNode(t), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- b.Start(t.Context()) }()
	waitFor(t, 20*time.Second, "the server to run", func() bool { return b.ClientURL() != "" })
	b.Shutdown()
	select {
	case err := <-errc:
		if !errors.Is(err, broker.ErrShutdown) {
			t.Fatalf("Start: %v, want ErrShutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return after Shutdown")
	}
}

func TestRunReturnsWhenContextEnds(t *testing.T) {
	log, hook := hookedLogger(logrus.InfoLevel)
	b, err := broker.New(brokertest.Config(t, "runner"), log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	waitFor(t, 30*time.Second, "the broker to be ready", func() bool {
		return hasMessagePrefix(hook, "Broker runner ready")
	})
	js := connect(t, b.ClientURL())
	if _, err := js.KeyValue(ctx, bucket.Name); err != nil {
		t.Fatalf("KeyValue while running: %v", err)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("Run returned before the broker shut down")
	}
}

func hasComponentEntry(hook *test.Hook, component string, level logrus.Level) bool {
	for _, e := range hook.AllEntries() {
		if e.Level == level && e.Data["component"] == component {
			return true
		}
	}
	return false
}

func hasMessagePrefix(hook *test.Hook, prefix string) bool {
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, prefix) {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reservePorts returns n ports that were free a moment ago.
func reservePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		defer ln.Close()
	}
	return ports
}

// TestPeersOnLoopbackAddressesOfOneMachine: brokers listening on 127.0.0.1,
// .2 and .3 of one machine each count the other two as peers (all three
// addresses are loopback, so "an address of this machine" cannot tell them
// apart; the listen address can).
func TestPeersOnLoopbackAddressesOfOneMachine(t *testing.T) {
	for _, listen := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		cfg := brokertest.Config(t, "node-"+listen)
		cfg.ListenAddress = listen
		cfg.PeerPort = 5222
		cfg.Peers = []string{"nats://127.0.0.1:5222", "nats://127.0.0.2:5222", "nats://127.0.0.3:5222"}
		b, err := broker.New(cfg, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if b.ClusterSize() != 3 {
			t.Errorf("listening on %s: cluster size %d, want 3", listen, b.ClusterSize())
		}
	}
}
