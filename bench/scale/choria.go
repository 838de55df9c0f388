package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Choria's candidates run in processes of bench/choria's scale scenario
// (its own module, which imports go-choria v0.30.2's election; the main
// module never does): the benchmark builds that module's binary once and
// starts it with its child variable, as bench/choria starts its own
// children. Each such process has one NATS connection, as a Choria program
// has, and one Choria election per key of a file, under the identity
// choria-scale-<proc>. It prints "READY {}", answers every line on its
// standard input with a JSON status line, and exits, without stopping its
// elections, when its standard input closes.

// choriaChildEnv is bench/choria's child variable (childEnv in
// bench/choria/child.go).
const choriaChildEnv = "CONCLAVE_CHORIA_BENCH_CHILD"

// choriaChildArgs is the part of bench/choria's childArgs its scale child
// reads.
type choriaChildArgs struct {
	Kind     string `json:"kind"` // "scale"
	URL      string `json:"url"`
	KeysFile string `json:"keys_file"`
	Proc     int    `json:"proc"`
	Copies   int    `json:"copies,omitempty"`
}

// choriaStatus is bench/choria's scaleStatus.
type choriaStatus struct {
	Leading []int     `json:"leading"` // indexes of the process's keys it leads now
	Wins    int       `json:"wins"`
	Losses  int       `json:"losses"`
	Errors  int       `json:"errors"`
	Error   string    `json:"error,omitempty"`
	Mem     *memStats `json:"mem,omitempty"` // in the answer to "mem"
}

// choriaLine turns a line of a Choria candidate process into a childMsg.
func choriaLine(line []byte) (childMsg, error) {
	if bytes.HasPrefix(line, []byte("READY")) {
		return childMsg{Type: msgReady}, nil
	}
	var st choriaStatus
	if err := json.Unmarshal(line, &st); err != nil {
		return childMsg{}, err
	}
	if st.Mem != nil {
		return childMsg{Type: msgMem, Mem: st.Mem}, nil
	}
	return childMsg{Type: msgStatus, Leading: int64(len(st.Leading)), Wins: int64(st.Wins), Losses: int64(st.Losses),
		Failed: int64(st.Errors), Err: st.Error, Keys: st.Leading}, nil
}

// choriaIdentity is the identity bench/choria's scale child p campaigns as.
func choriaIdentity(p int) string { return fmt.Sprintf("choria-scale-%d", p) }

// startChoria starts Choria candidate process p for keys, copies
// candidates in each, on the broker at url, with its files under dir.
func startChoria(dir, bin string, p int, url string, keys []string, copies int) (*candidate, error) {
	id := choriaIdentity(p)
	keysFile := filepath.Join(dir, id+".keys")
	if err := writeKeys(keysFile, keys); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(choriaChildArgs{Kind: "scale", URL: url, KeysFile: keysFile, Proc: p, Copies: copies})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{choriaChildEnv + "=" + string(raw)}
	return runCandidate(dir, id, keys, cmd, true)
}

// buildChoria builds bench/choria (a module of its own, next to this
// program in the main module) into dir and returns the binary's path.
func buildChoria(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "choria-bench")
	src := filepath.Join(root, "bench", "choria")
	progress("building the Choria side: go build -o %s . (in %s)", bin, src)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in bench/choria: %w\n%s", err, out)
	}
	return bin, nil
}

// buildProfilingBroker builds bench/scale/pprofbroker, the conclave CLI
// serving net/http/pprof on the address pprofEnv names.
func buildProfilingBroker(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "conclave-pprof")
	progress("building the profiling broker: go build -o %s ./bench/scale/pprofbroker", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/scale/pprofbroker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./bench/scale/pprofbroker: %w\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of the main module this program runs in.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the conclave module: run from its root")
	}
	return filepath.Dir(mod), nil
}
