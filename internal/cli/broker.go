package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/logging"
)

func (a *app) brokerCommand() *cobra.Command {
	cmd := asGroup(&cobra.Command{
		Use:     "broker",
		Short:   "Run the election broker",
		Example: "  conclave --config /etc/conclave/broker.conf broker run",
	})
	run := &cobra.Command{
		Use:   "run [--config FILE]",
		Short: "Run an embedded NATS broker that provisions the election bucket, until interrupted",
		Long: `Runs a NATS server with JetStream in the foreground, clustered with the
configured peers, and creates or updates the CHORIA_LEADER_ELECTION bucket with
the configured TTL and replicas. Ctrl-C (SIGINT) or SIGTERM stops it cleanly.

The configuration keys are described at ` + docsURL("config.md") + `.
A file that sets plugin.choria.broker_network = false configures no broker
(a client's file, in Choria) and is refused; left unset, the broker runs.

Without --config it reads the file programs read: $CONCLAVE_CONFIG, else
conclave.conf in the working directory, ~/.config/conclave/ or /etc/conclave/.`,
		Example: `  conclave broker run --config /etc/conclave/broker.conf
  CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT=4333 conclave --config broker.conf broker run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := a.conn.config
			if path == "" {
				// The file programs read: $CONCLAVE_CONFIG,
				// ./conclave.conf, ~/.config/conclave/conclave.conf,
				// /etc/conclave/conclave.conf.
				path = config.FindUserConfig()
			}
			if path == "" {
				return fmt.Errorf("no configuration: pass --config FILE, or set $%s, or put conclave.conf in the working directory, ~/.config/conclave/ or /etc/conclave/ (its keys: %s)", config.EnvConfig, docsURL("config.md"))
			}
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			if where := brokerNetworkOff(path, cfg); where != "" {
				return fmt.Errorf("%s sets plugin.choria.broker_network = false: that configuration runs no broker (it is a client's, as in Choria): set it to true, or remove the line, to run the broker it configures", where)
			}
			log, closeLog, err := logging.New(cfg, a.stderr)
			if err != nil {
				return err
			}
			defer closeLog()
			b, err := broker.New(cfg, log.WithField("component", "broker"))
			if err != nil {
				return err
			}
			return b.Run(cmd.Context())
		},
	}
	cmd.AddCommand(run)
	onlyFlags(run, "config")
	return cmd
}

// brokerNetworkOff says where the configuration cfg, read from path,
// explicitly turns the broker off: "FILE:LINE" or
// "$CONCLAVE_PLUGIN_CHORIA_BROKER_NETWORK", or "". Left unset, broker run
// runs the broker the file configures: running one is what it is for.
func brokerNetworkOff(path string, cfg *config.Config) string {
	if cfg.BrokerNetwork {
		return ""
	}
	envName := config.EnvPrefix + "PLUGIN_CHORIA_BROKER_NETWORK"
	if v, ok := os.LookupEnv(envName); ok && strings.TrimSpace(v) != "" {
		return "$" + envName
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for i, line := range strings.Split(string(raw), "\n") {
		if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "plugin.choria.broker_network" {
			return fmt.Sprintf("%s:%d", path, i+1)
		}
	}
	return ""
}

// docsURL is where a document of the project is read by a user who
// installed the command with go install, without the source.
func docsURL(doc string) string {
	return "https://github.com/conclave-io/conclave/blob/main/docs/" + doc
}
