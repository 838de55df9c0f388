package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket and Stream name the election bucket the brokers provision.
const (
	Bucket = "CHORIA_LEADER_ELECTION"
	Stream = "KV_" + Bucket
)

// brokerNode is one `conclave broker run` process, restarted on the same
// configuration (ports and store) after every kill.
type brokerNode struct {
	name       string // node-0: the broker identity and NATS server name
	clientPort int
	peerPort   int
	dir        string
	conf       string
	proc       *process // nil while down
	starts     int
}

// brokers is the single node or the cluster of a run.
type brokers struct {
	bin   string
	nodes []*brokerNode
}

// newBrokers writes the configuration of n brokers under dir, with ports
// reserved now and kept for the whole run so that restarts keep addresses.
func newBrokers(bin, dir string, n int, ttl time.Duration) (*brokers, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	b := &brokers{bin: bin}
	var peers []string
	for i := range n {
		nd := &brokerNode{name: fmt.Sprintf("node-%d", i), clientPort: ports[2*i]}
		if n > 1 {
			nd.peerPort = ports[2*i+1]
			peers = append(peers, "nats://127.0.0.1:"+strconv.Itoa(nd.peerPort))
		}
		b.nodes = append(b.nodes, nd)
	}
	for _, nd := range b.nodes {
		nd.dir = filepath.Join(dir, nd.name)
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			return nil, err
		}
		nd.conf = filepath.Join(nd.dir, "broker.conf")
		if err := os.WriteFile(nd.conf, []byte(brokerConfig(nd, peers, ttl)), 0o644); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// brokerConfig is a Choria-style configuration for one node: loopback, fixed
// ports, synced file store, the run's TTL and one replica per node.
func brokerConfig(nd *brokerNode, peers []string, ttl time.Duration) string {
	lines := []string{
		"# written by the fault harness (internal/faults)",
		"identity = " + nd.name,
		"loglevel = info",
		"plugin.choria.broker_network = true",
		"plugin.choria.network.listen_address = 127.0.0.1",
		"plugin.choria.network.client_port = " + strconv.Itoa(nd.clientPort),
		"plugin.choria.network.stream.store = " + filepath.Join(nd.dir, "store"),
		"plugin.choria.network.stream.sync_always = true",
		"plugin.choria.network.stream.leader_election_ttl = " + ttl.String(),
		"plugin.choria.network.stream.leader_election_replicas = -1",
	}
	if nd.peerPort != 0 {
		lines = append(lines,
			"plugin.choria.network.peer_port = "+strconv.Itoa(nd.peerPort),
			"plugin.choria.network.peers = "+strings.Join(peers, ", "))
	}
	return strings.Join(lines, "\n") + "\n"
}

// freePorts returns n distinct loopback ports that were free a moment ago,
// below the kernel's ephemeral range: a broker binds its ports again after
// every restart, and an ephemeral port could meanwhile have become the local
// end of some outgoing connection.
func freePorts(n int) ([]int, error) {
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 100*n {
		lo = 1024
	}
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports between %d and %d", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		defer ln.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralLow returns the lowest port the kernel hands out to outgoing
// connections.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if p, err := strconv.Atoi(f[0]); err == nil && p > 1024 {
				return p
			}
		}
	}
	return 32768
}

// addr returns node i's client address, host:port.
func (b *brokers) addr(i int) string {
	return "127.0.0.1:" + strconv.Itoa(b.nodes[i].clientPort)
}

// urls returns the client URLs of the given nodes, or of all when none are given.
func (b *brokers) urls(idx ...int) []string {
	if len(idx) == 0 {
		for i := range b.nodes {
			idx = append(idx, i)
		}
	}
	var out []string
	for _, i := range idx {
		out = append(out, "nats://"+b.addr(i))
	}
	return out
}

// start starts node i.
func (b *brokers) start(i int) error {
	nd := b.nodes[i]
	if nd.proc != nil && nd.proc.alive() {
		return fmt.Errorf("%s is running", nd.name)
	}
	nd.starts++
	p, err := startProcess(nd.name, b.bin, []string{"broker", "run", "--config", nd.conf}, filepath.Join(nd.dir, "broker.log"))
	if err != nil {
		return err
	}
	nd.proc = p
	return nil
}

// kill sends SIGKILL to node i and returns when it has been reaped.
func (b *brokers) kill(i int) int64 {
	nd := b.nodes[i]
	if nd.proc == nil {
		return Mono()
	}
	at := nd.proc.kill()
	nd.proc = nil
	return at
}

// stopAll stops every running node gracefully.
func (b *brokers) stopAll() {
	for _, nd := range b.nodes {
		if nd.proc != nil {
			nd.proc.terminate(20 * time.Second)
			nd.proc = nil
		}
	}
}

// index returns the node named name.
func (b *brokers) index(name string) (int, bool) {
	for i, nd := range b.nodes {
		if nd.name == name {
			return i, true
		}
	}
	return 0, false
}

// errNoLeader means the stream answered but has no leader: no quorum.
var errNoLeader = errors.New("the election stream has no leader")

// streamInfo asks the given nodes (all when none are given) about the
// election stream and returns the name of its leader.
func (b *brokers) streamInfo(ctx context.Context, idx ...int) (string, error) {
	nc, err := nats.Connect(strings.Join(b.urls(idx...), ","),
		nats.Name("faults harness probe"), nats.Timeout(500*time.Millisecond), nats.NoReconnect())
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := js.Stream(ctx, Stream)
	if err != nil {
		return "", err
	}
	info := s.CachedInfo()
	if len(b.nodes) == 1 {
		return b.nodes[0].name, nil
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errNoLeader
	}
	return info.Cluster.Leader, nil
}

// awaitLeader waits until the election stream has a leader, asking the given
// nodes (all when none are given), and returns the leader's index. It fails
// early, with the log's tail, if a node it asks has exited.
func (b *brokers) awaitLeader(ctx context.Context, within time.Duration, idx ...int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if len(idx) == 0 {
		for i := range b.nodes {
			idx = append(idx, i)
		}
	}
	var last error
	for {
		for _, i := range idx {
			if nd := b.nodes[i]; nd.proc != nil && !nd.proc.alive() {
				return -1, fmt.Errorf("%s exited: %s", nd.name, tail(filepath.Join(nd.dir, "broker.log"), 800))
			}
		}
		name, err := b.streamInfo(ctx, idx...)
		if err == nil {
			if i, ok := b.index(name); ok {
				return i, nil
			}
			err = fmt.Errorf("unknown stream leader %q", name)
		}
		last = err
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader for stream %s after %v: %w", Stream, within, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
