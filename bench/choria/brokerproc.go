package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// conclaveModule is the main module, which this module uses through a
// replace directive.
const conclaveModule = "github.com/conclave-io/conclave"

// buildConclave builds the conclave CLI of the main module into dir and
// returns its path. The main module's directory is where this module's
// replace directive points, as `go list -m` reports it.
func buildConclave(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", conclaveModule).Output()
	if err != nil {
		return "", fmt.Errorf("finding the %s module (run from bench/choria, or pass -conclave): %w", conclaveModule, exitErr(err))
	}
	root := strings.TrimSpace(string(out))
	if root == "" {
		return "", fmt.Errorf("finding the %s module: go list printed no directory", conclaveModule)
	}
	bin := filepath.Join(dir, "conclave")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/conclave")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the conclave CLI in %s: %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	return bin, nil
}

// exitErr adds a failed command's standard error to its error.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// brokerProc is a `conclave broker run` child process.
type brokerProc struct {
	cmd        *exec.Cmd
	done       chan struct{} // closed when the process has exited
	err        error         // its exit status, once done is closed
	url        string        // client URL
	monitorURL string        // HTTP monitoring endpoints
	logPath    string        // its standard output and error
	logFile    *os.File
}

// brokerConfig is the configuration a benchmark broker runs with: one node,
// loopback, the election bucket with one replica and the given TTL, and
// everything else at Conclave's defaults (SyncAlways among them).
func brokerConfig(store string, clientPort, statsPort int, ttl time.Duration) string {
	return fmt.Sprintf(`# written by the choria benchmark's scale scenario
identity = bench-broker
loglevel = info
plugin.choria.broker_network = true
plugin.choria.network.listen_address = 127.0.0.1
plugin.choria.network.client_port = %d
plugin.choria.network.stream.store = %s
plugin.choria.network.stream.leader_election_ttl = %s
plugin.choria.network.stream.leader_election_replicas = 1
plugin.choria.stats_address = 127.0.0.1
plugin.choria.stats_port = %d
`, clientPort, store, ttl, statsPort)
}

// startConclaveBroker runs `bin broker run` with a configuration written to
// dir and waits until it serves clients, its monitoring port and the
// election bucket with the wanted TTL. The process ends when stop is called
// and, on Linux, when this process dies.
func startConclaveBroker(ctx context.Context, bin, dir string, ttl time.Duration, within time.Duration) (*brokerProc, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte(brokerConfig(filepath.Join(dir, "store"), ports[0], ports[1], ttl)), 0o644); err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	b := &brokerProc{
		done:       make(chan struct{}),
		url:        fmt.Sprintf("nats://127.0.0.1:%d", ports[0]),
		monitorURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		logPath:    filepath.Join(dir, "broker.log"),
	}
	if b.logFile, err = os.Create(b.logPath); err != nil {
		return nil, fmt.Errorf("broker log: %w", err)
	}
	b.cmd = exec.Command(bin, "broker", "run", "--config", conf)
	b.cmd.Stdout, b.cmd.Stderr = b.logFile, b.logFile
	dieWithParent(b.cmd)
	if err := b.cmd.Start(); err != nil {
		b.logFile.Close()
		return nil, fmt.Errorf("starting %s broker run: %w", bin, err)
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	if err := b.waitReady(ctx, ttl, within); err != nil {
		b.stop()
		return nil, fmt.Errorf("%w; broker log:\n%s", err, b.logTail(20))
	}
	return b, nil
}

// waitReady polls until the broker has the bucket with TTL ttl and serves
// /varz.
func (b *brokerProc) waitReady(ctx context.Context, ttl, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-b.done:
			return fmt.Errorf("conclave broker exited at start-up: %v", b.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if last = b.ready(ctx, ttl); last == nil {
			return nil
		}
	}
	return fmt.Errorf("conclave broker not ready within %v: %w", within, last)
}

func (b *brokerProc) ready(ctx context.Context, ttl time.Duration) error {
	nc, err := nats.Connect(b.url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(rctx, bucketName)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketName, err)
	}
	st, err := kv.Status(rctx)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketName, err)
	}
	if st.TTL() != ttl {
		return fmt.Errorf("bucket %s has TTL %v, not %v", bucketName, st.TTL(), ttl)
	}
	if _, err := remoteVarz(rctx, b.monitorURL); err != nil {
		return fmt.Errorf("monitoring: %w", err)
	}
	return nil
}

// alive returns an error if the broker process has exited.
func (b *brokerProc) alive() error {
	select {
	case <-b.done:
		return fmt.Errorf("conclave broker exited: %v; broker log:\n%s", b.err, b.logTail(20))
	default:
		return nil
	}
}

// pid is the broker's process id.
func (b *brokerProc) pid() int { return b.cmd.Process.Pid }

// stop asks the broker to shut down (SIGTERM) and kills it if it has not
// within 15s; it always waits for the process to end.
func (b *brokerProc) stop() {
	select {
	case <-b.done:
	default:
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
	b.logFile.Close()
}

// logTail returns the last n lines of the broker's log.
func (b *brokerProc) logTail(n int) string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// streamConsumers returns how many consumers the election stream has.
func streamConsumers(ctx context.Context, js jetstream.JetStream) (int, error) {
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", streamName, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", streamName, err)
	}
	return info.State.Consumers, nil
}

// freePorts returns n TCP ports on loopback that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
