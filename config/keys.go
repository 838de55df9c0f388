package config

import (
	"strings"
	"time"
)

// EnvPrefix starts the name of every environment override; see Key.Env.
const EnvPrefix = "CONCLAVE_"

// Key describes one configuration key. The table returned by Keys drives
// parsing, environment overrides and docs/config.md.
type Key struct {
	// Name is the key as written in a file, e.g. plugin.choria.network.client_port.
	Name string
	// Type is the kind of value, as shown in the documentation: string, path,
	// log level, boolean, host, port, integer, duration or list of URLs.
	Type string
	// Default is the default as a value one could write in a file, or, for a
	// key whose default is computed (identity), a description of it.
	Default string
	// Description says what the key does and which values are valid, in one line.
	Description string

	// computed is true when Default describes the default instead of being a value.
	computed bool
	// secret marks a key whose value must never be shown: error messages
	// and displays leave it out.
	secret bool
	// perUser marks a key of a broker user: its Name holds NAME where the
	// user's name goes, and it is set through setUser.
	perUser bool
	setUser func(u *User, value string) error
	// set parses a value into its field of c; errors match ErrInvalidValue.
	set func(c *Config, value string) error
}

// Env returns the environment variable that overrides the key: EnvPrefix
// followed by the name in upper case with "." replaced by "_", e.g.
// CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT. Per-user keys have none ("").
func (k Key) Env() string {
	if k.perUser {
		return ""
	}
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))
}

// Secret reports whether the key holds a secret (a password or its hash),
// which must never be printed.
func (k Key) Secret() bool { return k.secret }

// PerUser reports whether the key belongs to a broker user: its Name holds
// NAME where the user's name goes, and it has no environment variable.
func (k Key) PerUser() bool { return k.perUser }

// DefaultIsComputed reports whether Default describes a computed default (such
// as the host name) rather than being a literal value.
func (k Key) DefaultIsComputed() bool { return k.computed }

// Keys returns every key this package reads, in documentation order. The
// slice is new on every call.
func Keys() []Key {
	keys := []Key{
		{
			Name: "identity", Type: "string", Default: "the host name", computed: true,
			Description: "This node's name: the NATS server name, and the value a leader writes to an election key. No white space, `*` or `>`.",
			set:         setter(parseIdentity, func(c *Config) *string { return &c.Identity }),
		},
		{
			Name: "loglevel", Type: "log level", Default: "info",
			Description: "Least severe level logged: debug, info, warn (or warning) or error, in any case.",
			set:         setter(parseLogLevel, func(c *Config) *string { return &c.LogLevel }),
		},
		{
			Name: "logfile", Type: "path", Default: "",
			Description: "File logs are appended to; empty means standard error.",
			set:         setter(parseString, func(c *Config) *string { return &c.LogFile }),
		},
		{
			Name: "plugin.choria.middleware_hosts", Type: "list of URLs", Default: "",
			Description: "Brokers to connect to, comma separated: `host:port`, `nats://host:port` or `tls://host:port`; `host:port` means `nats://host:port`.",
			set:         setter(parseMiddlewareHosts, func(c *Config) *[]string { return &c.MiddlewareHosts }),
		},
		{
			Name: "plugin.choria.broker_network", Type: "boolean", Default: "false",
			Description: "Run the embedded broker (a NATS server with JetStream) in this process. Needs `plugin.choria.network.stream.store`.",
			set:         setter(parseBool, func(c *Config) *bool { return &c.BrokerNetwork }),
		},
		{
			Name: "plugin.choria.network.listen_address", Type: "host", Default: "127.0.0.1",
			Description: "IP address or host name the broker listens on for clients and peers; `0.0.0.0` for every interface.",
			set: setter(func(v string) (string, error) { return parseHost(v, "plugin.choria.network.client_port") },
				func(c *Config) *string { return &c.ListenAddress }),
		},
		{
			Name: "plugin.choria.network.client_port", Type: "port", Default: "4222",
			Description: "Port clients connect to: 1 to 65535, or -1 for a random free port (for tests). A taken client, peer or stats port stops the broker with \"port in use\" before it opens the store.",
			set:         setter(parseClientPort, func(c *Config) *int { return &c.ClientPort }),
		},
		{
			Name: "plugin.choria.network.peer_port", Type: "port", Default: "0",
			Description: "Port for routes between clustered brokers: 1 to 65535, 0 for no cluster, or -1 for a random free port.",
			set:         setter(parsePeerPort, func(c *Config) *int { return &c.PeerPort }),
		},
		{
			Name: "plugin.choria.network.peers", Type: "list of URLs", Default: "",
			Description: "Cluster routes to the other brokers, comma separated: `host:port` or `nats://host:port`. Needs `plugin.choria.network.peer_port`.",
			set:         setter(parsePeers, func(c *Config) *[]string { return &c.Peers }),
		},
		{
			Name: "plugin.choria.network.stream.store", Type: "path", Default: "",
			Description: "Directory for JetStream's files; required when `plugin.choria.broker_network` is true. A running broker holds it locked (`conclave.lock` inside names its process), so a second broker on the same directory stops at once with \"store directory in use\" instead of sharing JetStream's files (Linux, macOS and the BSDs; not locked on Windows).",
			set:         setter(parseString, func(c *Config) *string { return &c.StreamStore }),
		},
		{
			Name: "plugin.choria.network.stream.sync_always", Type: "boolean", Default: "true",
			Description: "Flush every write to disk before acknowledging it, so acknowledged elections survive a crash (see Durability).",
			set:         setter(parseBool, func(c *Config) *bool { return &c.SyncAlways }),
		},
		{
			Name: "plugin.choria.network.stream.leader_election_ttl", Type: "duration", Default: "1m",
			Description: "How long an election key outlives its last renewal, so how long a crashed leader keeps its lead: a Go duration (`30s`, `1m30s`) or whole seconds (`60`); at least 1s.",
			set:         setter(parseTTL, func(c *Config) *time.Duration { return &c.LeaderElectionTTL }),
		},
		{
			Name: "plugin.choria.network.stream.leader_election_replicas", Type: "integer", Default: "-1",
			Description: "Replicas of the election bucket: 1 to 5, or -1 for the size of the cluster.",
			set:         setter(parseReplicas, func(c *Config) *int { return &c.LeaderElectionReplicas }),
		},
		{
			Name: "plugin.conclave.election.priority", Type: "integer", Default: "0",
			Description: "This node's priority in the elections its programs campaign in (`fw.NewElection`): a leader hands over to a healthy candidate of a higher priority once its term has lasted `plugin.conclave.election.min_term`; equal priorities never move. -1073741824 to 1073741824; negative for a node that should lead only when no other can (a canary).",
			set:         setter(parsePriority, func(c *Config) *int { return &c.ElectionPriority }),
		},
		{
			Name: "plugin.conclave.election.min_term", Type: "duration", Default: "0",
			Description: "How long a term of this node's lasts before it hands over to a better candidate on its own (priority or health): a Go duration or whole seconds; 0 means twice the bucket's TTL, at least 10s.",
			set:         setter(parseMinTerm, func(c *Config) *time.Duration { return &c.ElectionMinTerm }),
		},
		{
			Name: "plugin.choria.stats_address", Type: "host", Default: "127.0.0.1",
			Description: "IP address or host name the broker's monitoring and `/metrics` HTTP server listens on; beyond loopback the broker warns, as it has no login.",
			set: setter(func(v string) (string, error) { return parseHost(v, "plugin.choria.stats_port") },
				func(c *Config) *string { return &c.StatsAddress }),
		},
		{
			Name: "plugin.choria.stats_port", Type: "port", Default: "0",
			Description: "Port of the monitoring server: 1 to 65535, 0 to turn it off, or -1 for a random free port.",
			set:         setter(parseStatsPort, func(c *Config) *int { return &c.StatsPort }),
		},
		{
			Name: "plugin.security.provider", Type: "string", Default: "",
			Description: "Where TLS keys come from: only `file` is supported (the plugin.security.file.* keys); empty means file when those are set.",
			set:         setter(parseSecurityProvider, func(c *Config) *string { return &c.SecurityProvider }),
		},
		{
			Name: "plugin.security.file.certificate", Type: "path", Default: "",
			Description: "PEM certificate of this node, for the broker's TLS listeners and for clients' certificate logins; set with .key and .ca.",
			set:         setter(parseString, func(c *Config) *string { return &c.TLSCertificate }),
		},
		{
			Name: "plugin.security.file.key", Type: "path", Default: "",
			Description: "PEM private key of plugin.security.file.certificate.",
			set:         setter(parseString, func(c *Config) *string { return &c.TLSKey }),
		},
		{
			Name: "plugin.security.file.ca", Type: "path", Default: "",
			Description: "PEM CA certificate(s) every peer, client and broker certificate must chain to.",
			set:         setter(parseString, func(c *Config) *string { return &c.TLSCA }),
		},
		{
			Name: "plugin.security.cipher_suites", Type: "list", Default: "",
			Description: "TLS 1.2 cipher suites allowed, comma separated, by Go's names; empty means Go's secure defaults (TLS 1.3 suites are fixed).",
			set:         setter(parseCipherSuites, func(c *Config) *[]string { return &c.CipherSuites }),
		},
		{
			Name: "plugin.security.ecc_curves", Type: "list", Default: "",
			Description: "Key-exchange curves allowed, comma separated: X25519, CurveP256, CurveP384, CurveP521; empty means Go's defaults.",
			set:         setter(parseCurves, func(c *Config) *[]string { return &c.ECCCurves }),
		},
		{
			Name: "plugin.choria.network.client_tls_force_required", Type: "boolean", Default: "true",
			Description: "With TLS on, every client must present a certificate signed by the CA (without users, any such certificate has full access); false lets clients connect over TLS without one and log in with a password.",
			set:         setter(parseBool, func(c *Config) *bool { return &c.ClientTLSForceRequired }),
		},
		{
			Name: "plugin.choria.network.tls_timeout", Type: "duration", Default: "2s",
			Description: "How long a TLS handshake with a client or peer may take: a Go duration or whole seconds.",
			set:         setter(parseTLSTimeout, func(c *Config) *time.Duration { return &c.TLSTimeout }),
		},
		{
			Name: "plugin.choria.network.peer_user", Type: "string", Default: "",
			Description: "User name brokers of a cluster give each other on their routes, set with peer_password; with TLS, routes also use mutual TLS, and each broker's certificate must name the address its peers dial.",
			set:         setter(parseString, func(c *Config) *string { return &c.PeerUser }),
		},
		{
			Name: "plugin.choria.network.peer_password", Type: "string", Default: "", secret: true,
			Description: "Password brokers of a cluster give each other on their routes (each broker must send it, so it is stored as is: protect the file).",
			set:         setter(parseString, func(c *Config) *string { return &c.PeerPassword }),
		},
		{
			Name: "plugin.nats.user", Type: "string", Default: "",
			Description: "User a client logs in as (with plugin.nats.pass, or alone with a certificate login); it also names the client's inbox prefix, `_INBOX.<user>`.",
			set:         setter(parseString, func(c *Config) *string { return &c.NATSUser }),
		},
		{
			Name: "plugin.nats.pass", Type: "string", Default: "", secret: true,
			Description: "Password a client logs in with; prefer the environment variable to a file.",
			set:         setter(parseString, func(c *Config) *string { return &c.NATSPass }),
		},
		{
			Name: "plugin.nats.credentials", Type: "path", Default: "",
			Description: "NATS credentials file (JWT and NKey seed) a client logs in with, for NATS servers with accounts in operator mode; Conclave's broker refuses such logins.",
			set:         setter(parseString, func(c *Config) *string { return &c.NATSCredentials }),
		},
		{
			Name: "plugin.conclave.insecure", Type: "boolean", Default: "false",
			Description: "Let the broker listen for clients or peers beyond loopback without TLS or without authentication; it warns at every start. Without it such a broker refuses to start.",
			set:         setter(parseBool, func(c *Config) *bool { return &c.Insecure }),
		},
	}
	for _, k := range userFields() {
		k.perUser = true
		keys = append(keys, k)
	}
	return keys
}

// setter builds a Key.set from a value parser and the field it fills. The
// field is left alone when the value does not parse.
func setter[T any](parse func(string) (T, error), field func(*Config) *T) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parse(v)
		if err != nil {
			return err
		}
		*field(c) = x
		return nil
	}
}

// keyIndex returns the keys by name.
func keyIndex(keys []Key) map[string]Key {
	index := make(map[string]Key, len(keys))
	for _, k := range keys {
		index[k.Name] = k
	}
	return index
}
