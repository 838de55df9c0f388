package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/bucket"
)

// validBroker returns a valid configuration running a clustered broker.
func validBroker() *Config {
	c := Default()
	c.Identity = "n1"
	c.BrokerNetwork = true
	c.StreamStore = "/var/lib/conclave"
	c.PeerPort = 5222
	c.Peers = []string{"nats://n2:5222", "nats://n3:5222"}
	c.LeaderElectionReplicas = 3
	c.StatsPort = 8222
	return c
}

func TestValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
	}{
		{"default", func(c *Config) { *c = *Default() }},
		{"clustered broker", func(*Config) {}},
		{"seed node: peer port without peers", func(c *Config) { c.Peers = nil }},
		{"random ports", func(c *Config) { c.ClientPort, c.PeerPort, c.StatsPort = RandomPort, RandomPort, RandomPort }},
		{"stats off", func(c *Config) { c.StatsPort, c.StatsAddress = 0, "" }},
		{"same port on another stats address", func(c *Config) { c.StatsAddress, c.StatsPort = "10.0.0.1", c.ClientPort }},
		{"one replica without a cluster", func(c *Config) { c.PeerPort, c.Peers, c.LeaderElectionReplicas = 0, nil, 1 }},
		{"replicas without the embedded broker", func(c *Config) { c.BrokerNetwork, c.PeerPort, c.Peers = false, 0, nil }},
		{"bare host:port hosts", func(c *Config) { c.MiddlewareHosts = []string{"b1:4222", "tls://b2:4443"} }},
		{"TTL at the minimum", func(c *Config) { c.LeaderElectionTTL = bucket.MinTTL }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validBroker()
			tc.change(c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string // one substring per expected error
	}{
		{"broker without store", func(c *Config) { c.StreamStore = "" },
			[]string{"plugin.choria.broker_network is true but plugin.choria.network.stream.store is empty: set plugin.choria.network.stream.store"}},
		{"peers without peer port", func(c *Config) { c.PeerPort, c.LeaderElectionReplicas = 0, -1 },
			[]string{"plugin.choria.network.peers is set but plugin.choria.network.peer_port is 0 (no cluster): set plugin.choria.network.peer_port"}},
		{"replicas without cluster", func(c *Config) { c.PeerPort, c.Peers = 0, nil },
			[]string{"leader_election_replicas is 3 but the broker is not clustered"}},
		{"empty listen address", func(c *Config) { c.ListenAddress = "" },
			[]string{"plugin.choria.network.listen_address: is empty: use an IP address or a host name"}},
		{"empty identity", func(c *Config) { c.Identity = "" }, []string{"identity: is empty"}},
		{"identity with space", func(c *Config) { c.Identity = "n 1" }, []string{`identity: "n 1" contains white space`}},
		{"identity with wildcards", func(c *Config) { c.Identity = "n.*" }, []string{"wildcard '*'"}},
		{"identity with tail wildcard", func(c *Config) { c.Identity = "n.>" }, []string{"wildcard '>'"}},
		{"identity with control", func(c *Config) { c.Identity = "n\x00" }, []string{"control character"}},
		{"log level not canonical", func(c *Config) { c.LogLevel = "INFO" }, []string{`loglevel: "INFO" is not a log level`}},
		{"client port 0", func(c *Config) { c.ClientPort = 0 }, []string{"client_port: 0 is out of range"}},
		{"peer port too big", func(c *Config) { c.PeerPort = 70000 }, []string{"peer_port: 70000 is out of range"}},
		{"stats port negative", func(c *Config) { c.StatsPort = -3 }, []string{"stats_port: -3 is out of range"}},
		{"stats on without address", func(c *Config) { c.StatsAddress = "" }, []string{"plugin.choria.stats_address: is empty"}},
		{"TTL too short", func(c *Config) { c.LeaderElectionTTL = 999 * time.Millisecond }, []string{"leader_election_ttl: 999ms is too short: use at least 1s"}},
		{"replicas 0", func(c *Config) { c.LeaderElectionReplicas = 0 }, []string{"leader_election_replicas: 0 is out of range"}},
		{"bad middleware host", func(c *Config) { c.MiddlewareHosts = []string{"nohost"} }, []string{`middleware_hosts: "nohost" has no port`}},
		{"bad peer", func(c *Config) { c.Peers = []string{"tls://n2:5222"} }, []string{`peers: "tls://n2:5222" has the scheme "tls"`}},
		{"client and peer port clash", func(c *Config) { c.PeerPort = c.ClientPort },
			[]string{"plugin.choria.network.client_port and plugin.choria.network.peer_port are both 4222"}},
		{"stats port clash", func(c *Config) { c.StatsPort = c.PeerPort },
			[]string{"plugin.choria.network.peer_port and plugin.choria.stats_port are both 5222"}},
		{"several at once", func(c *Config) { c.StreamStore, c.Identity, c.ClientPort = "", "", 0 },
			[]string{"identity: is empty", "client_port: 0 is out of range", "stream.store is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validBroker()
			tc.change(c)
			err := c.Validate()
			errs := flatten(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, e := range errs {
				if !errors.Is(e, ErrInvalid) {
					t.Errorf("error %q does not match ErrInvalid", e)
				}
				if msg := e.Error(); !strings.HasPrefix(msg, "config: ") || !strings.Contains(msg, tc.want[i]) {
					t.Errorf("error %q: want prefix \"config: \" and %q", msg, tc.want[i])
				}
			}
		})
	}
}

func TestValidateNamesTheFile(t *testing.T) {
	c := validBroker()
	c.StreamStore = ""
	c.Path = "/etc/conclave/conclave.conf"
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.Path+": ") {
		t.Errorf("got %v, want it to start with the path", err)
	}
	_, err := parseText(t, "plugin.choria.broker_network = true\n", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "test.conf: ") || !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse: got %v, want a validation error naming test.conf", err)
	}
}
