package embedded_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for an event in these tests.
const wait = 15 * time.Second

// newFramework returns a framework named identity, connecting to servers,
// that logs to t.Log and is closed when the test ends; mutate, when not
// nil, changes its configuration first.
func newFramework(t *testing.T, identity string, servers []string, mutate func(*config.Config)) *conclave.Framework {
	t.Helper()
	cfg := config.Default()
	cfg.Identity = identity
	cfg.MiddlewareHosts = servers
	if mutate != nil {
		mutate(cfg)
	}
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(brokertest.Logger(t).Logger))
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

// embeddable configures a broker on a random port with its store in a
// temporary directory.
func embeddable(t *testing.T) func(*config.Config) {
	return func(c *config.Config) {
		c.BrokerNetwork = true
		c.ClientPort = config.RandomPort
		c.StreamStore = t.TempDir()
		c.LeaderElectionTTL = 2 * time.Second
	}
}

func TestStartBroker(t *testing.T) {
	// The embedded broker wins over middleware_hosts.
	fw := newFramework(t, "embedded-node", []string{natstest.DeadURL(t)}, embeddable(t))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	b, err := embedded.StartBroker(ctx, fw)
	if err != nil {
		t.Fatalf("StartBroker: %v", err)
	}
	if got := fw.Servers(); len(got) != 1 || got[0] != b.ClientURL() {
		t.Errorf("Servers = %v, want [%s]", got, b.ClientURL())
	}
	if _, err := embedded.StartBroker(ctx, fw); !errors.Is(err, conclave.ErrBrokerStarted) {
		t.Errorf("second StartBroker: %v, want ErrBrokerStarted", err)
	}
	nc, err := fw.Connection(ctx)
	if err != nil {
		t.Fatalf("Connection: %v", err)
	}
	if got := nc.ConnectedServerName(); got != "embedded-node" || nc.Opts.InProcessServer == nil {
		t.Errorf("connected to server %q (in-process: %v), want the embedded broker embedded-node in-process", got, nc.Opts.InProcessServer != nil)
	}
	if _, err := fw.Bucket(ctx, nil); err != nil {
		t.Errorf("the embedded broker has no election bucket: %v", err)
	}

	if err := fw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-b.Done():
	case <-time.After(wait):
		t.Fatal("Close did not shut the broker down")
	}
	if !nc.IsClosed() {
		t.Error("Close left the shared connection open")
	}
}

func TestStartBrokerAfterConnecting(t *testing.T) {
	other := brokertest.StartSingle(t, nil)
	fw := newFramework(t, "late-node", []string{other.ClientURL()}, embeddable(t))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := fw.Connection(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.StartBroker(ctx, fw); !errors.Is(err, conclave.ErrConnected) || !strings.Contains(err.Error(), other.ClientURL()) {
		t.Errorf("StartBroker after Connection: %v, want ErrConnected naming %s", err, other.ClientURL())
	}
}

// TestStartBrokerAfterClose: a closed framework refuses a broker before the
// broker's configuration is looked at (this one has no store).
func TestStartBrokerAfterClose(t *testing.T) {
	fw := newFramework(t, "closed-node", nil, nil)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.StartBroker(context.Background(), fw); !errors.Is(err, conclave.ErrClosed) {
		t.Errorf("StartBroker after Close: %v, want ErrClosed", err)
	}
}

func TestStartBrokerInvalidConfig(t *testing.T) {
	fw := newFramework(t, "storeless-node", nil, nil) // no plugin.choria.network.stream.store
	_, err := embedded.StartBroker(context.Background(), fw)
	if !errors.Is(err, broker.ErrInvalidConfig) || !strings.Contains(err.Error(), "store") {
		t.Fatalf("StartBroker without a store: %v, want broker.ErrInvalidConfig naming the store", err)
	}
	// The framework has no broker: it still connects where configured.
	if got := fw.Servers(); len(got) != 1 || got[0] != conclave.DefaultServer {
		t.Errorf("Servers = %v after a failed start, want [%s]", got, conclave.DefaultServer)
	}
}
