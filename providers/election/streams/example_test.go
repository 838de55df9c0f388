package streams_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// exampleBucket starts a throwaway broker with the election bucket and
// returns the bucket, the JetStream context of a connection to the broker,
// and a function that shuts it all down. Real programs connect to their
// broker, which provisions the bucket, and pass jetstream.New(nc) to
// NewElection and NewObserver.
func exampleBucket() (jetstream.KeyValue, jetstream.JetStream, func()) {
	dir := mustTempDir()
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
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "CHORIA_LEADER_ELECTION", TTL: 10 * time.Second, History: 1,
	})
	if err != nil {
		panic(err)
	}
	return kv, js, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

func ExampleNewElection() {
	_, js, shutdown := exampleBucket()
	defer shutdown()

	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan *streams.Term, 1)
	// js is jetstream.New(nc); the election is in the CHORIA_LEADER_ELECTION bucket.
	e, err := streams.NewElection("n1.example.net", "my_app", js,
		streams.OnWon(func() { fmt.Println("won") }),
		streams.OnLost(func() { fmt.Println("lost") }),
		// The term carries the fencing token and a context that ends with it.
		streams.OnLeading(func(t *streams.Term) { leading <- t }),
	)
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- e.Start(ctx) }()

	term := <-leading
	fmt.Println("leader:", e.IsLeader(), "token:", term.Token(), "valid:", term.Valid())

	cancel() // or e.Stop(): the release is marked, so the next candidate leads at once
	fmt.Println("Start returned:", <-done)
	fmt.Println("leader:", e.IsLeader(), "term:", term.Err())
	// Output:
	// won
	// leader: true token: 1 valid: true
	// lost
	// Start returned: <nil>
	// leader: false term: election: term ended: released
}

func ExampleNewObserver() {
	_, js, shutdown := exampleBucket()
	defer shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	changes := make(chan streams.Leadership, 10)
	o, err := streams.NewObserver("my_app", js, streams.OnChange(func(l streams.Leadership) { changes <- l }))
	if err != nil {
		panic(err)
	}
	observed := make(chan error)
	go func() { observed <- o.Run(ctx) }()
	fmt.Println(<-changes)

	e, _ := streams.NewElection("n1.example.net", "my_app", js)
	campaigned := make(chan error)
	go func() { campaigned <- e.Start(ctx) }()
	fmt.Println(<-changes)
	e.Stop()
	<-campaigned
	fmt.Println(<-changes)

	cancel()
	<-observed
	// Output:
	// my_app: no leader (current)
	// my_app: n1.example.net leads (elected, token 1, revision 1)
	// my_app: no leader (released)
}
