package broker

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
)

// Configuration keys, for error messages that tell operators what to change.
const (
	keyIdentity      = "identity"
	keyListenAddress = "plugin.choria.network.listen_address"
	keyClientPort    = "plugin.choria.network.client_port"
	keyPeerPort      = "plugin.choria.network.peer_port"
	keyPeers         = "plugin.choria.network.peers"
	keyStreamStore   = "plugin.choria.network.stream.store"
	keyTTL           = "plugin.choria.network.stream.leader_election_ttl"
	keyReplicas      = "plugin.choria.network.stream.leader_election_replicas"
	keyStatsAddress  = "plugin.choria.stats_address"
	keyStatsPort     = "plugin.choria.stats_port"
)

// DefaultClusterName is the NATS cluster name brokers use unless
// WithClusterName sets another. Every node of a cluster must use the same.
const DefaultClusterName = "conclave"

// DefaultListenAddress is used when a configuration leaves ListenAddress or
// StatsAddress empty: loopback, like the config package's default.
const DefaultListenAddress = "127.0.0.1"

// randomPort in a port setting asks for any free port.
const randomPort = -1

// selfLookupTimeout bounds the DNS lookups that decide whether a peer names
// this server.
const selfLookupTimeout = 2 * time.Second

// settings is a validated configuration, resolved into what the server needs.
type settings struct {
	identity    string
	listenHost  string
	clientPort  int
	peerPort    int
	clusterName string
	routes      []*url.URL // the configured peers, this server included if listed
	clusterSize int        // this server plus the distinct other peers
	storeDir    string
	syncAlways  bool
	statsHost   string
	statsPort   int
	spec        BucketSpec
	sec         securitySettings
}

// Option changes a Broker setting that has no configuration key.
type Option func(*options) error

type options struct {
	clusterName string
}

// WithClusterName sets the NATS cluster name (default DefaultClusterName).
// All nodes of one cluster must use the same name.
func WithClusterName(name string) Option {
	return func(o *options) error {
		if name == "" || strings.ContainsAny(name, " \t\r\n") {
			return fmt.Errorf("%w: cluster name %q must be non-empty and without spaces", ErrInvalidConfig, name)
		}
		o.clusterName = name
		return nil
	}
}

// newSettings validates cfg as a whole and resolves it.
func newSettings(cfg *config.Config, opts options) (settings, error) {
	if cfg == nil {
		return settings{}, fmt.Errorf("%w: no configuration given", ErrInvalidConfig)
	}
	invalid := func(format string, v ...any) error {
		msg := fmt.Sprintf(format, v...)
		if cfg.Path != "" {
			msg = cfg.Path + ": " + msg
		}
		return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
	}

	s := settings{
		identity:    cfg.Identity,
		listenHost:  cfg.ListenAddress,
		clientPort:  cfg.ClientPort,
		peerPort:    cfg.PeerPort,
		clusterName: opts.clusterName,
		storeDir:    cfg.StreamStore,
		syncAlways:  cfg.SyncAlways,
		statsHost:   cfg.StatsAddress,
		statsPort:   cfg.StatsPort,
	}
	if s.listenHost == "" {
		s.listenHost = DefaultListenAddress
	}
	if s.statsHost == "" {
		s.statsHost = DefaultListenAddress
	}

	if err := config.CheckIdentity(s.identity); err != nil {
		return settings{}, invalid("%s %v: the broker needs it as its NATS server name", keyIdentity, err)
	}
	switch {
	case s.storeDir == "":
		return settings{}, invalid("%s is empty: JetStream needs a directory to store the election bucket", keyStreamStore)
	}
	if err := checkPort(keyClientPort, s.clientPort, false); err != nil {
		return settings{}, invalid("%v", err)
	}
	if err := checkPort(keyPeerPort, s.peerPort, true); err != nil {
		return settings{}, invalid("%v", err)
	}
	if err := checkPort(keyStatsPort, s.statsPort, true); err != nil {
		return settings{}, invalid("%v", err)
	}
	if s.peerPort != 0 && s.peerPort == s.clientPort {
		return settings{}, invalid("%s and %s are both %d: they need different ports", keyClientPort, keyPeerPort, s.peerPort)
	}
	if s.statsPort > 0 && s.statsHost == s.listenHost && (s.statsPort == s.clientPort || s.statsPort == s.peerPort) {
		return settings{}, invalid("%s %d is already the client or peer port", keyStatsPort, s.statsPort)
	}

	if err := s.resolvePeers(cfg.Peers); err != nil {
		return settings{}, invalid("%v", err)
	}

	if err := s.resolveSecurity(cfg, cfg.Path); err != nil {
		return settings{}, err
	}

	ttl := cfg.LeaderElectionTTL
	if ttl < bucket.MinTTL {
		return settings{}, invalid("%s is %v: it must be at least %v (Choria's default is 1m)", keyTTL, ttl, bucket.MinTTL)
	}
	replicas := cfg.LeaderElectionReplicas
	switch {
	case replicas == -1:
		replicas = min(s.clusterSize, bucket.MaxReplicas)
	case replicas < 1 || replicas > bucket.MaxReplicas:
		return settings{}, invalid("%s is %d: it must be 1 to %d, or -1 for one replica per server", keyReplicas, replicas, bucket.MaxReplicas)
	case replicas > s.clusterSize:
		return settings{}, fmt.Errorf("%w: %s is %d but the cluster has %s; set %s to %d or less, or to -1 for one replica per server",
			ErrNotEnoughServers, keyReplicas, replicas, s.describeCluster(), keyReplicas, s.clusterSize)
	}
	// Per-message TTLs on: candidates campaign and renew with a TTL of their
	// own, which the server honours within milliseconds, where MaxAge expiry
	// runs up to about 350 ms late. Choria's clients, whose writes carry no
	// TTL, keep working (MaxAge applies to them), and the embedded server
	// always supports it, so there is no setting to turn it off (the server
	// could not turn it off on an existing bucket anyway).
	//
	// Rollups are off when users are configured: a user allowed to write one
	// key could otherwise wipe the bucket with a Nats-Rollup header, which
	// permissions do not cover.
	s.spec = BucketSpec{TTL: ttl, Replicas: replicas, MaxValueSize: DefaultMaxValueSize, MaxConsumers: DefaultMaxConsumers, PerKeyTTL: true,
		DenyRollup: len(s.sec.users) > 0}
	return s, nil
}

// checkPort checks a port setting: -1 (random) or 1–65535, and 0 (off) when
// zeroOK.
func checkPort(key string, port int, zeroOK bool) error {
	switch {
	case port == randomPort, port >= 1 && port <= 65535:
		return nil
	case port == 0 && zeroOK:
		return nil
	case zeroOK:
		return fmt.Errorf("%s is %d: it must be 0 (off), -1 (any free port) or 1 to 65535", key, port)
	default:
		return fmt.Errorf("%s is %d: it must be -1 (any free port) or 1 to 65535", key, port)
	}
}

// resolvePeers parses the peer URLs and counts the cluster's servers.
func (s *settings) resolvePeers(peers []string) error {
	s.clusterSize = 1
	if len(peers) == 0 {
		return nil
	}
	if s.peerPort == 0 {
		return fmt.Errorf("%s is set but %s is 0: set a peer port to join the peers into a cluster, or remove the peers", keyPeers, keyPeerPort)
	}
	others := map[string]bool{}
	for _, p := range peers {
		u, err := parsePeer(p)
		if err != nil {
			return fmt.Errorf("%s: %w", keyPeers, err)
		}
		s.routes = append(s.routes, u)
		if s.isSelf(u) {
			continue
		}
		others[strings.ToLower(u.Host)] = true
	}
	if len(others) == 0 {
		return fmt.Errorf("%s names only this server: JetStream in a cluster needs routes to other servers; add them, or set %s to 0 and remove the peers to run alone", keyPeers, keyPeerPort)
	}
	s.clusterSize += len(others)
	return nil
}

// describeCluster says how many servers the cluster has and where the
// number comes from.
func (s *settings) describeCluster() string {
	if s.clusterSize == 1 {
		return "1 server (this one: " + keyPeers + " names no other)"
	}
	return fmt.Sprintf("%d servers (this one and %d other peers in %s)", s.clusterSize, s.clusterSize-1, keyPeers)
}

// parsePeer parses a peer as nats://host:port, nats-route://host:port or
// host:port.
func parsePeer(p string) (*url.URL, error) {
	p = strings.TrimSpace(p)
	if !strings.Contains(p, "://") {
		p = "nats://" + p
	}
	u, err := url.Parse(p)
	if err != nil {
		return nil, fmt.Errorf("peer %q: %w", p, err)
	}
	switch u.Scheme {
	case "nats", "nats-route":
	default:
		return nil, fmt.Errorf("peer %q: scheme %q, want nats:// or nats-route://", p, u.Scheme)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("peer %q: want host:port", p)
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("peer %q: port %q is not 1 to 65535", p, u.Port())
	}
	return u, nil
}

// isSelf reports whether a peer URL names this server: its port is this
// server's peer port and its host is the listen address, the identity or
// the host name, or, when the server listens on every interface, localhost
// or an address of this machine. A server listening on one address is
// otherwise named only by that address (or a name resolving to it), so
// that servers on several addresses of one machine (127.0.0.2, 127.0.0.3,
// …) tell each other apart.
func (s *settings) isSelf(u *url.URL) bool {
	if s.peerPort <= 0 || u.Port() != strconv.Itoa(s.peerPort) {
		return false
	}
	host := u.Hostname()
	hostname, _ := os.Hostname()
	for _, name := range []string{s.listenHost, s.identity, hostname} {
		if name != "" && strings.EqualFold(host, name) {
			return true
		}
	}
	if listen := net.ParseIP(s.listenHost); listen != nil && !listen.IsUnspecified() {
		if ip := net.ParseIP(host); ip != nil {
			return ip.Equal(listen)
		}
		return slices.ContainsFunc(lookup(host), listen.Equal)
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = append(ips, ip)
	} else {
		ips = lookup(host)
	}
	return slicesAnyLocal(ips)
}

// lookup resolves host, bounded by selfLookupTimeout; nil when it cannot.
func lookup(host string) []net.IP {
	ctx, cancel := context.WithTimeout(context.Background(), selfLookupTimeout)
	defer cancel()
	addrs, _ := net.DefaultResolver.LookupIPAddr(ctx, host)
	var ips []net.IP
	for _, a := range addrs {
		ips = append(ips, a.IP)
	}
	return ips
}

// slicesAnyLocal reports whether any of ips is loopback or an address of one
// of this machine's interfaces.
func slicesAnyLocal(ips []net.IP) bool {
	if len(ips) == 0 {
		return false
	}
	local, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range local {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
