package brokertest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openBucket connects to urls and opens the election bucket.
func openBucket(t *testing.T, ctx context.Context, urls ...string) jetstream.KeyValue {
	t.Helper()
	_, js := natstest.Connect(t, strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	return kv
}

func TestStartSingle(t *testing.T) {
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = 5 * time.Second })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if got := b.BucketSpec().TTL; got != 5*time.Second {
		t.Fatalf("mutate not applied: TTL %v", got)
	}
	kv := openBucket(t, ctx, b.ClientURL())
	if _, err := kv.Create(ctx, "app", []byte("node-0")); err != nil {
		t.Fatalf("Create: %v", err)
	}
}

func TestSingleNodeRestartKeepsStoreAndPort(t *testing.T) {
	c := brokertest.StartCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if leader := c.BucketLeader(); leader != 0 {
		t.Fatalf("BucketLeader %d on a single node", leader)
	}
	url := c.Broker(0).ClientURL()
	kv := openBucket(t, ctx, url)
	rev, err := kv.Create(ctx, "app", []byte("node-0"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	c.Stop(0)
	if c.Broker(0) != nil || len(c.Brokers()) != 0 {
		t.Fatal("stopped node still listed")
	}
	c.Restart(0)
	if got := c.Broker(0).ClientURL(); got != url {
		t.Fatalf("restarted on %s, was %s", got, url)
	}
	e, err := openBucket(t, ctx, url).Get(ctx, "app")
	if err != nil || e.Revision() != rev {
		t.Fatalf("after restart: %v, %v; want revision %d", e, err, rev)
	}
}

func TestClusterStopAndRestart(t *testing.T) {
	c := brokertest.StartCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	urls := c.ClientURLs()
	for i, b := range c.Brokers() {
		if b.ClientURL() != urls[i] {
			t.Fatalf("ClientURLs()[%d] = %s, broker says %s", i, urls[i], b.ClientURL())
		}
	}
	kv := openBucket(t, ctx, urls...)
	rev, err := kv.Create(ctx, "app", []byte("node-x"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}

	leader := c.BucketLeader()
	c.Stop(leader)
	if next := c.BucketLeader(); next == leader {
		t.Fatalf("stopped node %d still leads", leader)
	}
	c.Restart(leader)

	// The whole cluster down and up again, all nodes at once.
	all := []int{0, 1, 2}
	c.Stop(all...)
	c.Restart(all...)
	if !slices.Equal(c.ClientURLs(), urls) {
		t.Fatalf("client URLs changed: %v, were %v", c.ClientURLs(), urls)
	}
	c.BucketLeader()
	e, err := openBucket(t, ctx, urls...).Get(ctx, "app")
	if err != nil || e.Revision() != rev {
		t.Fatalf("after restarting the cluster: %v, %v; want revision %d", e, err, rev)
	}
}
