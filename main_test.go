package conclave_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTTL is the election bucket TTL of the test brokers: short, so that
// elections start and end quickly.
const testTTL = 2 * time.Second

// wait bounds every wait for an event in these tests.
const wait = 15 * time.Second

// startBroker starts a single test broker with the test TTL.
func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	return brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = testTTL })
}

// testConfig returns a valid configuration named identity that connects to
// servers.
func testConfig(identity string, servers ...string) *config.Config {
	cfg := config.Default()
	cfg.Identity = identity
	cfg.MiddlewareHosts = servers
	return cfg
}

// newFramework returns a framework for cfg that logs to t.Log and is closed
// when the test ends.
func newFramework(t *testing.T, cfg *config.Config, opts ...conclave.Option) *conclave.Framework {
	t.Helper()
	opts = append([]conclave.Option{conclave.WithLogger(brokertest.Logger(t).Logger)}, opts...)
	fw, err := conclave.NewWithConfig(cfg, opts...)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	t.Cleanup(func() {
		if err := fw.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return fw
}

// writeFile writes text to a new file in a temporary directory and returns
// its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bufferLogger returns a logger that writes JSON lines into a buffer.
func bufferLogger() (*logrus.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	l := logrus.New()
	l.SetOutput(buf)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logrus.DebugLevel)
	return l, buf
}

// syncBuffer is a bytes buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// candidate is an election started in the background, with its OnWon and
// OnLost calls delivered on channels.
type candidate struct {
	won, lost chan struct{}
	done      chan error
	cancel    context.CancelFunc
}

// callbacks returns the options that feed c's channels.
func (c *candidate) callbacks() []streams.Option {
	return []streams.Option{
		streams.OnWon(func() { c.won <- struct{}{} }),
		streams.OnLost(func() { c.lost <- struct{}{} }),
	}
}

func newCandidate() *candidate {
	return &candidate{won: make(chan struct{}, 10), lost: make(chan struct{}, 10), done: make(chan error, 1)}
}

// start runs e.Start in the background until stop.
func (c *candidate) start(t *testing.T, e interface{ Start(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- e.Start(ctx) }()
	t.Cleanup(func() { c.stop(t) })
}

// stop ends the campaign and waits for Start to return nil.
func (c *candidate) stop(t *testing.T) {
	t.Helper()
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(wait):
		t.Errorf("Start did not return within %v of the cancel", wait)
	}
}

// await waits for a signal on ch, failing the test after wait.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
	}
}
