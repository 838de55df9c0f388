package conclave

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/natsconn"
)

// DefaultServer is where the framework connects when it started no broker
// and the configuration names none (plugin.choria.middleware_hosts).
const DefaultServer = "nats://127.0.0.1:4222"

const (
	// connectTimeout bounds the first connection to each server; a context
	// deadline shortens it.
	connectTimeout = 2 * time.Second
)

// Servers returns the URLs the framework connects to, in the order of the
// rules in the package documentation.
func (fw *Framework) Servers() []string {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.serversLocked()
}

func (fw *Framework) serversLocked() []string {
	switch {
	case fw.broker != nil:
		return []string{fw.broker.ClientURL()}
	case len(fw.cfg.MiddlewareHosts) > 0:
		return append([]string(nil), fw.cfg.MiddlewareHosts...)
	default:
		return []string{DefaultServer}
	}
}

// Connection returns the shared connection, making it on first use; see the
// package documentation for where it goes. Callers while it is being made
// wait for it, each until its own ctx ends. It returns an error wrapping
// ErrNoBroker when no broker answers, and ErrClosed after Close (which does
// not wait for a connection being made: that one is closed as it comes).
// The framework owns the connection: do not close it.
func (fw *Framework) Connection(ctx context.Context) (*nats.Conn, error) {
	for {
		fw.mu.Lock()
		switch d := fw.dialing; {
		case fw.closed:
			fw.mu.Unlock()
			return nil, ErrClosed
		case fw.conn != nil:
			nc := fw.conn
			fw.mu.Unlock()
			return nc, nil
		case d != nil:
			fw.mu.Unlock()
			select {
			case <-d.done:
				// A dial cut short by its caller's context (its timeout
				// too) is no answer for this caller: it dials in turn.
				if d.err != nil && !d.cutShort {
					return nil, d.err
				}
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("conclave: waiting for the connection to %s: %w", strings.Join(fw.Servers(), ", "), ctx.Err())
			}
		}
		d := &dialing{done: make(chan struct{})}
		fw.dialing = d
		servers, embedded := fw.serversLocked(), fw.broker
		fw.mu.Unlock()

		dl, hasDL := ctx.Deadline()
		shortened := hasDL && time.Until(dl) < connectTimeout // the dial's timeout is the caller's
		nc, err := fw.dial(ctx, servers, embedded, nil)
		fw.mu.Lock()
		fw.dialing = nil
		switch {
		case fw.closed: // Close did not wait for the connection: it ends here
			if nc != nil {
				nc.Close()
			}
			nc, err = nil, ErrClosed
		case err != nil:
		default:
			fw.conn, fw.ownConn = nc, true
		}
		d.err, d.cutShort = err, ctx.Err() != nil || err != nil && shortened
		close(d.done)
		fw.mu.Unlock()
		return nc, err
	}
}

// dialing is the shared connection being made; done closes once it is
// made, with err when it failed, cutShort when its caller's context ended
// first or its deadline was the dial's timeout.
type dialing struct {
	done     chan struct{}
	err      error
	cutShort bool
}

// Connect makes a new connection to the framework's brokers with the shared
// connection's settings, followed by opts. The caller owns it and closes it.
// Use it for a candidate that must not share the fate of the others' connection.
// Errors are as for Connection.
func (fw *Framework) Connect(ctx context.Context, opts ...nats.Option) (*nats.Conn, error) {
	fw.mu.Lock()
	closed, servers, embedded := fw.closed, fw.serversLocked(), fw.broker
	fw.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return fw.dial(ctx, servers, embedded, opts)
}

// dial connects to servers, or in-process to embedded when it is not nil:
// named after the identity, reconnecting forever, logging what happens to
// the connection. A connection to servers logs in as the configuration
// says; one in-process uses the embedded broker's in-memory credential.
func (fw *Framework) dial(ctx context.Context, servers []string, embedded LocalBroker, extra []nats.Option) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("conclave: connecting to %s: %w", strings.Join(servers, ", "), err)
	}
	timeout := connectTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	log := fw.Logger("connection")
	// Reconnect forever, ping every 10s, and fail writes while
	// disconnected rather than send them late, as the CLI's long-lived
	// connections do: the settings live in natsconn.ClientOptions.
	opts := append(natsconn.ClientOptions(),
		nats.Name(fw.cfg.Identity),
		nats.Timeout(timeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warnf("Disconnected from the broker, reconnecting: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Infof("Reconnected to %s", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warnf("NATS error on subscription %s: %v", sub.Subject, err)
				return
			}
			log.Warnf("NATS error: %v", err)
		}),
	)
	list := strings.Join(servers, ",")
	if embedded != nil {
		opts = append(opts, embedded.InProcessOptions()...)
		list = ""
	} else {
		login, err := natsconn.Options(fw.cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLogin, err)
		}
		opts = append(opts, login...)
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(list, opts...)
	if err != nil {
		return nil, fw.connectError(servers, err)
	}
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("conclave: connecting to %s: %w", strings.Join(servers, ", "), err)
	}
	log.Debugf("Connected to %s", nc.ConnectedUrlRedacted())
	return nc, nil
}

// connectError explains a failed first connection.
func (fw *Framework) connectError(servers []string, err error) error {
	where := strings.Join(servers, ", ")
	if explained := natsconn.Explain(err, fw.cfg, "the broker at "+where); explained != nil {
		return explained
	}
	var netErr net.Error
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.As(err, &netErr) {
		return fmt.Errorf("%w at %s: start one with `conclave broker run --config FILE`, or set plugin.choria.middleware_hosts to where yours listens: %w", ErrNoBroker, where, err)
	}
	return fmt.Errorf("conclave: connecting to %s: %w", where, err)
}

// LocalBroker is a broker running in this process that the framework's
// connections reach in memory. Package embedded starts one from the
// framework's configuration; *broker.Broker implements it.
type LocalBroker interface {
	// Start starts the broker and returns once it is ready for elections.
	Start(ctx context.Context) error
	// ClientURL returns where network clients reach the broker.
	ClientURL() string
	// InProcessOptions returns the nats.Connect options that reach the
	// broker in memory, with an empty URL.
	InProcessOptions() []nats.Option
	// Shutdown stops the broker and returns once it has stopped.
	Shutdown()
}

// UseBroker starts b and makes it the framework's broker: the shared
// connection and Connect then go to it in memory, and Close shuts it down.
// Nothing else connects while b starts, so call UseBroker before the first
// election. Most programs call embedded.StartBroker, which builds the broker
// from the framework's configuration and passes it here.
//
// It returns ErrInvalidOption for a nil b, ErrClosed after Close,
// ErrBrokerStarted when the framework already has a broker, ErrConnected
// when the shared connection was already made (it waits, within ctx, for
// one being made: one that fails leaves the broker to be used), and
// b.Start's error wrapped.
func (fw *Framework) UseBroker(ctx context.Context, b LocalBroker) error {
	if b == nil {
		return fmt.Errorf("%w: UseBroker(nil): pass a broker, such as one from broker.New", ErrInvalidOption)
	}
	fw.mu.Lock()
	for d := fw.dialing; d != nil; d = fw.dialing {
		fw.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return fmt.Errorf("conclave: starting the broker: waiting for the connection being made to %s: %w",
				strings.Join(fw.Servers(), ", "), ctx.Err())
		}
		fw.mu.Lock()
	}
	defer fw.mu.Unlock()
	switch {
	case fw.closed:
		return ErrClosed
	case fw.broker != nil:
		return fmt.Errorf("%w: it listens at %s", ErrBrokerStarted, fw.broker.ClientURL())
	case fw.conn != nil:
		return fmt.Errorf("%w to %s: start the broker before the first election", ErrConnected, fw.conn.ConnectedUrlRedacted())
	}
	if err := b.Start(ctx); err != nil {
		return fmt.Errorf("conclave: starting the broker: %w", err)
	}
	fw.broker = b
	return nil
}
