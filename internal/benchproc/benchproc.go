// Package benchproc is what the benchmark programs under bench/ share for
// the processes they run: the conclave binary they start brokers with, a
// free port, and a process's CPU time. Linux only (it reads /proc).
package benchproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// BuildCLI builds ./cmd/conclave of the module the program runs in into
// dir and returns the binary's path.
func BuildCLI(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the conclave module: run from its root, or pass -conclave")
	}
	bin := filepath.Join(dir, "conclave")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/conclave")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/conclave: %w\n%s", err, out)
	}
	return bin, nil
}

// FreePort returns a TCP port free on loopback now.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// CPUTicks returns the user plus system CPU time of process pid, in clock
// ticks, from /proc/<pid>/stat.
func CPUTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: only %d fields after the name", pid, len(f))
	}
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}
