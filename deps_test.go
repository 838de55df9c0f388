package conclave_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCampaigningDoesNotLinkTheServer: a program that only campaigns links
// the root package and what it imports, and none of them may import the
// NATS server (package embedded, broker and the tests may). The server
// more than doubles a program's size.
func TestCampaigningDoesNotLinkTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	light := []string{
		"github.com/conclave-io/conclave",
		"github.com/conclave-io/conclave/acl",
		"github.com/conclave-io/conclave/backoff",
		"github.com/conclave-io/conclave/bucket",
		"github.com/conclave-io/conclave/bucket/fit",
		"github.com/conclave-io/conclave/config",
		"github.com/conclave-io/conclave/inter",
		"github.com/conclave-io/conclave/metrics",
		"github.com/conclave-io/conclave/providers/election/streams",
		"github.com/conclave-io/conclave/shards",
	}
	for _, pkg := range light {
		t.Run(pkg, func(t *testing.T) {
			// -deps lists what pkg imports, directly or not; its tests are
			// not part of it.
			out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
			}
			for line := range strings.Lines(string(out)) {
				importer, imports, _ := strings.Cut(strings.TrimSpace(line), ": ")
				for imp := range strings.FieldsSeq(imports) {
					if strings.HasPrefix(imp, "github.com/nats-io/nats-server/") {
						t.Errorf("%s links the NATS server: %s imports %s", pkg, importer, imp)
					}
				}
			}
		})
	}
}
