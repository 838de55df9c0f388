package config

import (
	"errors"
	"fmt"
)

// Validate checks every field and the rules between fields, and returns every
// problem joined with errors.Join; each matches ErrInvalid and says what to
// set. Messages start with Path when it is set. Load and Parse call Validate;
// call it yourself on a Config built or changed in code.
//
// Besides each field's own range (see Keys), Validate requires:
//   - plugin.choria.network.stream.store when plugin.choria.broker_network is true;
//   - plugin.choria.network.peer_port when plugin.choria.network.peers is set
//     (a peer port without peers is fine: a seed node others join);
//   - different client, peer and stats ports on the same address;
//   - a cluster (a peer port) for more than one replica on the embedded broker.
func (c *Config) Validate() error { return c.validate(c.Path) }

// validate is Validate with source (a file name, or "") starting each message.
func (c *Config) validate(source string) error {
	v := validator{source: source}
	v.fields(c)
	v.crossFields(c)
	v.security(c)
	return errors.Join(v.errs...)
}

// validator collects Validate's findings.
type validator struct {
	source string
	errs   []error
}

// fieldErr records err, if any, as a problem with key.
func (v *validator) fieldErr(key string, err error) {
	if err != nil {
		v.add("%s: %v", key, err)
	}
}

// add records a problem matching ErrInvalid.
func (v *validator) add(format string, args ...any) {
	prefix := "config: "
	if v.source != "" {
		prefix = v.source + ": "
	}
	v.errs = append(v.errs, newProblem(ErrInvalid, "%s%s", prefix, fmt.Sprintf(format, args...)))
}

// fields checks every field on its own.
func (v *validator) fields(c *Config) {
	v.fieldErr("identity", checkIdentity(c.Identity))
	v.fieldErr("loglevel", checkLogLevel(c.LogLevel))
	v.fieldErr("plugin.choria.middleware_hosts", checkURLs(c.MiddlewareHosts, middlewareRule()))
	v.fieldErr("plugin.choria.network.listen_address", checkHost(c.ListenAddress, "plugin.choria.network.client_port"))
	v.fieldErr("plugin.choria.network.client_port", checkPort(c.ClientPort, 1, clientPortRange))
	v.fieldErr("plugin.choria.network.peer_port", checkPort(c.PeerPort, 0, peerPortRange))
	v.fieldErr("plugin.choria.network.peers", checkURLs(c.Peers, peersRule()))
	v.fieldErr("plugin.choria.network.stream.leader_election_ttl", checkTTL(c.LeaderElectionTTL))
	v.fieldErr("plugin.choria.network.stream.leader_election_replicas", checkReplicas(c.LeaderElectionReplicas))
	v.fieldErr("plugin.conclave.election.priority", checkPriority(c.ElectionPriority))
	v.fieldErr("plugin.conclave.election.min_term", checkMinTerm(c.ElectionMinTerm))
	if c.StatsAddress != "" || c.StatsPort != 0 {
		v.fieldErr("plugin.choria.stats_address", checkHost(c.StatsAddress, "plugin.choria.stats_port"))
	}
	v.fieldErr("plugin.choria.stats_port", checkPort(c.StatsPort, 0, statsPortRange))
}

// crossFields checks the rules between fields.
func (v *validator) crossFields(c *Config) {
	if c.BrokerNetwork && c.StreamStore == "" {
		v.add("plugin.choria.broker_network is true but plugin.choria.network.stream.store is empty: set plugin.choria.network.stream.store to a directory for JetStream's files")
	}
	if len(c.Peers) > 0 && c.PeerPort == 0 {
		v.add("plugin.choria.network.peers is set but plugin.choria.network.peer_port is 0 (no cluster): set plugin.choria.network.peer_port to this broker's cluster port, e.g. 5222, or remove the peers")
	}
	if c.BrokerNetwork && c.PeerPort == 0 && c.LeaderElectionReplicas > 1 {
		v.add("plugin.choria.network.stream.leader_election_replicas is %d but the broker is not clustered (plugin.choria.network.peer_port is 0), so it can hold only 1 replica: set the replicas to 1 or -1, or set plugin.choria.network.peer_port and plugin.choria.network.peers", c.LeaderElectionReplicas)
	}
	v.portClash("plugin.choria.network.client_port", c.ClientPort, "plugin.choria.network.peer_port", c.PeerPort)
	if c.StatsAddress == c.ListenAddress {
		v.portClash("plugin.choria.network.client_port", c.ClientPort, "plugin.choria.stats_port", c.StatsPort)
		v.portClash("plugin.choria.network.peer_port", c.PeerPort, "plugin.choria.stats_port", c.StatsPort)
	}
}

// portClash records a problem when two fixed ports are the same.
func (v *validator) portClash(keyA string, a int, keyB string, b int) {
	if a > 0 && a == b {
		v.add("%s and %s are both %d: give each its own port", keyA, keyB, a)
	}
}
