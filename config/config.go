// Package config loads Choria-style configuration files (key = value lines)
// into a typed Config with documented defaults.
//
// A file is read line by line: blank lines and lines whose first non-blank
// character is # are skipped; every other line is "key = value", with the
// white space around the key, the "=" and the value trimmed. A # anywhere
// else is part of the value, as in Choria. Keys are case-sensitive and may be
// set once per file. Keys lists every key with its type, default and meaning;
// docs/config.md is generated from it.
//
// After the file, environment variables override it: CONCLAVE_ followed by the
// key in upper case with "." replaced by "_", for example
// CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT=4333 (see Key.Env). An empty
// variable counts as unset.
//
// Parsing reports every problem in a file at once, each naming the file, the
// line and the key and saying what would be valid; see LineError, EnvError and
// the Err* sentinels. A file that parses is then checked with Validate.
//
// The package has no global state: every call builds what it needs.
package config

//go:generate go test -run TestDocsTable -update .

import (
	"os"
	"time"
)

// Special values shared by several keys.
const (
	// RandomPort in a port field asks the broker for a random free port, as
	// nats-server does for Port: -1. It is meant for tests.
	RandomPort = -1
	// ClusterSizeReplicas as LeaderElectionReplicas means one replica per broker
	// in the cluster.
	ClusterSizeReplicas = -1
)

// Config is a loaded configuration. Field comments name the config key.
type Config struct {
	// Identity is this node's name (identity); default: the host name.
	// It must be a valid NATS server name: no white space, '*' or '>'.
	Identity string
	// LogLevel is debug, info, warn or error (loglevel); default info.
	// The parser lower-cases it and turns warning into warn.
	LogLevel string
	// LogFile is where logs go (logfile); empty means standard error.
	LogFile string

	// MiddlewareHosts are the brokers clients connect to
	// (plugin.choria.middleware_hosts), as host:port or nats://host:port.
	// The parser normalises every entry to scheme://host:port (nats:// unless
	// the entry said tls://).
	MiddlewareHosts []string

	// BrokerNetwork runs the embedded broker (plugin.choria.broker_network).
	BrokerNetwork bool
	// ListenAddress is the address the broker listens on
	// (plugin.choria.network.listen_address); default 127.0.0.1.
	ListenAddress string
	// ClientPort is the port clients connect to (plugin.choria.network.client_port); default 4222.
	// RandomPort (-1) asks for a random free port.
	ClientPort int
	// PeerPort is the cluster port (plugin.choria.network.peer_port); 0 means no cluster.
	// RandomPort (-1) asks for a random free port.
	PeerPort int
	// Peers are the other brokers' cluster URLs (plugin.choria.network.peers),
	// normalised by the parser to nats://host:port.
	Peers []string
	// StreamStore is the JetStream store directory (plugin.choria.network.stream.store).
	StreamStore string
	// SyncAlways makes the broker fsync every write before acknowledging it
	// (plugin.choria.network.stream.sync_always); default true.
	SyncAlways bool
	// LeaderElectionTTL is the election bucket's TTL
	// (plugin.choria.network.stream.leader_election_ttl); default 1m.
	LeaderElectionTTL time.Duration
	// LeaderElectionReplicas is the election bucket's replica count
	// (plugin.choria.network.stream.leader_election_replicas); -1 means the cluster size.
	LeaderElectionReplicas int

	// ElectionPriority ranks this node's candidates in every election the
	// framework campaigns in (plugin.conclave.election.priority; see
	// streams.WithPriority); default 0.
	ElectionPriority int
	// ElectionMinTerm is how long a term of this node's lasts before it
	// hands over to a better candidate on its own
	// (plugin.conclave.election.min_term; see streams.WithMinTerm); 0, the
	// default, means twice the bucket's TTL, at least 10s.
	ElectionMinTerm time.Duration

	// StatsAddress is where the broker serves monitoring and /metrics
	// (plugin.choria.stats_address); default 127.0.0.1.
	StatsAddress string
	// StatsPort is the monitoring port (plugin.choria.stats_port); 0 turns it off.
	// RandomPort (-1) asks for a random free port.
	StatsPort int

	// SecurityProvider is plugin.security.provider: "" or SecurityProviderFile.
	SecurityProvider string
	// TLSCertificate, TLSKey and TLSCA are the PEM files of this node's
	// certificate, its private key and the CA that signs every certificate
	// (plugin.security.file.certificate, .key and .ca). All three or none.
	TLSCertificate, TLSKey, TLSCA string
	// CipherSuites restricts TLS 1.2 cipher suites (plugin.security.cipher_suites), by Go's names.
	CipherSuites []string
	// ECCCurves restricts the key-exchange curves (plugin.security.ecc_curves), by Go's names.
	ECCCurves []string
	// ClientTLSForceRequired makes the broker require a client certificate
	// signed by the CA from every client when TLS is on
	// (plugin.choria.network.client_tls_force_required); default true.
	ClientTLSForceRequired bool
	// TLSTimeout bounds TLS handshakes (plugin.choria.network.tls_timeout); default 2s.
	TLSTimeout time.Duration

	// NATSUser and NATSPass are the user and password a client logs in with
	// (plugin.nats.user, plugin.nats.pass); NATSUser also names the client's
	// inbox prefix when the broker has users.
	NATSUser, NATSPass string
	// NATSCredentials is a NATS credentials file a client logs in with (plugin.nats.credentials).
	NATSCredentials string
	// PeerUser and PeerPassword are the credentials brokers of a cluster use
	// on their routes (plugin.choria.network.peer_user, peer_password).
	PeerUser, PeerPassword string
	// Insecure lets the broker listen beyond loopback without TLS or
	// authentication (plugin.conclave.insecure); it warns at every start.
	Insecure bool
	// Users are the broker's users by name (plugin.conclave.user.NAME.*).
	// With none, the broker has no authentication of its own.
	Users map[string]*User

	// Path is the file this configuration was loaded from, if any.
	Path string
}

// Default returns a configuration with every key at its default: see Keys or
// docs/config.md. Identity is the host name, or "localhost" when the host name
// cannot be read.
func Default() *Config {
	return &Config{
		Identity:               hostname(),
		LogLevel:               "info",
		ListenAddress:          "127.0.0.1",
		ClientPort:             4222,
		SyncAlways:             true,
		LeaderElectionTTL:      time.Minute,
		LeaderElectionReplicas: ClusterSizeReplicas,
		StatsAddress:           "127.0.0.1",
		ClientTLSForceRequired: true,
		TLSTimeout:             DefaultTLSTimeout,
	}
}

// hostname returns os.Hostname, or "localhost" when it fails or is empty.
func hostname() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		return "localhost"
	}
	return name
}
