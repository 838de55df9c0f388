package conclavetest_test

import (
	"context"
	"fmt"

	"github.com/conclave-io/conclave/conclavetest"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

// Example tests code that must run on one node only: a report that a node
// sends while it leads election "reports". In a test, start the broker with
// conclavetest.StartBroker(t) and the frameworks with b.Framework(t, name):
// both are then closed when the test ends.
func Example() {
	b, err := conclavetest.Start()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// node runs the code under test as identity: it reports while leading.
	node := func(identity string) (events <-chan string, stop func()) {
		fw, err := b.NewFramework(identity)
		if err != nil {
			panic(err)
		}
		ch := make(chan string, 10)
		e, err := fw.NewElection(ctx, nil, "reports",
			election.OnWon(func() { ch <- identity + " starts reporting" }),
			election.OnLost(func() { ch <- identity + " stops reporting" }))
		if err != nil {
			panic(err)
		}
		done := make(chan error)
		go func() { done <- e.Start(ctx) }()
		return ch, func() { e.Stop(); <-done; _ = fw.Close() }
	}

	n1, stop1 := node("n1")
	fmt.Println(<-n1)
	n2, stop2 := node("n2") // stands by while n1 leads
	defer stop2()

	stop1() // n1 shuts down and hands over at once, whatever the TTL
	fmt.Println(<-n1)
	fmt.Println(<-n2)
	// Output:
	// n1 starts reporting
	// n1 stops reporting
	// n2 starts reporting
}
