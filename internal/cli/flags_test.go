package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoFlagShadowsAGlobalOne: no command defines a flag of its own named
// as one of its parents' persistent flags: conclave --timeout 5 election
// run … (or --config before broker run) would silently set the wrong one.
func TestNoFlagShadowsAGlobalOne(t *testing.T) {
	t.Parallel()
	root := newRoot(strings.NewReader(""), io.Discard, io.Discard)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			sub.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				for p := sub.Parent(); p != nil; p = p.Parent() {
					if p.PersistentFlags().Lookup(f.Name) != nil {
						t.Errorf("%s --%s shadows %s's --%s", sub.CommandPath(), f.Name, p.CommandPath(), f.Name)
					}
				}
			})
			walk(sub)
		}
	}
	walk(root)
}
