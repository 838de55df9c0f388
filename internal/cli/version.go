package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/internal/buildinfo"
)

func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version conclave was built from",
		Long: `Prints the module version (a tag when installed with go install …@vX.Y.Z,
"(devel)" when built from a checkout), the commit it was built from and
whether the tree had uncommitted changes ("modified"), and the Go version,
as the Go toolchain recorded them in the binary. --version prints the same.`,
		Example: `  conclave version
  conclave version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			if asJSON {
				return writeJSON(a.stdout, in)
			}
			_, err := fmt.Fprintln(a.stdout, "conclave", in)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: version, revision, time, modified, go_version, platform")
	onlyFlags(cmd)
	return cmd
}
