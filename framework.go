package conclave

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/inter"
	"github.com/conclave-io/conclave/internal/logging"
	"github.com/conclave-io/conclave/metrics"
)

// Framework hands out elections that campaign under one identity over one
// shared NATS connection, log through one logger and record into one set of
// metrics. Build it with New or NewWithConfig and Close it when done. Its
// methods are safe for concurrent use.
type Framework struct {
	cfg      *config.Config
	log      *logrus.Logger
	closeLog func() error
	recorder *metrics.Recorder // nil without WithRegisterer
	// shardRecorder records shard groups; nil without WithRegisterer.
	shardRecorder *metrics.ShardRecorder
	// health is WithHealthCheck's check, nil without it.
	health      func(context.Context) error
	healthEvery time.Duration

	mu      sync.Mutex
	conn    *nats.Conn  // the shared connection, once made or given
	ownConn bool        // the framework made conn and closes it
	broker  LocalBroker // started with UseBroker
	dialing *dialing    // the shared connection being made, if it is
	closed  bool
	// closedFlag is closed, for readers that must not wait for mu, which
	// is held while a broker starts.
	closedFlag atomic.Bool
	// sharedKV and sharedJS are the bucket opened on the shared connection,
	// once: a process with thousands of elections looks it up once.
	sharedKV jetstream.KeyValue
	sharedJS jetstream.JetStream
	// componentLogs are the entries of the components whose loggers the
	// framework hands out by the thousand (see componentLog), under logsMu:
	// mu is held while a broker starts.
	logsMu        sync.Mutex
	componentLogs map[string]*logrus.Entry
}

var _ inter.Framework = (*Framework)(nil)

// UserConfig returns the configuration file the user means, or "" when there
// is none; see config.FindUserConfig for where it looks. Pass the result to
// New.
func UserConfig() string { return config.FindUserConfig() }

// New returns a framework configured by the file at path, with the CONCLAVE_*
// environment variables overriding it (see config.Load). With path "" it
// runs on the defaults and the environment (see config.FromEnv). Errors are
// those of config.Load and NewWithConfig.
func New(path string, opts ...Option) (*Framework, error) {
	var (
		cfg *config.Config
		err error
	)
	if path == "" {
		cfg, err = config.FromEnv(os.LookupEnv)
	} else {
		cfg, err = config.Load(path)
	}
	if err != nil {
		return nil, fmt.Errorf("conclave: %w", err)
	}
	return NewWithConfig(cfg, opts...)
}

// NewWithConfig returns a framework for cfg, which it validates and copies.
// It does not connect: the shared connection is made on first use. It
// returns an error wrapping ErrInvalidOption for a nil cfg or a bad option,
// config.ErrInvalid when cfg does not validate, and the registerer's error
// when the election or shard group metrics cannot be registered; a
// framework that fails leaves none of its metrics registered.
func NewWithConfig(cfg *config.Config, opts ...Option) (*Framework, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: configuration is nil: start from config.Default()", ErrInvalidOption)
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("conclave: %w", err)
	}
	fw := &Framework{cfg: cloneConfig(cfg), conn: o.conn, closeLog: func() error { return nil }, health: o.health, healthEvery: o.healthEvery}

	switch {
	case o.log != nil && o.slog != nil:
		return nil, fmt.Errorf("%w: both WithLogger and WithSlog given: give the one your program logs with", ErrInvalidOption)
	case o.slog != nil:
		fw.log = logging.ToSlog(o.slog)
	case o.log != nil:
		fw.log = o.log
	case o.defaultLog != nil:
		fw.log = o.defaultLog
	default:
		l, closeLog, err := logging.New(fw.cfg, os.Stderr)
		if err != nil {
			return nil, fmt.Errorf("conclave: %w", err)
		}
		fw.log, fw.closeLog = l, closeLog
	}

	if o.reg != nil {
		// A framework that fails leaves the registerer as it found it.
		reg := &undoRegisterer{Registerer: o.reg}
		rec, err := metrics.New(reg)
		if err != nil {
			reg.undo()
			_ = fw.closeLog()
			return nil, fmt.Errorf("conclave: registering the election metrics: %w", err)
		}
		fw.recorder = rec
		if fw.shardRecorder, err = metrics.NewShards(reg); err != nil {
			reg.undo()
			_ = fw.closeLog()
			return nil, fmt.Errorf("conclave: registering the shard group metrics: %w", err)
		}
	}
	return fw, nil
}

// undoRegisterer registers on Registerer and remembers what it registered,
// for undo to unregister.
type undoRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

func (r *undoRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.done = append(r.done, c)
	return nil
}

func (r *undoRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// undo unregisters what Register registered.
func (r *undoRegisterer) undo() {
	for _, c := range r.done {
		r.Registerer.Unregister(c)
	}
	r.done = nil
}

// cloneConfig copies c so that the caller's later changes do not reach the
// framework.
func cloneConfig(c *config.Config) *config.Config {
	cp := *c
	cp.MiddlewareHosts = slices.Clone(c.MiddlewareHosts)
	cp.Peers = slices.Clone(c.Peers)
	return &cp
}

// Identity returns the name the framework's candidates campaign under: the
// configuration's identity, by default the host name. A leader writes it as
// the election key's value.
func (fw *Framework) Identity() string { return fw.cfg.Identity }

// Config returns the framework's configuration. It is the framework's own
// copy: read it, do not change it.
func (fw *Framework) Config() *config.Config { return fw.cfg }

// Logger returns a logger for a part of the program, its entries marked with
// component. Add fields to tell instances apart:
//
//	log := fw.Logger("worker").WithField("worker", i)
func (fw *Framework) Logger(component string) *logrus.Entry {
	return fw.log.WithField("component", component)
}

// componentLog returns the framework's one entry for component, shared by
// the loggers it hands its elections and observers.
func (fw *Framework) componentLog(component string) *logrus.Entry {
	fw.logsMu.Lock()
	defer fw.logsMu.Unlock()
	if e := fw.componentLogs[component]; e != nil {
		return e
	}
	if fw.componentLogs == nil {
		fw.componentLogs = map[string]*logrus.Entry{}
	}
	e := fw.Logger(component)
	fw.componentLogs[component] = e
	return e
}

// Close closes what the framework opened: the shared connection it made (not
// one given with WithConnection), the broker it started, and the log file.
// Stop the framework's elections first: those on the shared connection can
// no longer renew or hand over once it is closed. Close is safe to call more
// than once; afterwards the framework's methods return ErrClosed.
func (fw *Framework) Close() error {
	fw.mu.Lock()
	if fw.closed {
		fw.mu.Unlock()
		return nil
	}
	fw.closed = true
	fw.closedFlag.Store(true)
	conn, own, b := fw.conn, fw.ownConn, fw.broker
	fw.mu.Unlock()

	if own && conn != nil {
		conn.Close()
	}
	if b != nil {
		b.Shutdown()
	}
	if err := fw.closeLog(); err != nil {
		return fmt.Errorf("conclave: closing the log file: %w", err)
	}
	return nil
}
