package broker_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
)

// A single broker on loopback; ports -1 pick free ports.
func ExampleBroker_Start() {
	store, err := os.MkdirTemp("", "conclave-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(store)

	cfg := &config.Config{
		Identity:               "broker-1.example.net",
		ListenAddress:          "127.0.0.1",
		ClientPort:             -1,
		StreamStore:            store,
		SyncAlways:             true,
		LeaderElectionTTL:      time.Minute,
		LeaderElectionReplicas: -1,
	}
	b, err := broker.New(cfg, nil)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Shutdown()

	report := b.ProvisionReport()
	fmt.Println("election bucket:", report)
	fmt.Println("consumers limit:", report.Consumers)
	// Output:
	// election bucket: created, max consumers server default → 1000000, per-key TTL off → on
	// consumers limit: 1000000 (the stream's limit)
}

// Provisioning an existing NATS server's bucket to a shorter TTL.
func ExampleProvisionElectionBucket() {
	store, err := os.MkdirTemp("", "conclave-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(store)
	b, err := broker.New(&config.Config{
		Identity: "broker-1", ClientPort: -1, StreamStore: store, SyncAlways: true,
		LeaderElectionTTL: time.Minute, LeaderElectionReplicas: 1,
	}, nil)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Shutdown()

	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}

	spec := broker.BucketSpec{TTL: 30 * time.Second, Replicas: 1}
	report, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
	if err != nil {
		panic(err)
	}
	for _, change := range report.Changes {
		fmt.Println(change)
	}
	again, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(again)
	// Output:
	// TTL 1m0s → 30s
	// duplicate window 1m0s → 30s
	// unchanged
}
