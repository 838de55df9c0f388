package readmetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestInstallFromAClone runs the install commands README.md and
// dist/systemd/README.md give for today, when no version is published
// (`go install …@latest` cannot resolve one): `go install ./cmd/conclave`
// in the clone's top directory, with GOBIN a temporary directory, and then
// the installed `conclave version`. Each keeps the @latest line, for when a
// version is published.
func TestInstallFromAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds conclave")
	}
	top, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"README.md", "dist/systemd/README.md"} {
		t.Run(doc, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(top, doc))
			if err != nil {
				t.Fatal(err)
			}
			_, install, ok := strings.Cut(string(raw), "\n## Install\n")
			if !ok {
				t.Fatalf("%s has no Install section", doc)
			}
			install, _, _ = strings.Cut(install, "\n## ")
			if !strings.Contains(install, "github.com/conclave-io/conclave/cmd/conclave@latest") {
				t.Errorf("%s's Install section lost the @latest line for when a version is published", doc)
			}
			// The command for today: go install ./cmd/conclave, run in the
			// clone, perhaps with GOBIN set.
			m := regexp.MustCompile(`(?m)^(GOBIN=\S+ )?go install (\./cmd/conclave)\s*$`).FindStringSubmatch(install)
			if m == nil {
				t.Fatalf("%s's Install section has no `go install ./cmd/conclave` line to install from a clone:\n%s", doc, install)
			}
			bin := t.TempDir()
			cmd := exec.Command("go", "install", m[2])
			cmd.Dir = top
			cmd.Env = append(os.Environ(), "GOBIN="+bin)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go install %s in %s: %v\n%s", m[2], top, err, out)
			}
			out, err := exec.Command(filepath.Join(bin, "conclave"), "version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "conclave ") {
				t.Errorf("the installed conclave version: %v\n%s", err, out)
			}
		})
	}
}
