package streams

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsFor returns the JetStream context the helpers opened kv with, for
// NewElection: nil for nil, and for a bucket a test wrapped to inject faults
// (bucketOptions gives those a store of their own).
func jsFor(kv jetstream.KeyValue) jetstream.JetStream {
	if kv == nil {
		return nil
	}
	if js, ok := jsOf.Load(kv); ok {
		return js.(jetstream.JetStream)
	}
	return nil
}

// bucketOptions returns opts after what a candidate needs to campaign in kv:
// for a bucket the helpers opened, InBucket with its name (Start opens it
// over jsFor's context, as in production); for a bucket a test wrapped to
// inject faults, a store that uses the wrapper through the KV API only, so
// that every write and watch goes through it.
func bucketOptions(kv jetstream.KeyValue, opts ...Option) []Option {
	if kv == nil {
		return opts
	}
	if _, ok := jsOf.Load(kv); ok {
		return append([]Option{InBucket(kv.Bucket())}, opts...)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			_ = opt(&o)
		}
	}
	return append([]Option{withStore(newStore(kv, nil, o.log))}, opts...)
}

// readmeCandidate is a candidate made as the README's direct-API example
// makes one: its own connection, jetstream.New, and NewElection with no
// options but callbacks and a logger.
type readmeCandidate struct {
	e    *Election
	won  chan time.Time
	done chan error
}

func newReadmeCandidate(t *testing.T, url, identity, key string) *readmeCandidate {
	t.Helper()
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := &readmeCandidate{won: make(chan time.Time, 4), done: make(chan error, 1)}
	c.e, err = NewElection(identity, key, js,
		OnWon(func() { c.won <- time.Now() }),
		WithLogger(testLogger{t, identity + ": "}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { c.done <- c.e.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			t.Errorf("Start of %s did not return", identity)
		}
	})
	return c
}

func (c *readmeCandidate) waitWon(t *testing.T, within time.Duration) time.Time {
	t.Helper()
	select {
	case at := <-c.won:
		return at
	case <-time.After(within):
		t.Fatalf("%s did not lead within %v", c.e.Identity(), within)
		return time.Time{}
	}
}

func (c *readmeCandidate) stop(t *testing.T) {
	t.Helper()
	c.e.Stop()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Start of %s returned %v", c.e.Identity(), err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Start of %s did not return after Stop", c.e.Identity())
	}
}

// TestFastPathHandOver: candidates made exactly as the README shows hand
// over at once when the leader stops, on a bucket with a 10s TTL: its
// release is marked, so neither a running standby nor a candidate that
// starts after the release waits for the TTL, as they would after an
// unmarked delete (a forced stand-down). Both on a bucket as Conclave's
// broker provisions it (per-message TTLs) and on a plain one (a Choria
// broker, or nats kv add).
func TestFastPathHandOver(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name   string
		create func(testing.TB, *nats.Conn, jetstream.KeyValueConfig) jetstream.KeyValue
	}{
		{"provisioned bucket", createBucket},
		{"plain bucket", createPlainBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			tc.create(t, connect(t, ts.url()), bucketConfig(ttl))

			leader := newReadmeCandidate(t, ts.url(), "host1", "my_app")
			leader.waitWon(t, 5*time.Second)
			standby := newReadmeCandidate(t, ts.url(), "host2", "my_app")
			eventually(t, 5*time.Second, "host2 to campaign", func() bool { return standby.e.State() == CandidateState })
			time.Sleep(500 * time.Millisecond) // host2 follows the key

			stopped := time.Now()
			leader.stop(t)
			handOver := standby.waitWon(t, ttl+5*time.Second).Sub(stopped)
			t.Logf("hand-over to a running standby (TTL %v): %v", ttl, handOver)
			if handOver >= time.Second {
				t.Fatalf("host2 led %v after host1's Stop, want well within a second (the TTL is %v): the release was not marked", handOver, ttl)
			}

			// A candidate that starts after the release leads at once too.
			standby.stop(t)
			time.Sleep(200 * time.Millisecond)
			started := time.Now()
			late := newReadmeCandidate(t, ts.url(), "host3", "my_app")
			lead := late.waitWon(t, ttl+5*time.Second).Sub(started)
			t.Logf("a candidate started after the release led after %v", lead)
			if lead >= time.Second {
				t.Fatalf("host3, started after host2's release, led after %v, want well within a second", lead)
			}
		})
	}
}
