package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/logging"
)

func (a *app) brokerCommand() *cobra.Command {
	cmd := asGroup(&cobra.Command{Use: "broker", Short: "Run the election broker"})
	run := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run an embedded NATS broker that provisions the election bucket, until interrupted",
		Long: `Runs a NATS server with JetStream in the foreground, clustered with the
configured peers, and creates or updates the CHORIA_LEADER_ELECTION bucket with
the configured TTL and replicas. Ctrl-C (SIGINT) or SIGTERM stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := a.conn.config
			if path == "" {
				return fmt.Errorf("no configuration: pass --config FILE (see docs/config.md for the keys)")
			}
			cfg, err := config.Load(path)
			if err != nil {
				return err
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
