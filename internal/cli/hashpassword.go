package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"
)

// Bcrypt costs hash-password accepts: below 10 a stolen hash is cheap to
// crack; 11 takes about a tenth of a second per login on a server core.
const (
	minBcryptCost     = 10
	defaultBcryptCost = 11
)

func (a *app) hashPasswordCommand() *cobra.Command {
	var cost int
	var stdin bool
	cmd := &cobra.Command{
		Use:   "hash-password",
		Short: "Print the bcrypt hash of a password, for a broker user's plugin.conclave.user.NAME.password",
		Long: `Reads a password (twice, without echoing it, from a terminal; or one line
from standard input with --stdin or when standard input is not a terminal) and
prints its bcrypt hash. Brokers store users' passwords only as such hashes:

  plugin.conclave.user.NAME.password = <the hash>

The password itself goes to the program that logs in, in plugin.nats.pass or
better the environment variable CONCLAVE_PLUGIN_NATS_PASS.`,
		Example: `  conclave hash-password
  printf '%s\n' "$PASSWORD" | conclave hash-password --stdin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cost < minBcryptCost || cost > bcrypt.MaxCost {
				return fmt.Errorf("--cost %d: use %d to %d (each step doubles the work of a login and of cracking the hash)", cost, minBcryptCost, bcrypt.MaxCost)
			}
			password, err := a.readPassword(stdin)
			if err != nil {
				return err
			}
			hash, err := bcrypt.GenerateFromPassword([]byte(password), cost)
			if err != nil {
				return fmt.Errorf("hashing the password: %w", err)
			}
			fmt.Fprintln(a.stdout, string(hash))
			fmt.Fprintln(a.stderr, "conclave: put the line above in the broker's configuration as plugin.conclave.user.NAME.password = <hash>")
			return nil
		},
	}
	onlyFlags(cmd)
	cmd.Flags().IntVar(&cost, "cost", defaultBcryptCost, "bcrypt cost, 10 to 31")
	cmd.Flags().BoolVar(&stdin, "stdin", false, "read the password as one line of standard input, without prompting")
	return cmd
}

// readPassword reads the password: twice without echo from a terminal, else
// one line of standard input. It refuses an empty one and, from a terminal,
// two that differ.
func (a *app) readPassword(fromStdin bool) (string, error) {
	f, isFile := a.stdin.(*os.File)
	if !fromStdin && isFile && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.stderr, "Password: ")
		p1, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("reading the password: %w", err)
		}
		fmt.Fprint(a.stderr, "Again: ")
		p2, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("reading the password: %w", err)
		}
		if string(p1) != string(p2) {
			return "", errors.New("the two passwords differ: nothing was printed; run it again")
		}
		return checkPassword(string(p1))
	}
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the password from standard input: %w", err)
	}
	return checkPassword(strings.TrimRight(line, "\r\n"))
}

func checkPassword(p string) (string, error) {
	if p == "" {
		return "", errors.New("the password is empty: give one (an empty password would let anyone who knows the user name in)")
	}
	if len(p) > 72 {
		return "", fmt.Errorf("the password has %d bytes: bcrypt uses only the first 72, so use at most 72", len(p))
	}
	return p, nil
}
