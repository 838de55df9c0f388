// Package embedded runs a Conclave broker inside a program that also
// campaigns: the program is then its own broker, reached in memory, with
// nothing else to install.
//
//	fw, err := conclave.New(conclave.UserConfig())
//	...
//	defer fw.Close() // shuts the broker down
//	if _, err := embedded.StartBroker(ctx, fw); err != nil { ... }
//	// fw's elections now campaign on the broker in this process.
//
// It links the NATS server (package broker), which the root package does
// not: a program that only campaigns on brokers elsewhere imports conclave
// alone and stays small.
package embedded

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
)

var _ conclave.LocalBroker = (*broker.Broker)(nil)

// StartBroker starts a broker from fw's configuration (see package broker:
// its listen address, client port, store, TTL, …) and returns once it is
// ready and has provisioned the election bucket. fw's shared connection then
// goes to it in memory, so call StartBroker before the first election.
// fw.Close shuts it down.
//
// It returns conclave.ErrClosed after fw.Close, conclave.ErrBrokerStarted
// when fw already has a broker, conclave.ErrConnected when fw's shared
// connection was already made, and the broker's own errors
// (broker.ErrInvalidConfig, …) wrapped. It checks fw before it builds the
// broker, so none of those starts anything.
func StartBroker(ctx context.Context, fw *conclave.Framework) (*broker.Broker, error) {
	l := &lazyBroker{fw: fw}
	if err := fw.UseBroker(ctx, l); err != nil {
		return nil, err
	}
	return l.b, nil
}

// lazyBroker builds the broker from the framework's configuration when the
// framework starts it, so that a framework that refuses a broker (closed,
// already connected) is told so before the configuration is checked.
type lazyBroker struct {
	fw *conclave.Framework
	b  *broker.Broker // set by Start
}

func (l *lazyBroker) Start(ctx context.Context) error {
	b, err := broker.New(l.fw.Config(), l.fw.Logger("broker"))
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	l.b = b
	return nil
}

func (l *lazyBroker) ClientURL() string               { return l.b.ClientURL() }
func (l *lazyBroker) InProcessOptions() []nats.Option { return l.b.InProcessOptions() }
func (l *lazyBroker) Shutdown()                       { l.b.Shutdown() }
