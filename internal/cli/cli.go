// Package cli implements the conclave command: running a broker, and
// inspecting and steering elections on any NATS or Choria broker that has the
// election bucket.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/conclave-io/conclave/internal/buildinfo"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the conclave command with args and returns its exit status.
//
// Errors go to standard error as "conclave: " and the message; when the
// command was given --json, as one JSON object instead (see jsonError), so
// that a script that asked for JSON gets JSON, errors included.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code, err = ee.code, ee.err
	}
	if err == nil {
		return code
	}
	msg := tidyMessage(err.Error())
	if wantsJSON(cmd, args) {
		line, jerr := json.Marshal(jsonError{Time: formatJSONTime(time.Now()), Event: "error", Error: msg, ExitStatus: code})
		if jerr == nil {
			fmt.Fprintf(stderr, "%s\n", line)
			return code
		}
	}
	fmt.Fprintln(stderr, "conclave:", msg)
	return code
}

// jsonError is how a command given --json reports the error it ends with:
// one line on standard error, with the same time and event fields as the
// lines of run's and file's --json logs.
type jsonError struct {
	Time  string `json:"time"`
	Event string `json:"event"` // always "error"
	// Error is the message, as the text output prints it after "conclave: ".
	Error string `json:"error"`
	// ExitStatus is the status conclave exits with.
	ExitStatus int `json:"exit_status"`
}

// wantsJSON reports whether the command was given --json: by its parsed
// flag, else, when parsing failed before it, by the command line.
func wantsJSON(cmd *cobra.Command, args []string) bool {
	if cmd != nil {
		if f := cmd.Flags().Lookup("json"); f != nil && f.Changed {
			return f.Value.String() == "true"
		}
	}
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true":
			return true
		}
	}
	return false
}

// tidyMessage removes the stutter that wrapping leaves in an error's text:
// a leading "conclave: " (Main prints its own), a part repeated right
// after itself ("election billing: election billing: …"), and a sentinel's
// "election: " prefix right after a part that names the election already
// ("election billing: election: permission denied" reads "election
// billing: permission denied").
func tidyMessage(msg string) string {
	first, rest, _ := strings.Cut(msg, "\n")
	parts := strings.Split(first, ": ")
	var out []string
	for i, p := range parts {
		switch {
		case i == 0 && p == "conclave" && len(parts) > 1:
			continue
		case len(out) > 0 && p == out[len(out)-1]:
			continue
		case len(out) > 0 && p == "election" && i < len(parts)-1 && strings.HasPrefix(out[len(out)-1], "election "):
			continue
		}
		out = append(out, p)
	}
	tidy := strings.Join(out, ": ")
	if rest != "" {
		tidy += "\n" + rest
	}
	return tidy
}

// usageOnArgs makes the argument checks of cmd and its subcommands say,
// after cobra's "accepts 1 arg(s), received 0", how the command is used.
func usageOnArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		usageOnArgs(c)
	}
	check := cmd.Args
	if check == nil || cmd.HasSubCommands() {
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			path := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
			return fmt.Errorf("%s: %w\nUsage: %s\n(`%s --help` shows the flags and examples)", path, err, c.UseLine(), c.CommandPath())
		}
		return nil
	}
}

// app is what every command shares: its streams and the global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           connFlags
	resolved       *target // conn resolved, once
	// json: the command was given --json, so what it writes to standard
	// error is JSON lines too.
	json bool
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "conclave",
		Short: "Leader election for Go programs on NATS JetStream",
		Long:  "conclave runs the election broker and inspects and steers elections in the CHORIA_LEADER_ELECTION bucket of any NATS or Choria broker.\n\nDocumentation: https://github.com/conclave-io/conclave#the-cli",
		Example: `  conclave --config broker.conf broker run
  conclave election list
  conclave election run my_app ./cron.sh`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			a.json = wantsJSON(cmd, nil)
		},
	}
	asGroup(root)
	wrapFlagUsages(root, stdout)
	root.Version = buildinfo.Read().String()
	root.SetVersionTemplate("conclave {{.Version}}\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(a.brokerCommand())
	root.AddCommand(a.hashPasswordCommand())
	root.AddCommand(a.versionCommand())
	a.addElectionCommand(root)
	root.AddCommand(a.shardsCommand())
	usageOnArgs(root)
	return root
}

// wrapFlagUsages makes the help of cmd and its subcommands wrap each
// flag's usage to the terminal's width on standard output (at most 100
// columns), else to 80, indented under the usage's start, rather than
// leave the terminal to break long lines anywhere.
func wrapFlagUsages(cmd *cobra.Command, stdout io.Writer) {
	width := 80
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 40 {
			width = min(w, 100)
		}
	}
	tmpl := cmd.UsageTemplate()
	for _, set := range []string{".LocalFlags", ".InheritedFlags"} {
		tmpl = strings.ReplaceAll(tmpl, set+".FlagUsages ", fmt.Sprintf("%s.FlagUsagesWrapped %d ", set, width))
	}
	cmd.SetUsageTemplate(tmpl)
}

// asGroup makes cmd, which only groups subcommands, fail with exit status 1
// when its subcommand is missing (printing its usage on standard error) or
// unknown (suggesting the nearest one), instead of printing help and
// succeeding: a typo in a service's start command must not succeed.
func asGroup(cmd *cobra.Command) *cobra.Command {
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			fmt.Fprintln(cmd.ErrOrStderr())
			return fmt.Errorf("%s needs a command: one of %s", cmd.CommandPath(), strings.Join(subcommandNames(cmd), ", "))
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += ": did you mean " + strings.Join(s, " or ") + "?"
		} else {
			msg += ": use one of " + strings.Join(subcommandNames(cmd), ", ")
		}
		return errors.New(msg + " (`" + cmd.CommandPath() + " --help` shows them)")
	}
	return cmd
}

// subcommandNames lists cmd's visible subcommands.
func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return names
}

// onlyFlags hides the flags cmd inherits from its parents from its help,
// except keep, and makes setting any of the hidden ones an error: they
// belong to other commands, and cmd would silently ignore them.
func onlyFlags(cmd *cobra.Command, keep ...string) {
	kept := func(f *pflag.Flag) bool {
		for _, k := range keep {
			if f.Name == k {
				return true
			}
		}
		return f.Name == "help"
	}
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		var hidden []*pflag.Flag
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !kept(f) && !f.Hidden {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		})
		defer func() {
			for _, f := range hidden {
				f.Hidden = false
			}
		}()
		// The parent's help function is cobra's default one.
		c.Parent().HelpFunc()(c, args)
	})
	pre := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		var bad []string
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if f.Changed && !kept(f) {
				bad = append(bad, "--"+f.Name)
			}
		})
		if len(bad) > 0 {
			return fmt.Errorf("%s does not take %s: it is for the commands that connect to a broker", c.CommandPath(), strings.Join(bad, ", "))
		}
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
}
