package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/internal/brokertest"
)

func TestClusterGetsOneReplicaPerServer(t *testing.T) {
	c := brokertest.StartCluster(t, 3, nil)
	ctx := testContext(t, 60*time.Second)
	for i, b := range c.Brokers() {
		if b.ClusterSize() != 3 || b.BucketSpec().Replicas != 3 {
			t.Errorf("node %d: cluster size %d, replicas %d; want 3", i, b.ClusterSize(), b.BucketSpec().Replicas)
		}
		if b.ClusterURL() != c.Config(i).Peers[i] {
			t.Errorf("node %d: ClusterURL %q, want %q", i, b.ClusterURL(), c.Config(i).Peers[i])
		}
	}

	leader := c.BucketLeader()
	js := connect(t, c.Broker((leader+1)%3).ClientURL())
	info := waitStreamCurrent(t, ctx, js, 3)
	if info.Config.Replicas != 3 {
		t.Fatalf("replicas %d, want 3", info.Config.Replicas)
	}
	if want := c.Config(leader).Identity; info.Cluster.Leader != want {
		t.Errorf("stream leader %q, harness says %q", info.Cluster.Leader, want)
	}

	// A write through one node is read through another.
	kv, err := js.KeyValue(ctx, broker.ElectionBucket)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	rev, err := kv.Create(ctx, "app", []byte("node-x"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}

	// Scaling the bucket is reported like any other change.
	down, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil)
	if err != nil || down.String() != "replicas 3 → 1" {
		t.Fatalf("scaling down: %q, %v", down, err)
	}
	up, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 3}, nil)
	if err != nil || up.String() != "replicas 1 → 3" {
		t.Fatalf("scaling up: %q, %v", up, err)
	}
	waitStreamCurrent(t, ctx, js, 3)

	// The stream leader stops: another node leads, the data stays, and the
	// restarted node finds the bucket as it should be.
	leader = c.BucketLeader()
	c.Stop(leader)
	next := c.BucketLeader()
	if next == leader {
		t.Fatalf("node %d still leads after it stopped", leader)
	}
	other := connect(t, c.Broker(next).ClientURL())
	okv, err := other.KeyValue(ctx, broker.ElectionBucket)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	entry, err := okv.Get(ctx, "app")
	if err != nil || entry.Revision() != rev {
		t.Fatalf("after the leader stopped: %v, %v; want revision %d", entry, err, rev)
	}
	c.Restart(leader)
	if r := c.Broker(leader).ProvisionReport(); r.Changed() {
		t.Errorf("restarted node changed the bucket: %q", r)
	}
	waitStreamCurrent(t, ctx, other, 3)
}

// waitStreamCurrent waits until the election stream has a leader and
// replicas-1 current followers, and returns its info.
func waitStreamCurrent(t *testing.T, ctx context.Context, js jetstream.JetStream, replicas int) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	waitFor(t, 60*time.Second, "a leader and current followers", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(rctx, broker.ElectionStream)
		if err != nil {
			return false
		}
		info = st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != replicas-1 {
			return false
		}
		return !slices.ContainsFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return !p.Current })
	})
	return info
}
