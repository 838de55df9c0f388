package embedded_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
)

func ExampleStartBroker() {
	dir, _ := os.MkdirTemp("", "conclave-example-")
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.Identity = "n1.example.net"
	cfg.ClientPort = config.RandomPort // a free port; real brokers listen on a fixed one
	cfg.StreamStore = dir
	cfg.LeaderElectionTTL = 10 * time.Second
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	defer fw.Close() // shuts the broker down

	ctx := context.Background()
	if _, err := embedded.StartBroker(ctx, fw); err != nil {
		panic(err)
	}
	// Elections of fw now go to the broker in this process.
	kv, err := fw.Bucket(ctx, nil)
	if err != nil {
		panic(err)
	}
	st, _ := kv.Status(ctx)
	fmt.Println(st.Bucket(), "TTL", st.TTL())
	// Output: CHORIA_LEADER_ELECTION TTL 10s
}
