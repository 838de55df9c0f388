package broker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// plainServer starts a nats-server with JetStream and no election bucket,
// standing in for "any NATS" that ProvisionElectionBucket works against.
func plainServer(t *testing.T) *server.Server {
	t.Helper()
	return natstest.Start(t, &server.Options{JetStream: true})
}

// connect returns a JetStream context on url, closed when the test ends.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	_, js := natstest.Connect(t, url)
	return js
}

// testContext returns a context that ends with the test or after d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// hookedLogger returns an entry at level whose entries the hook records.
func hookedLogger(level logrus.Level) (*logrus.Entry, *test.Hook) {
	l, hook := test.NewNullLogger()
	l.SetLevel(level)
	return logrus.NewEntry(l), hook
}

// streamConfig reads the election stream's configuration.
func streamConfig(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return st.CachedInfo().Config
}

// hasMessage reports whether any recorded entry at level or above has msg.
func hasMessage(hook *test.Hook, level logrus.Level, msg string) bool {
	for _, e := range hook.AllEntries() {
		if e.Level <= level && e.Message == msg {
			return true
		}
	}
	return false
}

func osHostname() (string, error) { return os.Hostname() }
