package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/conclave-io/conclave/config"
)

func ExampleParseWithEnv() {
	file := `# broker.conf
identity = broker1
plugin.choria.broker_network = yes
plugin.choria.network.stream.store = /var/lib/conclave
plugin.choria.network.stream.leader_election_ttl = 30
plugin.choria.middleware_hosts = broker1:4222, tls://broker2:4443
`
	env := map[string]string{"CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT": "4333"}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }

	cfg, err := config.ParseWithEnv(strings.NewReader(file), "broker.conf", lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Identity, cfg.BrokerNetwork, cfg.LeaderElectionTTL, cfg.ClientPort)
	fmt.Println(cfg.MiddlewareHosts)
	// Output:
	// broker1 true 30s 4333
	// [nats://broker1:4222 tls://broker2:4443]
}

func ExampleParse() {
	file := `identity = broker1
plugin.choria.network.client_port = abc
plugin.choria.network.client_prot = 4222
`
	_, err := config.Parse(strings.NewReader(file), "broker.conf")
	fmt.Println(err)
	fmt.Println(errors.Is(err, config.ErrUnknownKey), errors.Is(err, config.ErrInvalidValue))
	// Output:
	// broker.conf:2: plugin.choria.network.client_port: "abc" is not a port number: use 1 to 65535, or -1 for a random free port
	// broker.conf:3: plugin.choria.network.client_prot: unknown key: did you mean plugin.choria.network.client_port?
	// true true
}

func ExampleLoad() {
	dir, err := os.MkdirTemp("", "conclave")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "conclave.conf")
	if err := os.WriteFile(path, []byte("identity = n1\nloglevel = WARNING\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}

	cfg, err := config.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.LogLevel, cfg.Path == path)
	// Output: warn true
}

func ExampleDefault() {
	cfg := config.Default()
	fmt.Println(cfg.ListenAddress, cfg.ClientPort, cfg.LeaderElectionTTL, cfg.LeaderElectionReplicas, cfg.SyncAlways)
	// Output: 127.0.0.1 4222 1m0s -1 true
}

func ExampleConfig_Validate() {
	cfg := config.Default()
	cfg.BrokerNetwork = true
	cfg.Peers = []string{"nats://broker2:5222"}
	err := cfg.Validate()
	fmt.Println(err)
	fmt.Println(errors.Is(err, config.ErrInvalid))
	// Output:
	// config: plugin.choria.broker_network is true but plugin.choria.network.stream.store is empty: set plugin.choria.network.stream.store to a directory for JetStream's files
	// config: plugin.choria.network.peers is set but plugin.choria.network.peer_port is 0 (no cluster): set plugin.choria.network.peer_port to this broker's cluster port, e.g. 5222, or remove the peers
	// true
}

func ExampleKeys() {
	for _, k := range config.Keys()[:3] {
		fmt.Printf("%s (%s, default %q): $%s\n", k.Name, k.Type, k.Default, k.Env())
	}
	// Output:
	// identity (string, default "the host name"): $CONCLAVE_IDENTITY
	// loglevel (log level, default "info"): $CONCLAVE_LOGLEVEL
	// logfile (path, default ""): $CONCLAVE_LOGFILE
}

func ExampleFindUserConfig() {
	var (
		cfg *config.Config
		err error
	)
	if path := config.FindUserConfig(); path != "" {
		cfg, err = config.Load(path)
	} else {
		cfg, err = config.FromEnv(os.LookupEnv) // no file anywhere: defaults and environment
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("running as", cfg.Identity)
}

func ExampleFromEnv() {
	env := map[string]string{"CONCLAVE_IDENTITY": "n1", "CONCLAVE_PLUGIN_CHORIA_STATS_PORT": "8222"}
	cfg, err := config.FromEnv(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Identity, cfg.StatsPort, cfg.ClientPort)
	// Output: n1 8222 4222
}
