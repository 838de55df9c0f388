package conclave_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

// quietLogger discards log lines, to keep the examples' output to what they print.
func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// exampleFramework returns a framework running its own throwaway broker, and
// a function that closes it and removes the broker's store. Real programs
// connect to their brokers: conclave.New(conclave.UserConfig()).
func exampleFramework() (*conclave.Framework, func()) {
	dir, err := os.MkdirTemp("", "conclave-example-")
	if err != nil {
		panic(err)
	}
	cfg := config.Default()
	cfg.Identity = "n1.example.net"
	cfg.ClientPort = config.RandomPort
	cfg.StreamStore = dir
	cfg.LeaderElectionTTL = 5 * time.Second
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(quietLogger()))
	if err != nil {
		panic(err)
	}
	if _, err := embedded.StartBroker(context.Background(), fw); err != nil {
		panic(err)
	}
	return fw, func() {
		_ = fw.Close()
		_ = os.RemoveAll(dir)
	}
}

func ExampleNew() {
	dir, _ := os.MkdirTemp("", "conclave-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "conclave.conf")
	_ = os.WriteFile(path, []byte("identity = n1.example.net\nplugin.choria.middleware_hosts = nats1:4222, nats2:4222\n"), 0o600)

	// Programs usually pass conclave.UserConfig() to find the file.
	fw, err := conclave.New(path, conclave.WithLogger(quietLogger()))
	if err != nil {
		panic(err)
	}
	defer fw.Close()
	fmt.Println(fw.Identity(), fw.Servers())
	// Output: n1.example.net [nats://nats1:4222 nats://nats2:4222]
}

func ExampleFramework_NewElection() {
	fw, closeAll := exampleFramework()
	defer closeAll()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	won := make(chan struct{})
	e, err := fw.NewElection(ctx, nil, "my_app",
		election.OnWon(func() { fmt.Println("won"); close(won) }),
		election.OnLost(func() { fmt.Println("lost") }))
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- e.Start(ctx) }() // campaigns until ctx ends

	<-won
	fmt.Println("leader:", e.IsLeader())
	cancel()
	fmt.Println("Start returned:", <-done)
	// Output:
	// won
	// leader: true
	// lost
	// Start returned: <nil>
}

func ExampleFramework_NewCampaign() {
	fw, closeAll := exampleFramework()
	defer closeAll()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan *election.Term, 1)
	e, err := fw.NewCampaign(ctx, nil, "billing", election.OnLeading(func(t *election.Term) { terms <- t }))
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- e.Start(ctx) }()

	t := <-terms
	// Send the token with every write a stale leader must not make, and
	// stop work when the term's context ends. Tokens are large numbers: a
	// bucket the broker creates starts its revisions at its creation time in
	// microseconds, such as 1795386133129551.
	fmt.Println(t.Identity(), "leads", t.Key(), "with a token:", t.Token() > 0, "valid:", t.Context().Err() == nil)
	e.Stop()
	<-done
	fmt.Println("term ended:", t.Err())
	// Output:
	// n1.example.net leads billing with a token: true valid: true
	// term ended: election: term ended: released
}

func ExampleFramework_NewObserver() {
	fw, closeAll := exampleFramework()
	defer closeAll()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan election.Leadership, 10)
	o, err := fw.NewObserver(ctx, nil, "my_app", election.OnChange(func(l election.Leadership) { changes <- l }))
	if err != nil {
		panic(err)
	}
	observed := make(chan error)
	go func() { observed <- o.Run(ctx) }()
	fmt.Println(<-changes)

	e, _ := fw.NewElection(ctx, nil, "my_app")
	done := make(chan error)
	go func() { done <- e.Start(ctx) }()
	// Printed, l says "my_app: n1.example.net leads (elected, token
	// 1795386133149636, revision 1795386133149636)": the broker starts a
	// bucket's revisions at its creation time in microseconds.
	l := <-changes
	fmt.Printf("%s: %s leads (%s, token = revision: %v)\n", l.Key, l.Leader, l.Event, l.Token > 0 && l.Token == l.Revision)

	cancel()
	<-done
	<-observed
	// Output:
	// my_app: no leader (current)
	// my_app: n1.example.net leads (elected, token = revision: true)
}

func ExampleFramework_Connection() {
	fw, closeAll := exampleFramework()
	defer closeAll()

	// The shared connection is made on first use, named after the identity.
	nc, err := fw.Connection(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println("connected as", nc.Opts.Name)
	// Output: connected as n1.example.net
}

func ExampleWithSlog() {
	// A handler without times, so that the output is the same every run.
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	fw, err := conclave.New("", conclave.WithSlog(slog.New(h)))
	if err != nil {
		panic(err)
	}
	defer fw.Close()

	// The framework's, its elections' and fw.Logger's lines go to slog.
	fw.Logger("worker").WithField("worker", 3).Info("started")
	// Output: level=INFO msg=started component=worker worker=3
}
