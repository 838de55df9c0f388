package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func (e *elections) listCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [PATTERN]",
		Short: "List every election with its leader, latest revision and expiry",
		Long: `Lists every key of the bucket: the leader's identity, or "released by X"
(leader X stepped down and marked the key free: a candidate can lead at once)
or "removed" (someone else deleted, purged or emptied the key: a forced
stand-down; the next leader waits a TTL before it acts). Keys that expired are
gone and not listed.

REVISION is the revision of the key's latest write. It is the term's fencing
token only when that write began the term: renewals raise it, and the bucket
keeps no older values. LAST WRITE is the age of the latest renewal (or
campaign), EXPIRES when the key expires unless the leader renews it: last
write plus the bucket's TTL. Watch an election to see terms begin and their
tokens.

PATTERN lists only the elections matching it, as NATS subjects match: * is
any one token, a final > one or more (app-a.>, *.cron). A user that may not
read every election (a broker's plugin.conclave.user.NAME.campaign and
.observe patterns) must pass a pattern it may read.`,
		Example: `  conclave election list
  conclave --config app-a.conf election list 'app-a.>'
  conclave --context prod election list --json | jq -r '.elections[] | select(.state == "held") | .leader'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pattern := ">"
			if len(args) == 1 {
				pattern = args[0]
			}
			return e.list(cmd.Context(), pattern, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts (fields: "+docsURL("cli.md")+")")
	return cmd
}

// listJSON is the JSON output of list.
type listJSON struct {
	Bucket    bucketRefJSON  `json:"bucket"`
	Elections []electionJSON `json:"elections"`
}

// list lists the elections matching pattern, ">" for every one.
func (e *elections) list(ctx context.Context, pattern string, asJSON bool) error {
	if err := checkPattern(pattern); err != nil {
		return err
	}
	s, err := e.open(ctx, connectOptions{name: "conclave election list"})
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	recs, err := s.readRecords(ctx, pattern)
	if err != nil {
		return everyElectionRefused(err, pattern, "list", e.a.who())
	}
	now := time.Now()
	ttl := st.TTL()
	if asJSON {
		out := listJSON{Bucket: bucketRefJSON{Name: s.bucket, TTLSeconds: seconds(ttl)}, Elections: []electionJSON{}}
		for _, r := range recs {
			out.Elections = append(out.Elections, newElectionJSON(r, ttl, now))
		}
		return writeJSON(e.a.stdout, out)
	}
	return writeListTable(e.a.stdout, s.bucket, pattern, ttl, recs, now)
}

// writeListTable writes list's table of recs, the elections in bucket
// matching pattern.
func writeListTable(w io.Writer, bucket, pattern string, ttl time.Duration, recs []record, now time.Time) error {
	in := "in " + bucket
	if pattern != ">" {
		in = "matching " + pattern + " in " + bucket
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "No elections %s (TTL %v).\n", in, ttl)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ELECTION\tLEADER\tREVISION\tLAST WRITE\tEXPIRES")
	for _, r := range recs {
		leader, expires := "("+stateText(r)+")", "-"
		if r.State == streams.KeyHeld {
			leader = r.Leader
			if ttl > 0 {
				expires = until(r.Written.Add(ttl), now)
			} else {
				expires = "never (bucket has no TTL)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Key, leader, r.Revision, ago(r.Written, now), expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	noun := "elections"
	if len(recs) == 1 {
		noun = "election"
	}
	if pattern != ">" {
		noun += " matching " + pattern
	}
	_, err := fmt.Fprintf(w, "\n%d %s in %s, TTL %v. REVISION is the latest write's; it is the fencing token only if that write began the term.\n",
		len(recs), noun, bucket, ttl)
	return err
}

// checkPattern checks an election pattern given to list or watch.
func checkPattern(pattern string) error {
	if err := config.CheckElectionPattern(pattern); err != nil {
		return fmt.Errorf("election pattern: %w", err)
	}
	return nil
}

// everyElectionRefused explains err, from reading or watching the elections
// matching pattern for command (list, watch), when it is the broker refusing
// the user every election (">"): the user must pass a pattern it may read.
// Other errors are returned as they are.
func everyElectionRefused(err error, pattern, command, who string) error {
	if pattern != ">" || !errors.Is(err, denied.ErrPermissionDenied) {
		return err
	}
	return fmt.Errorf("%s may not read every election (the broker refused it a watch of >): pass a pattern of the elections it may read, such as `conclave election %s 'app-a.>'` for a user whose plugin.conclave.user.NAME.campaign or .observe is app-a.>: %w", who, command, err)
}
