package conclave

import (
	"errors"

	"github.com/conclave-io/conclave/internal/natsconn"
	"github.com/conclave-io/conclave/providers/election/streams"
)

var (
	// ErrInvalidOption means an Option or an argument was given a value it
	// cannot use, such as a nil logger or a nil configuration.
	ErrInvalidOption = errors.New("conclave: invalid option")

	// ErrNoBroker means no broker answered at any of the addresses the
	// framework connects to. The message names them and how to start one.
	ErrNoBroker = errors.New("conclave: no broker")

	// ErrNoBucket means the broker has no election bucket
	// (CHORIA_LEADER_ELECTION), or no JetStream to hold one. The message
	// names the server and the setting that provisions the bucket.
	ErrNoBucket = errors.New("conclave: no election bucket")

	// ErrClosed is returned by a Framework's methods after Close.
	ErrClosed = errors.New("conclave: framework closed")

	// ErrBrokerStarted is returned by UseBroker, and so by
	// embedded.StartBroker, when the framework already has a broker: a
	// framework runs at most one.
	ErrBrokerStarted = errors.New("conclave: broker already started")

	// ErrConnected is returned by UseBroker, and so by embedded.StartBroker,
	// when the shared connection was already made to other brokers: start
	// the embedded broker before the first election so that the shared
	// connection goes to it.
	ErrConnected = errors.New("conclave: shared connection already made")

	// ErrLogin means a connection could not log in: the broker refused the
	// user, password, credentials or client certificate, or this side's TLS
	// files cannot be used (missing, expired, not signed by the CA). The
	// message names the cause and the settings to change.
	ErrLogin = natsconn.ErrLogin

	// ErrPermissionDenied means the broker refused a request of an
	// election for permissions (see streams.ErrPermissionDenied, which it
	// is): an election's Start returns it, and so do NewElection and
	// friends when the user may not open the bucket.
	ErrPermissionDenied = streams.ErrPermissionDenied
)
