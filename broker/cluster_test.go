package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/testpki"
)

func TestClusterGetsOneReplicaPerServer(t *testing.T) {
	c := brokertest.StartCluster(t, 3, nil)
	ctx := testContext(t, 60*time.Second)
	for i, b := range c.Brokers() {
		if b.ClusterSize() != 3 || b.BucketSpec().Replicas != 3 {
			t.Errorf("node %d: cluster size %d, replicas %d; want 3", i, b.ClusterSize(), b.BucketSpec().Replicas)
		}
		if b.ClusterURL() != c.Config(i).Peers[i] {
			t.Errorf("node %d: ClusterURL %q, want %q", i, b.ClusterURL(), c.Config(i).Peers[i])
		}
	}

	leader := c.BucketLeader()
	js := connect(t, c.Broker((leader+1)%3).ClientURL())
	info := waitStreamCurrent(t, ctx, js, 3)
	if info.Config.Replicas != 3 {
		t.Fatalf("replicas %d, want 3", info.Config.Replicas)
	}
	if want := c.Config(leader).Identity; info.Cluster.Leader != want {
		t.Errorf("stream leader %q, harness says %q", info.Cluster.Leader, want)
	}

	// A write through one node is read through another.
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	rev, err := kv.Create(ctx, "app", []byte("node-x"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}

	// Scaling the bucket is reported like any other change.
	down, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil)
	if err != nil || down.String() != "replicas 3 → 1" {
		t.Fatalf("scaling down: %q, %v", down, err)
	}
	up, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 3}, nil)
	if err != nil || up.String() != "replicas 1 → 3" {
		t.Fatalf("scaling up: %q, %v", up, err)
	}
	waitStreamCurrent(t, ctx, js, 3)

	// The stream leader stops: another node leads, the data stays, and the
	// restarted node finds the bucket as it should be.
	leader = c.BucketLeader()
	c.Stop(leader)
	next := c.BucketLeader()
	if next == leader {
		t.Fatalf("node %d still leads after it stopped", leader)
	}
	other := connect(t, c.Broker(next).ClientURL())
	okv, err := other.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	entry, err := okv.Get(ctx, "app")
	if err != nil || entry.Revision() != rev {
		t.Fatalf("after the leader stopped: %v, %v; want revision %d", entry, err, rev)
	}
	c.Restart(leader)
	if r := c.Broker(leader).ProvisionReport(); r.Changed() {
		t.Errorf("restarted node changed the bucket: %q", r)
	}
	waitStreamCurrent(t, ctx, other, 3)
}

// waitStreamCurrent waits until the election stream has a leader and
// replicas-1 current followers, and returns its info.
func waitStreamCurrent(t *testing.T, ctx context.Context, js jetstream.JetStream, replicas int) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	waitFor(t, 60*time.Second, "a leader and current followers", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(rctx, bucket.Stream)
		if err != nil {
			return false
		}
		info = st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != replicas-1 {
			return false
		}
		return !slices.ContainsFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return !p.Current })
	})
	return info
}

// Secrets of TestClusterOverTLSRoutes, none of which may be logged.
const (
	peerSecret     = "peer-secret-3f9c2a"
	appSecret      = "app-secret-81d0c7"
	guessedSecret  = "guessed-secret-55e1b9"
	routeGuessUser = "peer"
)

func TestClusterOverTLSRoutes(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	hash := hashPassword(t, appSecret)
	logs := &syncBuffer{}
	l := logrus.New()
	l.SetOutput(logs)
	l.SetLevel(logrus.TraceLevel)

	ports := reservePorts(t, 3)
	var peers []string
	for _, p := range ports {
		peers = append(peers, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	cfgs := make([]*config.Config, 3)
	for i := range cfgs {
		cfg := brokertest.Config(t, fmt.Sprintf("node-%d", i))
		useTLS(cfg, ca.Issue(t, cfg.Identity))
		cfg.ClientTLSForceRequired = true
		cfg.PeerPort, cfg.Peers = ports[i], peers
		cfg.PeerUser, cfg.PeerPassword = routeGuessUser, peerSecret
		cfg.LeaderElectionTTL = 10 * time.Second
		cfg.Users = map[string]*config.User{
			"app-a": {Name: "app-a", PasswordHash: hash, Campaign: []string{"app-a.>"}},
		}
		cfgs[i] = cfg
	}
	brokers := make([]*broker.Broker, 3)
	for i, cfg := range cfgs {
		b, err := broker.New(cfg, l.WithField("node", cfg.Identity))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		brokers[i] = b
		t.Cleanup(b.Shutdown)
	}
	ctx := testContext(t, 90*time.Second)
	errs := make(chan error, 3)
	for _, b := range brokers {
		go func() { errs <- b.Start(ctx) }()
	}
	for range brokers {
		if err := <-errs; err != nil {
			t.Fatalf("Start: %v", err)
		}
	}

	// The bucket is at R3, its replicas current: the routes work.
	_, js := natstest.Connect(t, "", brokers[1].InProcessOptions()...)
	if info := waitStreamCurrent(t, ctx, js, 3); info.Config.Replicas != 3 || info.Config.AllowRollup {
		t.Fatalf("replicas %d, rollups %v; want 3 and off", info.Config.Replicas, info.Config.AllowRollup)
	}
	for i, b := range brokers {
		if n := b.Server().NumRoutes(); n < 2 {
			t.Errorf("node %d has %d routes, want 2 or more", i, n)
		}
	}

	// A user logs in over mutual TLS with its password, and a wrong one is
	// refused: both passwords cross the logs' path.
	client := ca.Issue(t, "client")
	login(t, brokers[2].ClientURL(), "app-a", append(certOpts(ca.File, client), nats.UserInfo("app-a", appSecret))...)
	if nc, _, err := dial(brokers[2].ClientURL(), append(certOpts(ca.File, client), nats.UserInfo("app-a", guessedSecret))...); err == nil {
		nc.Close()
		t.Fatal("wrong password accepted")
	}

	peer := brokers[0].ClusterURL()[len("nats://"):]
	t.Run("plain-text route", func(t *testing.T) {
		// Even with the right peer password, a route without TLS gets
		// nothing: not even INFO. The server closes the connection.
		got, err := plainRoute(t, peer)
		if got != "" || err != nil {
			t.Fatalf("plain-text route got %q, %v; want the connection closed at once", got, err)
		}
	})
	t.Run("route without a certificate", func(t *testing.T) {
		err := dialRoute(t, peer, ca.File, nil, "")
		if err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
			t.Fatalf("route without a certificate: %v, want a TLS refusal", err)
		}
	})
	t.Run("route with another CA's certificate", func(t *testing.T) {
		err := dialRoute(t, peer, ca.File, testpki.NewCA(t, "other").Issue(t, "node-x"), "")
		if err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
			t.Fatalf("route with another CA's certificate: %v, want a TLS refusal", err)
		}
	})
	t.Run("route with a client's certificate and the right peer password", func(t *testing.T) {
		// Routes carry no per-user permissions: a client's certificate from
		// the same CA must not make a route, even with the peer password.
		client := ca.Issue(t, "app-a", testpki.DNSNames("app-a"), testpki.IPs())
		err := dialRoute(t, peer, ca.File, client, peerSecret)
		if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("route with a client's certificate: %v, want an authorization violation", err)
		}
		if !strings.Contains(logs.String(), "names none of the peers") {
			t.Errorf("the refusal is not logged with its reason")
		}
	})
	t.Run("route with a certificate but a wrong peer password", func(t *testing.T) {
		err := dialRoute(t, peer, ca.File, ca.Issue(t, "node-x"), guessedSecret)
		if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("route with a wrong password: %v, want an authorization violation", err)
		}
	})

	internal := make([]string, 3)
	for i, b := range brokers {
		internal[i] = b.InternalPassword()
		b.Shutdown()
	}
	out := logs.String()
	// The logs hold what would carry the secrets: route and client CONNECTs
	// (traced with nats-server's own redaction) and the refused login.
	for _, want := range []string{"Routes log in as peer user", "Refused a client login", "[REDACTED]"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the logs miss %q: is logging wired?", want)
		}
	}
	for name, secret := range map[string]string{
		"peer password": peerSecret, "user password": appSecret, "wrong password": guessedSecret,
		"password hash": hash, "hash without its prefix": hash[7:],
		"node-0's in-process password": internal[0], "node-1's": internal[1], "node-2's": internal[2],
	} {
		if strings.Contains(out, secret) {
			i := strings.Index(out, secret)
			t.Errorf("the %s appears in the logs: …%s…", name, out[max(0, i-200):min(len(out), i+len(secret)+50)])
		}
	}
	t.Logf("checked %d bytes of trace-level logs", len(out))
}

// dialRoute connects to a peer port as a route would: nats-server does the
// TLS handshake of a route before anything else, so it starts one at once,
// presenting leaf (none when nil), then reads INFO, sends CONNECT with the
// peer user and password, and returns the error the server answers with,
// or nil when it answers PONG.
func dialRoute(t *testing.T, addr, caFile string, leaf *testpki.Leaf, password string) error {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "127.0.0.1"}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RootCAs = x509.NewCertPool()
	cfg.RootCAs.AppendCertsFromPEM(pem)
	if leaf != nil {
		pair, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	r := bufio.NewReader(tc)
	info, err := r.ReadString('\n')
	if err != nil {
		// TLS 1.3: the server's verdict on the certificate comes now.
		return err
	}
	if !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("peer port sent %q, want INFO", info)
	}
	connect := fmt.Sprintf("CONNECT {\"user\":%q,\"pass\":%q,\"tls_required\":true,\"name\":\"intruder\",\"cluster\":%q}\r\nPING\r\n",
		routeGuessUser, password, broker.DefaultClusterName)
	if _, err := tc.Write([]byte(connect)); err != nil {
		return err
	}
	for {
		line, err := r.ReadString('\n')
		switch {
		case err != nil:
			return err
		case strings.HasPrefix(line, "-ERR"):
			return errors.New(strings.TrimSpace(line))
		case strings.HasPrefix(line, "PONG"):
			return nil
		}
	}
}

// plainRoute connects to a peer port without TLS and sends a route's
// CONNECT; it returns what the server sent back before closing.
func plainRoute(t *testing.T, addr string) (string, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	connect := fmt.Sprintf("CONNECT {\"user\":%q,\"pass\":%q,\"name\":\"intruder\",\"cluster\":%q}\r\nPING\r\n", routeGuessUser, peerSecret, broker.DefaultClusterName)
	if _, err := conn.Write([]byte(connect)); err != nil {
		return "", err
	}
	got, err := io.ReadAll(conn)
	return string(got), err
}

// TestFreshClusterSaysItCreatedTheBucket: on a fresh cluster every broker
// says the bucket was created, though the create that succeeds is often one
// whose answer came after its try's deadline, so that no broker saw its own
// create succeed (issue 20: each logged "election bucket unchanged").
func TestFreshClusterSaysItCreatedTheBucket(t *testing.T) {
	c := brokertest.StartCluster(t, 3, nil)
	for i, b := range c.Brokers() {
		r := b.ProvisionReport()
		if !r.Created && !r.CreatedMeanwhile {
			t.Errorf("node %d: report %q: the bucket was created while the cluster started, yet it does not say so", i, r)
		}
		if !strings.HasPrefix(r.String(), "created") {
			t.Errorf("node %d: the ready line says the bucket is %q, want created", i, r)
		}
		if r.BucketCreated.IsZero() {
			t.Errorf("node %d: the report has no creation time", i)
		}
	}
	// Started again on the same stores, they find it unchanged.
	c.Stop(0, 1, 2)
	c.Restart(0, 1, 2)
	for i, b := range c.Brokers() {
		if r := b.ProvisionReport(); r.Created || r.CreatedMeanwhile {
			t.Errorf("node %d restarted: report %q, want the bucket found, not created", i, r)
		}
	}
}
