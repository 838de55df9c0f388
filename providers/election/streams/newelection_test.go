package streams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connless is a JetStream context without a connection, as a custom
// implementation of the interface may be.
type connless struct{ jetstream.JetStream }

func (connless) Conn() *nats.Conn { return nil }

// TestNewElectionNeedsAJetStreamContext: NewElection and NewObserver say at
// once what is wrong with a nil JetStream context or one without a
// connection, instead of failing inside Start or Run.
func TestNewElectionNeedsAJetStreamContext(t *testing.T) {
	t.Parallel()
	for what, js := range map[string]jetstream.JetStream{"a nil context": nil, "one without a connection": connless{}} {
		_, errE := NewElection("host1", "my_app", js)
		_, errO := NewObserver("my_app", js)
		for _, err := range []error{errE, errO} {
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "pass jetstream.New(nc)") {
				t.Errorf("%s: got %v, want ErrInvalidOption saying to pass jetstream.New(nc)", what, err)
			}
		}
	}
}

func TestNewElectionInBucket(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, says string }{
		{"bad name", `contains ' '`},
		{"", "is empty"},
		{"a.b", `contains '.'`},
		{"KV_*", `contains '*'`},
	} {
		_, err := NewElection("host1", "my_app", js, InBucket(tc.name))
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "letters, digits, - and _") {
			t.Errorf("InBucket(%q): %v, want ErrInvalidOption saying it %s and what a name may hold", tc.name, err, tc.says)
		}
	}

	// A candidate in a bucket of another name campaigns there.
	cfg := bucketConfig(2 * time.Second)
	cfg.Bucket = "OTHER_ELECTIONS"
	kv := createBucket(t, nc, cfg)
	won := make(chan struct{})
	e, err := NewElection("host1", "my_app", js, InBucket("OTHER_ELECTIONS"), OnWon(func() { close(won) }))
	if err != nil {
		t.Fatal(err)
	}
	runElection(t, e)
	select {
	case <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("no win in OTHER_ELECTIONS")
	}
	if who, _, _ := value(t, kv, "my_app"); who != "host1" {
		t.Fatalf("OTHER_ELECTIONS holds %q, want host1", who)
	}
}

// TestNewElectionWaitsForTheBucket: Start retries while the bucket does
// not exist, logs why once (not once per try), and campaigns once it does.
func TestNewElectionWaitsForTheBucket(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var warnings []string
	won := make(chan struct{})
	e, err := NewElection("host1", "my_app", js, OnWon(func() { close(won) }), WithLogger(funcLogger(func(s string) {
		t.Log(s)
		if strings.HasPrefix(s, "WARN ") {
			mu.Lock()
			warnings = append(warnings, s)
			mu.Unlock()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	runElection(t, e)
	time.Sleep(2 * time.Second) // a few tries
	if e.State() != CandidateState {
		t.Fatalf("state %v while the bucket is missing", e.State())
	}
	createBucket(t, nc, bucketConfig(2*time.Second))
	select {
	case <-won:
	case <-time.After(15 * time.Second):
		t.Fatal("no win after the bucket was made")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "bucket CHORIA_LEADER_ELECTION not found") {
		t.Fatalf("want one warning saying the bucket was not found, got %q", warnings)
	}
}

// TestNewElectionOnAClosedConnection: Start ends at once with
// nats.ErrConnectionClosed when the connection is closed for good.
func TestNewElectionOnAClosedConnection(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	createBucket(t, nc, bucketConfig(2*time.Second))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewElection("host1", "my_app", js)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Start: %v, want nats.ErrConnectionClosed", err)
		}
	case <-time.After(5 * time.Second):
		e.Stop()
		t.Fatal("Start kept retrying on a closed connection")
	}
}
