package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completeTimeout bounds the broker lookups of shell completion: a shell
// waits for them.
const completeTimeout = 2 * time.Second

// completeElections completes an election NAME argument with the elections
// in the bucket; without a broker (or with any other error) it completes
// nothing, silently. Arguments after the first are files: run's command.
func (e *elections) completeElections(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	if e.a.conn.timeout <= 0 || e.a.conn.timeout > completeTimeout {
		e.a.conn.timeout = completeTimeout
	}
	quiet := *e.a
	quiet.stderr = discard{}
	qe := *e
	qe.a = &quiet
	s, err := qe.open(ctx, connectOptions{name: "conclave completion"})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer s.Close()
	recs, err := s.readRecords(ctx, ">")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, r := range recs {
		if strings.HasPrefix(r.Key, prefix) {
			names = append(names, r.Key)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// discard is an io.Writer that drops everything.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
