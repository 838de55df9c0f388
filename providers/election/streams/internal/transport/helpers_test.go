package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const bucketName = "CHORIA_LEADER_ELECTION"

// startServer starts an in-process nats-server with JetStream and returns
// its URL.
func startServer(t testing.TB) string {
	t.Helper()
	return natstest.Start(t, &server.Options{JetStream: true, SyncAlways: true}).ClientURL()
}

// connect returns a connection that reconnects forever, closed at cleanup.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, _ := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.ReconnectJitter(0, 0), nats.NoCallbacksAfterClientClose())
	return nc
}

// createBucket makes the election bucket with ttl as the broker provisions
// it (per-message TTLs allowed, without limit markers), and returns it and
// the JetStream context it was made through.
func createBucket(t testing.TB, nc *nats.Conn, ttl time.Duration) (jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName, TTL: ttl, History: 1, Storage: jetstream.FileStorage, MaxValueSize: 1024})
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	st, err := js.Stream(ctx, "KV_"+bucketName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowMsgTTL = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("allow per-message TTLs: %v", err)
	}
	return kv, js
}

// consumers returns the number of consumers on the election stream.
func consumers(t testing.TB, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Consumers
}

// writtenAfter is the comparator the tests' hubs judge with. A feed asks
// its comparator only about messages at or below the revisions it saw,
// and the election's (isNews, in package streams) answers that they are
// news when written after what it saw, as this one does. Package streams
// tests the feeds with the election's own (TestHubFollowsARecreatedBucket).
func writtenAfter(known, msg Position) bool {
	return msg.Revision > known.Revision || !known.Written.IsZero() && msg.Written.After(known.Written)
}

// eventually polls cond until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type nopLogger struct{}

func (nopLogger) Debugf(string, ...any) {}
func (nopLogger) Infof(string, ...any)  {}
func (nopLogger) Warnf(string, ...any)  {}
func (nopLogger) Errorf(string, ...any) {}
