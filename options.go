package conclave

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Option configures a Framework. Options check their arguments and make
// New and NewWithConfig fail with an error wrapping ErrInvalidOption when one
// is unusable.
type Option func(*options) error

type options struct {
	reg  prometheus.Registerer
	log  *logrus.Logger
	slog *slog.Logger
	conn *nats.Conn
	// defaultLog is WithDefaultLogger's, used when neither log nor slog
	// is set.
	defaultLog *logrus.Logger

	health      func(context.Context) error
	healthEvery time.Duration
}

// WithRegisterer makes every election and shard group of the framework
// record Prometheus metrics (see package metrics) on reg. The metrics are registered once, when
// the framework is built; registering them twice on the same registerer
// fails. Without it, elections record nothing.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) error {
		if reg == nil {
			return fmt.Errorf("%w: WithRegisterer(nil): pass a registry such as prometheus.NewRegistry(), or leave the option out", ErrInvalidOption)
		}
		o.reg = reg
		return nil
	}
}

// WithLogger makes the framework log through l. Without it the framework
// builds a logger from the configuration: its loglevel, and its logfile or
// standard error.
func WithLogger(l *logrus.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): pass a *logrus.Logger, or leave the option out to log as the configuration says", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// WithDefaultLogger makes the framework log through l unless WithLogger
// or WithSlog is given too: for a harness or wrapper (conclavetest's)
// that chooses where logs go by default and leaves the choice to its
// caller's options.
func WithDefaultLogger(l *logrus.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: WithDefaultLogger(nil): pass a *logrus.Logger, or leave the option out", ErrInvalidOption)
		}
		o.defaultLog = l
		return nil
	}
}

// WithSlog makes the framework log through l: its own lines, its
// elections' and observers', an embedded broker's, and those of every
// fw.Logger entry, each a record at the matching level (logrus's trace
// below slog.LevelDebug, at slog.LevelDebug-4) with the entry's fields
// (component, election, …) as attributes. fw.Logger still returns a
// *logrus.Entry, for code written for Choria.
//
// Lines below the lowest level l's handler enables when the framework is
// built are not even formatted; lowering the handler's level later does not
// bring them back. Give WithSlog or WithLogger, not both.
func WithSlog(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: WithSlog(nil): pass a *slog.Logger such as slog.Default(), or leave the option out to log as the configuration says", ErrInvalidOption)
		}
		o.slog = l
		return nil
	}
}

// WithConnection makes nc the framework's shared connection instead of one
// it makes itself. The framework does not close nc: its owner does, after
// the framework's elections have stopped.
func WithConnection(nc *nats.Conn) Option {
	return func(o *options) error {
		if nc == nil {
			return fmt.Errorf("%w: WithConnection(nil): pass a connection, or leave the option out to let the framework connect", ErrInvalidOption)
		}
		o.conn = nc
		return nil
	}
}

// WithHealthCheck gates every election of the framework on check, run
// every every (and once before campaigning), each run bounded by every, as
// streams.WithHealthCheck does: while check fails the node does not
// campaign, and a leader hands over to a healthy candidate if one stands,
// and otherwise keeps leading. To gate one election only, pass
// streams.WithHealthCheck to NewElection instead; it overrides this one.
func WithHealthCheck(check func(ctx context.Context) error, every time.Duration) Option {
	return func(o *options) error {
		if check == nil || every <= 0 {
			return fmt.Errorf("%w: WithHealthCheck needs a check and a positive interval (got every %v): pass, say, WithHealthCheck(ping, 5*time.Second)", ErrInvalidOption, every)
		}
		o.health, o.healthEvery = check, every
		return nil
	}
}
