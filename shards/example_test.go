package shards_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// exampleJetStream starts a throwaway broker with an election bucket and
// returns the JetStream context of a connection to it. Real programs
// connect to their broker, which provisions the bucket, or use the
// framework's NewShardGroup.
func exampleJetStream() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "conclave-shards-example-")
	if err != nil {
		panic(err)
	}
	srv, err := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("broker did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "CHORIA_LEADER_ELECTION", TTL: 10 * time.Second, History: 1,
	}); err != nil {
		panic(err)
	}
	return js, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

func ExampleNewGroup() {
	js, shutdown := exampleJetStream()
	defer shutdown()

	var mu sync.Mutex
	assigned := make(chan struct{}, 4)
	working := map[int]context.Context{}
	// One member of group "ingest" of 4 shards; others would run the same
	// code under their own identities and split the shards.
	g, err := shards.NewGroup("host1", "ingest", 4, js,
		shards.OnAssigned(func(shard int, term *streams.Term) {
			// Work on the shard under term.Context(), and send
			// term.Token() with every write so that a stale holder's
			// writes can be refused.
			mu.Lock()
			working[shard] = term.Context()
			mu.Unlock()
			assigned <- struct{}{}
		}),
		shards.OnRevoked(func(shard int) {
			mu.Lock()
			delete(working, shard)
			mu.Unlock()
		}),
	)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Start(ctx) }()
	for range 4 {
		<-assigned
	}
	fmt.Println("held:", g.Held())

	cancel() // hands the shards over to the other members, or releases them
	fmt.Println("Start returned:", <-done)
	fmt.Println("held:", g.Held(), "working on:", len(working))
	// Output:
	// held: [0 1 2 3]
	// Start returned: <nil>
	// held: [] working on: 0
}

func ExampleAssign() {
	members := []shards.Member{
		{Identity: "a", Weight: 1, Healthy: true},
		{Identity: "b", Weight: 1, Healthy: true},
		{Identity: "c", Weight: 1, Healthy: true},
	}
	// a and b split 6 shards; c joins: each of them gives it one shard,
	// and nothing else moves.
	before := []string{"a", "a", "a", "b", "b", "b"}
	after := shards.Assign(6, members, before)
	fmt.Println(after)
	// Output:
	// [a a c b b c]
}
