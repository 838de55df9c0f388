// Package brokertest starts real in-process brokers for tests: one node or a
// cluster, each with its own store under t.TempDir(), shut down when the test
// ends. Nodes can be stopped and restarted on the same store and ports.
//
// Logs go to t.Log at the level named by the CONCLAVE_TEST_LOG environment
// variable (trace, debug, info, warn, error; default warn).
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/conclavetest"
	"github.com/conclave-io/conclave/config"
)

// StartTimeout bounds how long starting a node or a cluster may take.
const StartTimeout = 90 * time.Second

// LogLevelEnv names the environment variable with the test log level.
const LogLevelEnv = conclavetest.LogLevelEnv

// startAttempts is how often StartCluster tries again when a pre-allocated
// peer port was taken by someone else before the node bound it.
const startAttempts = 3

// Config returns a configuration for a test broker named identity: loopback,
// any free client port, no cluster, no monitoring, a fresh store directory,
// SyncAlways on, a one minute TTL and one replica per server.
func Config(t testing.TB, identity string) *config.Config {
	t.Helper()
	return &config.Config{
		Identity:               identity,
		LogLevel:               "warn",
		BrokerNetwork:          true,
		ListenAddress:          "127.0.0.1",
		ClientPort:             -1,
		StreamStore:            t.TempDir(),
		SyncAlways:             true,
		LeaderElectionTTL:      time.Minute,
		LeaderElectionReplicas: -1,
		StatsAddress:           "127.0.0.1",
	}
}

// Logger returns a logrus entry that writes to t.Log until the test's
// cleanups are done, at the level LogLevelEnv names (see
// conclavetest.Logger).
func Logger(t testing.TB) *logrus.Entry {
	t.Helper()
	return logrus.NewEntry(conclavetest.Logger(t))
}

// StartSingle starts one broker from Config(t, "node-0") changed by mutate
// (which may be nil) and shuts it down when the test ends. It is
// conclavetest.StartBroker with this package's configuration.
func StartSingle(t testing.TB, mutate func(*config.Config)) *broker.Broker {
	t.Helper()
	b := conclavetest.StartBroker(t, conclavetest.WithConfig(func(cfg *config.Config) {
		*cfg = *Config(t, "node-0")
		if mutate != nil {
			mutate(cfg)
		}
	}))
	return b.Broker()
}

// Cluster is a set of brokers started by StartCluster. Its methods must be
// called from the test's goroutine.
type Cluster struct {
	t     testing.TB
	log   *logrus.Entry
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	cfg *config.Config
	b   *broker.Broker // nil while stopped
}

// StartCluster starts n brokers named node-0 … node-(n-1) and waits until
// every one has provisioned the election bucket. With n > 1 each node gets a
// fixed peer port and the peer list of all nodes, itself included, as
// Choria's configurations have it. mutate (which may be nil) can change each
// node's configuration before it starts. The nodes shut down when the test
// ends.
func StartCluster(t testing.TB, n int, mutate func(i int, cfg *config.Config)) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("brokertest: StartCluster with %d nodes", n)
	}
	c := &Cluster{t: t, log: Logger(t)}

	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		c.nodes, err = configure(t, n, mutate)
		if err != nil {
			t.Fatalf("brokertest: %v", err)
		}
		// Registered after the store directories, so that it runs before
		// they are removed.
		t.Cleanup(c.shutdown)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		err = c.start(all)
		if err == nil {
			return c
		}
		c.shutdown()
		if !portTaken(err) {
			break
		}
		t.Logf("brokertest: attempt %d: a port was taken meanwhile, trying new ports: %v", attempt, err)
	}
	t.Fatalf("brokertest: starting %d brokers: %v", n, err)
	return nil
}

// configure builds the node configurations, reserving peer ports for a
// cluster.
func configure(t testing.TB, n int, mutate func(int, *config.Config)) ([]*node, error) {
	var peers []string
	var ports []int
	if n > 1 {
		var err error
		ports, err = freePorts(n)
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			peers = append(peers, "nats://127.0.0.1:"+strconv.Itoa(p))
		}
	}
	nodes := make([]*node, n)
	for i := range nodes {
		cfg := Config(t, fmt.Sprintf("node-%d", i))
		if n > 1 {
			cfg.PeerPort = ports[i]
			cfg.Peers = append([]string(nil), peers...)
		}
		if mutate != nil {
			mutate(i, cfg)
		}
		nodes[i] = &node{cfg: cfg}
	}
	return nodes, nil
}

// freePorts returns n distinct ports that were free a moment ago. Another
// process may take one before a broker binds it; StartCluster then retries.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserving a port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portTaken reports whether a start failed because another program took
// a reserved port first: the broker's own check, or nats-server's bind
// when the port was taken between the check and the bind.
func portTaken(err error) bool {
	return errors.Is(err, broker.ErrPortInUse) ||
		errors.Is(err, broker.ErrServerFailed) && strings.Contains(err.Error(), "address already in use")
}

// start starts the given stopped nodes at once (a cluster needs a quorum
// before any of them is ready) and waits for all of them.
func (c *Cluster) start(idx []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	brokers := make([]*broker.Broker, len(idx))
	for k, i := range idx {
		nd := c.nodes[i]
		b, err := broker.New(nd.cfg, c.log.WithField("node", nd.cfg.Identity))
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		brokers[k] = b
	}
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		b := brokers[k]
		c.mu.Lock()
		c.nodes[i].b = b
		c.mu.Unlock()
		wg.Go(func() {
			if err := b.Start(ctx); err != nil {
				errs[k] = fmt.Errorf("node %d (%s): %w", i, c.nodes[i].cfg.Identity, err)
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Keep the ports a restart must reuse, so clients find the node again.
	for _, i := range idx {
		nd := c.nodes[i]
		port, err := portOf(nd.b.ClientURL())
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		nd.cfg.ClientPort = port
	}
	return nil
}

func portOf(rawURL string) (int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// shutdown stops every running node.
func (c *Cluster) shutdown() {
	var wg sync.WaitGroup
	for _, b := range c.Brokers() {
		wg.Go(b.Shutdown)
	}
	wg.Wait()
}

// Len returns the number of nodes, running or stopped.
func (c *Cluster) Len() int { return len(c.nodes) }

// Broker returns node i's broker, or nil while it is stopped.
func (c *Cluster) Broker(i int) *broker.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].b
}

// Brokers returns the running brokers.
func (c *Cluster) Brokers() []*broker.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var bs []*broker.Broker
	for _, nd := range c.nodes {
		if nd.b != nil {
			bs = append(bs, nd.b)
		}
	}
	return bs
}

// Config returns node i's configuration. After the first start its
// ClientPort is the port the node listens on, which restarts reuse.
func (c *Cluster) Config(i int) *config.Config { return c.nodes[i].cfg }

// ClientURLs returns the client URLs of all nodes, running or stopped, in
// node order: a client given them all reconnects to restarted nodes.
func (c *Cluster) ClientURLs() []string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = "nats://" + net.JoinHostPort(nd.cfg.ListenAddress, strconv.Itoa(nd.cfg.ClientPort))
	}
	return urls
}

// Stop shuts the given nodes down gracefully. Their stores and ports are
// kept for Restart.
func (c *Cluster) Stop(nodes ...int) {
	var wg sync.WaitGroup
	for _, i := range nodes {
		c.mu.Lock()
		b := c.nodes[i].b
		c.nodes[i].b = nil
		c.mu.Unlock()
		if b != nil {
			wg.Go(b.Shutdown)
		}
	}
	wg.Wait()
}

// Restart starts the given stopped nodes again on their stores and ports,
// all at once, and waits until each has provisioned the election bucket
// (which needs a quorum of the cluster running). It fails the test when they
// do not start.
func (c *Cluster) Restart(nodes ...int) {
	c.t.Helper()
	for _, i := range nodes {
		if c.Broker(i) != nil {
			c.t.Fatalf("brokertest: Restart(%d): node is running", i)
		}
	}
	if err := c.start(nodes); err != nil {
		c.t.Fatalf("brokertest: restarting nodes %v: %v", nodes, err)
	}
}

// StreamLeader waits until one running node leads the given stream and
// returns its index. A node that is not clustered leads its streams. It
// fails the test when no leader appears within StartTimeout.
func (c *Cluster) StreamLeader(stream string) int {
	c.t.Helper()
	deadline := time.Now().Add(StartTimeout)
	for {
		if i, ok := c.streamLeader(stream); ok {
			return i
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("brokertest: no leader for stream %s after %v", stream, StartTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BucketLeader is StreamLeader for the election bucket's stream.
func (c *Cluster) BucketLeader() int { c.t.Helper(); return c.StreamLeader(bucket.Stream) }

func (c *Cluster) streamLeader(stream string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	leader, leaders := -1, 0
	for i, nd := range c.nodes {
		if nd.b == nil {
			continue
		}
		srv := nd.b.Server()
		if isStreamLeader(srv, stream) {
			leader = i
			leaders++
		}
	}
	return leader, leaders == 1
}

func isStreamLeader(srv *server.Server, stream string) bool {
	if srv == nil || !srv.Running() {
		return false
	}
	if srv.JetStreamIsClustered() {
		return srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream)
	}
	acc, err := srv.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil {
		return false
	}
	for _, st := range acc.Streams {
		if st.Name == stream {
			return true
		}
	}
	return false
}
