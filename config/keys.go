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
	// set parses a value into its field of c; errors match ErrInvalidValue.
	set func(c *Config, value string) error
}

// Env returns the environment variable that overrides the key: EnvPrefix
// followed by the name in upper case with "." replaced by "_", e.g.
// CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT.
func (k Key) Env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))
}

// DefaultIsComputed reports whether Default describes a computed default (such
// as the host name) rather than being a literal value.
func (k Key) DefaultIsComputed() bool { return k.computed }

// Keys returns every key this package reads, in documentation order. The
// slice is new on every call.
func Keys() []Key {
	return []Key{
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
			Description: "Port clients connect to: 1 to 65535, or -1 for a random free port (for tests).",
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
			Description: "Directory for JetStream's files; required when `plugin.choria.broker_network` is true.",
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
			Name: "plugin.choria.stats_address", Type: "host", Default: "127.0.0.1",
			Description: "IP address or host name the broker's monitoring and `/metrics` HTTP server listens on.",
			set: setter(func(v string) (string, error) { return parseHost(v, "plugin.choria.stats_port") },
				func(c *Config) *string { return &c.StatsAddress }),
		},
		{
			Name: "plugin.choria.stats_port", Type: "port", Default: "0",
			Description: "Port of the monitoring server: 1 to 65535, 0 to turn it off, or -1 for a random free port.",
			set:         setter(parseStatsPort, func(c *Config) *int { return &c.StatsPort }),
		},
	}
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
