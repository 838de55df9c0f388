package conclavetest_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/conclavetest"
	"github.com/conclave-io/conclave/config"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 15 * time.Second

// TestStartBrokerHandsOverWhenTheLeaderDies: two frameworks campaign on a
// test broker; when the leader's broker connection dies without a release
// (its framework is closed under it), the other takes over within the TTL.
func TestStartBrokerHandsOverWhenTheLeaderDies(t *testing.T) {
	b := conclavetest.StartBroker(t, conclavetest.WithTTL(2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	won := map[string]chan struct{}{"n1": make(chan struct{}), "n2": make(chan struct{})}
	stops := map[string]func(){}
	for _, id := range []string{"n1", "n2"} {
		fw := b.Framework(t, id)
		e, err := fw.NewElection(ctx, nil, "reports", election.OnWon(func() { close(won[id]) }))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Start(ctx) }()
		stops[id] = sync.OnceFunc(func() { _ = fw.Close(); e.Stop(); <-done })
		t.Cleanup(stops[id])
		if id == "n1" {
			select {
			case <-won["n1"]:
			case <-ctx.Done():
				t.Fatal("n1 never won")
			}
		}
	}
	crashed := time.Now()
	stops["n1"]() // the connection closes first: no release reaches the broker
	select {
	case <-won["n2"]:
		if d := time.Since(crashed); d > 2*time.Second+time.Second {
			t.Errorf("n2 took over after %v, want about the TTL", d)
		}
	case <-ctx.Done():
		t.Fatal("n2 never took over")
	}
}

func TestStartBrokerBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []conclavetest.Option
		ttl  time.Duration
	}{
		{"default TTL", nil, conclavetest.DefaultTTL},
		{"WithTTL", []conclavetest.Option{conclavetest.WithTTL(3 * time.Second)}, 3 * time.Second},
		{"WithConfig after WithTTL", []conclavetest.Option{conclavetest.WithTTL(3 * time.Second), conclavetest.WithConfig(func(c *config.Config) { c.LeaderElectionTTL = 4 * time.Second })}, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := conclavetest.StartBroker(t, tc.opts...)
			fw := b.Framework(t, "inspector")
			if got := fw.Servers(); len(got) != 1 || got[0] != b.ClientURL() {
				t.Errorf("framework connects to %v, want [%s]", got, b.ClientURL())
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			kv, err := fw.Bucket(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != tc.ttl {
				t.Errorf("bucket TTL %v, want %v", st.TTL(), tc.ttl)
			}
		})
	}
}

func TestStartRefusesShortTTL(t *testing.T) {
	b, err := conclavetest.Start(conclavetest.WithTTL(100 * time.Millisecond))
	if err == nil {
		b.Close()
		t.Fatal("Start with a 100ms TTL succeeded")
	}
	if !errors.Is(err, broker.ErrInvalidConfig) {
		t.Errorf("Start with a 100ms TTL: %v, want broker.ErrInvalidConfig", err)
	}
}

// TestStartRefusesANilConfigFunction: WithConfig(nil) is an error that
// names the option, not a panic inside the broker's start.
func TestStartRefusesANilConfigFunction(t *testing.T) {
	b, err := conclavetest.Start(conclavetest.WithConfig(nil))
	if err == nil {
		b.Close()
		t.Fatal("Start with WithConfig(nil) succeeded")
	}
	if !strings.Contains(err.Error(), "WithConfig(nil)") {
		t.Errorf("Start with WithConfig(nil): %v, want an error naming the option", err)
	}
}

func TestCloseRemovesTheStore(t *testing.T) {
	var store string
	b, err := conclavetest.Start(conclavetest.WithConfig(func(c *config.Config) { store = c.StreamStore }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store); err != nil {
		t.Fatalf("the store %s is not there: %v", store, err)
	}
	b.Close()
	b.Close()
	select {
	case <-b.Broker().Done():
	default:
		t.Error("Close left the broker running")
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("Close left the store %s: %v", store, err)
	}
}

// TestFrameworksTakeTheTestsLogger: Framework and NewFramework log where
// the test's options say, WithSlog included, and to the broker's logger
// (t.Log) only without such an option.
func TestFrameworksTakeTheTestsLogger(t *testing.T) {
	b := conclavetest.StartBroker(t)
	var out syncBuffer
	h := slog.New(slog.NewTextHandler(&out, nil))

	fw := b.Framework(t, "n1", conclave.WithSlog(h))
	fw.Logger("test").Info("from Framework")
	fw2, err := b.NewFramework("n2", conclave.WithSlog(h))
	if err != nil {
		t.Fatalf("NewFramework with WithSlog: %v", err)
	}
	fw2.Logger("test").Info("from NewFramework")
	if err := fw2.Close(); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"from Framework", "from NewFramework"} {
		if !strings.Contains(out.String(), msg) {
			t.Errorf("%q not logged to the slog handler; it has %q", msg, out.String())
		}
	}

	l := logrus.New()
	var lout syncBuffer
	l.SetOutput(&lout)
	b.Framework(t, "n3", conclave.WithLogger(l)).Logger("test").Info("from WithLogger")
	if !strings.Contains(lout.String(), "from WithLogger") {
		t.Errorf("not logged to WithLogger's logger; it has %q", lout.String())
	}
}

// TestWithLoggerTakesTheBrokersAndItsFrameworksLogs: a broker given
// WithLogger logs there, and so do the frameworks of Framework and
// NewFramework made without a logger of their own.
func TestWithLoggerTakesTheBrokersAndItsFrameworksLogs(t *testing.T) {
	l := logrus.New()
	l.SetLevel(logrus.InfoLevel)
	var out syncBuffer
	l.SetOutput(&out)
	b := conclavetest.StartBroker(t, conclavetest.WithLogger(l))
	if !strings.Contains(out.String(), "component=broker") {
		t.Errorf("the broker logged nothing to WithLogger's logger; it has %q", out.String())
	}
	b.Framework(t, "n1").Logger("test").Info("from Framework")
	fw, err := b.NewFramework("n2")
	if err != nil {
		t.Fatal(err)
	}
	fw.Logger("test").Info("from NewFramework")
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"from Framework", "from NewFramework"} {
		if !strings.Contains(out.String(), msg) {
			t.Errorf("%q not logged to WithLogger's logger; it has %q", msg, out.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
