package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// conclaveBin is the conclave binary TestMain builds, run as a user runs it.
var conclaveBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "conclave-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	conclaveBin = filepath.Join(dir, "conclave")
	args := []string{"build", "-o", conclaveBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/conclave-io/conclave/cmd/conclave")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building conclave: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
