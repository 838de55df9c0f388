// Package conclavetest starts a real Conclave broker inside a test, with the
// election bucket provisioned, so that a program's own tests can check what
// its code does while it leads, while it stands by and when leadership moves.
//
//	func TestReportRunsOnOneNode(t *testing.T) {
//		b := conclavetest.StartBroker(t, conclavetest.WithTTL(2*time.Second))
//		fw1 := b.Framework(t, "n1") // campaigns as n1 on b, closed at the test's end
//		fw2 := b.Framework(t, "n2")
//		...
//	}
//
// The broker listens on a free loopback port, keeps its store in a
// temporary directory and logs to t.Log; it is shut down when the test
// ends. Set CONCLAVE_TEST_LOG (trace, debug, info, warn, error; default
// warn) to see more of its log.
//
// Start does the same without a test, for a broker that TestMain shares
// among the tests of a package, or for examples.
//
// The package links the NATS server: import it from tests only.
package conclavetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
)

const (
	// DefaultTTL is the election bucket's TTL without WithTTL: short, so
	// that a test in which a leader dies without releasing sees another
	// take over within seconds, and long enough for leaders on a busy
	// machine to renew in time.
	DefaultTTL = 5 * time.Second

	// LogLevelEnv names the environment variable with the level of the
	// logs that Logger passes to t.Log.
	LogLevelEnv = "CONCLAVE_TEST_LOG"

	// startTimeout bounds how long starting a broker may take.
	startTimeout = 90 * time.Second
)

// Option configures a test broker.
type Option func(*options)

type options struct {
	ttl    time.Duration
	mutate []func(*config.Config)
	log    *logrus.Logger
	err    error // an option's unusable argument
}

// WithTTL sets the election bucket's TTL: how long a leader that stopped
// renewing (crashed, partitioned) keeps its election. It must be at least
// bucket.MinTTL. A leader that stops or is cancelled hands over at once,
// whatever the TTL.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) { o.ttl = ttl }
}

// WithConfig lets mutate change the broker's configuration before it
// starts: users, TLS, a fixed port, … It sees the settings the package
// chose, WithTTL's included. A nil mutate makes the broker fail to start,
// saying so.
func WithConfig(mutate func(*config.Config)) Option {
	return func(o *options) {
		if mutate == nil {
			o.err = errors.New("WithConfig(nil): pass a function that changes the configuration, or leave the option out")
			return
		}
		o.mutate = append(o.mutate, mutate)
	}
}

// WithLogger makes the broker, and the frameworks of Framework and
// NewFramework, log through l instead of t.Log (StartBroker) or nowhere
// (Start).
func WithLogger(l *logrus.Logger) Option {
	return func(o *options) { o.log = l }
}

// Broker is a broker started for tests, with the election bucket.
type Broker struct {
	b       *broker.Broker
	log     *logrus.Logger
	given   bool   // log is WithLogger's: Framework logs there too
	cleanup func() // removes what Start made; nil for StartBroker
	once    sync.Once
}

// StartBroker starts a broker for t and shuts it down when t ends (with
// t.Cleanup). It returns once the election bucket is ready, and fails t
// when the broker cannot start.
func StartBroker(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	b, err := start(t.TempDir(), Logger(t), opts)
	if err != nil {
		t.Fatalf("conclavetest: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// Start starts a broker with its store in a new temporary directory and
// returns once the election bucket is ready. Close shuts it down and
// removes the directory. Tests use StartBroker, which does that for them.
func Start(opts ...Option) (*Broker, error) {
	dir, err := os.MkdirTemp("", "conclavetest-")
	if err != nil {
		return nil, fmt.Errorf("conclavetest: %w", err)
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	b, err := start(dir, quiet, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("conclavetest: %w", err)
	}
	b.cleanup = func() { _ = os.RemoveAll(dir) }
	return b, nil
}

func start(store string, log *logrus.Logger, opts []Option) (*Broker, error) {
	o := options{ttl: DefaultTTL}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.err != nil {
		return nil, o.err
	}
	if o.log != nil {
		log = o.log
	}
	cfg := config.Default()
	cfg.Identity = "conclavetest"
	cfg.BrokerNetwork = true
	cfg.ClientPort = config.RandomPort
	cfg.StreamStore = store
	cfg.SyncAlways = false // nothing must survive a crash of a test's machine
	cfg.LeaderElectionTTL = o.ttl
	for _, m := range o.mutate {
		m(cfg)
	}
	b, err := broker.New(cfg, log.WithField("component", "broker"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		b.Shutdown()
		return nil, fmt.Errorf("starting the broker: %w", err)
	}
	return &Broker{b: b, log: log, given: o.log != nil}, nil
}

// ClientURL returns where clients connect to the broker.
func (b *Broker) ClientURL() string { return b.b.ClientURL() }

// Broker returns the broker itself, to stop it (Shutdown) or look into its
// NATS server.
func (b *Broker) Broker() *broker.Broker { return b.b }

// Config returns a configuration for a program named identity that
// connects to the broker. Change it as you like: it is a new one each time.
func (b *Broker) Config(identity string) *config.Config {
	cfg := config.Default()
	cfg.Identity = identity
	cfg.MiddlewareHosts = []string{b.ClientURL()}
	return cfg
}

// NewFramework returns a framework whose elections campaign as identity on
// the broker, logging where the broker logs unless opts give
// conclave.WithLogger or conclave.WithSlog. The caller closes it.
func (b *Broker) NewFramework(identity string, opts ...conclave.Option) (*conclave.Framework, error) {
	return conclave.NewWithConfig(b.Config(identity), withDefaultLogger(b.log, opts)...)
}

// Framework is NewFramework for a test: the framework logs to t.Log (to
// the broker's WithLogger logger if it was given one) unless opts give
// conclave.WithLogger or conclave.WithSlog, it is closed when t ends, and t
// fails when it cannot be made. Stop its elections before the test ends.
func (b *Broker) Framework(t testing.TB, identity string, opts ...conclave.Option) *conclave.Framework {
	t.Helper()
	log := b.log
	if !b.given {
		log = Logger(t) // this test's: the broker's t may end first
	}
	fw, err := conclave.NewWithConfig(b.Config(identity), withDefaultLogger(log, opts)...)
	if err != nil {
		t.Fatalf("conclavetest: framework %s: %v", identity, err)
	}
	t.Cleanup(func() {
		if err := fw.Close(); err != nil {
			t.Errorf("conclavetest: closing framework %s: %v", identity, err)
		}
	})
	return fw
}

// withDefaultLogger returns opts led by an option that makes the framework
// log through l unless opts give conclave.WithLogger or conclave.WithSlog.
func withDefaultLogger(l *logrus.Logger, opts []conclave.Option) []conclave.Option {
	return append([]conclave.Option{conclave.WithDefaultLogger(l)}, opts...)
}

// Close shuts the broker down and, for a broker from Start, removes its
// store. It is safe to call more than once.
func (b *Broker) Close() {
	b.once.Do(func() {
		b.b.Shutdown()
		if b.cleanup != nil {
			b.cleanup()
		}
	})
}

// Logger returns a logger that writes to t.Log until the test's cleanups
// are done (logging after a test has ended panics), at the level
// LogLevelEnv names, warn by default.
func Logger(t testing.TB) *logrus.Logger {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.WarnLevel)
	if lvl, err := logrus.ParseLevel(os.Getenv(LogLevelEnv)); err == nil {
		l.SetLevel(lvl)
	}
	return l
}

// testWriter forwards log lines to t.Log until stopped.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
