package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/providers/election/streams"
)

func (e *elections) listCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
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
tokens.`,
		Example: `  conclave election list
  conclave --context prod election list --json | jq -r '.elections[] | select(.state == "held") | .leader'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.list(cmd.Context(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts (fields: "+docsURL("cli.md")+")")
	return cmd
}

// listJSON is the JSON output of list.
type listJSON struct {
	Bucket     string         `json:"bucket"`
	TTLSeconds float64        `json:"ttl_seconds"`
	Elections  []electionJSON `json:"elections"`
}

func (e *elections) list(ctx context.Context, asJSON bool) error {
	s, err := e.open(ctx, connectOptions{name: "conclave election list"})
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	recs, err := s.readRecords(ctx, ">")
	if err != nil {
		return err
	}
	now := time.Now()
	ttl := st.TTL()
	if asJSON {
		out := listJSON{Bucket: s.bucket, TTLSeconds: seconds(ttl), Elections: []electionJSON{}}
		for _, r := range recs {
			out.Elections = append(out.Elections, newElectionJSON(r, ttl, now))
		}
		return writeJSON(e.a.stdout, out)
	}
	return writeListTable(e.a.stdout, s.bucket, ttl, recs, now)
}

func writeListTable(w io.Writer, bucket string, ttl time.Duration, recs []record, now time.Time) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "No elections in %s (TTL %v).\n", bucket, ttl)
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
	_, err := fmt.Fprintf(w, "\n%d %s in %s, TTL %v. REVISION is the latest write's; it is the fencing token only if that write began the term.\n",
		len(recs), noun, bucket, ttl)
	return err
}
