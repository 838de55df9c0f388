package cli

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

// startSession starts a broker whose election bucket has a TTL of a
// minute and returns its URL and a session on it, with its JetStream
// context (s.js) and the bucket (s.kv).
func startSession(t *testing.T) (url string, s *session) {
	t.Helper()
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = time.Minute })
	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	return b.ClientURL(), &session{nc: nc, js: js, kv: kv, bucket: bucket.Name, timeout: 10 * time.Second}
}
