package broker_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/brokertest"
)

func TestSecondBrokerOnAStoreIsRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the store is not locked on Windows")
	}
	ctx := testContext(t, 30*time.Second)
	first, err := broker.New(brokertest.Config(t, "node-0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Shutdown)
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := brokertest.Config(t, "node-1")
	cfg.StreamStore = first.StoreDir()
	second, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(ctx)
	if !errors.Is(err, broker.ErrStoreInUse) {
		t.Fatalf("second broker on the store: %v, want ErrStoreInUse", err)
	}
	for _, want := range []string{cfg.StreamStore, "broker node-0", "pid", "plugin.choria.network.stream.store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The first broker still serves its bucket.
	js := connect(t, first.ClientURL())
	if _, err := js.KeyValue(ctx, bucket.Name); err != nil {
		t.Fatalf("the first broker's bucket after the refusal: %v", err)
	}

	// Once the first stops, the store can be used again.
	first.Shutdown()
	third, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(third.Shutdown)
	if err := third.Start(ctx); err != nil {
		t.Fatalf("a broker on the store after the first stopped: %v", err)
	}
}

func TestPortInUseIsFoundBeforeTheStoreIsOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	for _, key := range []string{"plugin.choria.network.client_port", "plugin.choria.stats_port"} {
		t.Run(key, func(t *testing.T) {
			cfg := brokertest.Config(t, "node-0")
			if key == "plugin.choria.stats_port" {
				cfg.StatsPort = port
			} else {
				cfg.ClientPort = port
			}
			b, err := broker.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Shutdown)
			err = b.Start(context.Background())
			if !errors.Is(err, broker.ErrPortInUse) {
				t.Fatalf("Start with a taken port: %v, want ErrPortInUse", err)
			}
			if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), taken.Addr().String()) {
				t.Errorf("error %q does not name %s and %s", err, key, taken.Addr())
			}
			if _, err := os.Stat(filepath.Join(cfg.StreamStore, "jetstream")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the store was opened before the port was checked (jetstream directory: %v)", err)
			}
		})
	}
}
