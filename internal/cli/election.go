package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// elections is what the election commands share: the app and the bucket.
type elections struct {
	a      *app
	bucket string
}

// addElectionCommand registers the connection flags on root, for every
// command that talks to a broker, and adds the election command.
func (a *app) addElectionCommand(root *cobra.Command) {
	a.conn.register(root.PersistentFlags())
	root.AddCommand(a.electionCommand())
}

func (a *app) electionCommand() *cobra.Command {
	e := &elections{a: a}
	cmd := &cobra.Command{
		Use:   "election",
		Short: "Inspect and steer elections in the election bucket",
		Long: `Lists, watches and inspects the elections in the CHORIA_LEADER_ELECTION bucket
of a Conclave broker, a Choria broker or any NATS server with JetStream that
has the bucket; forces a leader to stand down; runs a command while leading.

Each key of the bucket is one election; its value is the leader's identity.
The output, the JSON fields and the connection flags are described at
` + docsURL("cli.md") + `.`,
		Example: `  conclave election list
  conclave --server nats://b1:4222 election watch my_app
  conclave --config /etc/conclave/client.conf election run my_app ./cron.sh`,
	}
	asGroup(cmd)
	cmd.PersistentFlags().StringVar(&e.bucket, "bucket", bucket.Name, "the KV bucket holding the elections")
	cmd.AddCommand(e.listCommand(), e.infoCommand(), e.watchCommand(), e.standDownCommand(), e.runCommand(), e.fileCommand())
	for _, c := range cmd.Commands() {
		if c.Name() != "list" {
			c.ValidArgsFunction = e.completeElections
		}
	}
	return cmd
}

// validateElectionName checks that name can be an election key.
func validateElectionName(name string) error {
	if err := streams.ValidateKey(name); err != nil {
		return fmt.Errorf("election name: %w", err)
	}
	return nil
}

// stderrLogger passes an election's or observer's log lines to an
// eventLog: warnings and errors always, the rest when verbose.
type stderrLogger struct {
	log     *eventLog
	verbose bool
}

func (l stderrLogger) Debugf(format string, args ...any) {
	if l.verbose {
		l.print("debug", format, args)
	}
}

func (l stderrLogger) Infof(format string, args ...any) {
	if l.verbose {
		l.print("info", format, args)
	}
}

func (l stderrLogger) Warnf(format string, args ...any) { l.print("warning", format, args) }

// Errorf logs an error, except a refusal for permissions: that ends the
// election or observer, whose error the command ends with, and it is said
// once, there.
func (l stderrLogger) Errorf(format string, args ...any) {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, denied.ErrPermissionDenied) {
			return
		}
	}
	l.print("error", format, args)
}

func (l stderrLogger) print(level, format string, args []any) {
	l.log.event("log", map[string]any{"level": level}, "%s: %s", level, fmt.Sprintf(format, args...))
}
