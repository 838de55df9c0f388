// Package cli implements the conclave command: running a broker, and
// inspecting and steering elections on any NATS or Choria broker that has the
// election bucket.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the conclave command with args and returns its exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "conclave:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "conclave:", err)
	return 1
}

// app is what every command shares: its streams and the global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           connFlags
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "conclave",
		Short:         "Leader election for Go programs on NATS JetStream",
		Long:          "conclave runs the election broker and inspects and steers elections in the CHORIA_LEADER_ELECTION bucket of any NATS or Choria broker.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(a.brokerCommand())
	root.AddCommand(a.hashPasswordCommand())
	a.addElectionCommand(root)
	return root
}
