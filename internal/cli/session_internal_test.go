package cli

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

// startSession starts a broker whose election bucket has a TTL of a
// minute and returns its URL and a session on it, with its JetStream
// context (s.js) and the bucket (s.kv).
func startSession(t *testing.T) (url string, s *session) {
	t.Helper()
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = time.Minute })
	nc, js := natstest.Connect(t, b.ClientURL())
	kv, err := js.KeyValue(t.Context(), bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	return b.ClientURL(), &session{nc: nc, js: js, kv: kv, bucket: bucket.Name, timeout: 10 * time.Second}
}
