package broker

import "errors"

var (
	// ErrInvalidConfig is returned by New when the configuration cannot run a
	// broker, and by ProvisionElectionBucket for an invalid BucketSpec. The
	// message names the setting, its value and what is allowed.
	ErrInvalidConfig = errors.New("broker: invalid configuration")

	// ErrNotEnoughServers is returned when the election bucket asks for more
	// replicas than there are JetStream servers. The message names both
	// numbers and the setting to change.
	ErrNotEnoughServers = errors.New("broker: not enough servers for the election bucket's replicas")

	// ErrBucketMisconfigured is returned when an existing election bucket has a
	// setting that cannot be changed in place (storage type, retention,
	// subjects, mirror, …). The message says what to do.
	ErrBucketMisconfigured = errors.New("broker: election bucket misconfigured")

	// ErrAlreadyStarted is returned by Start when the Broker was started before.
	// A Broker runs once; build a new one with New to start again.
	ErrAlreadyStarted = errors.New("broker: already started")

	// ErrShutdown is returned by Start when Shutdown was called before or
	// while it ran.
	ErrShutdown = errors.New("broker: shut down")

	// ErrServerFailed is returned by Start when the NATS server could not
	// start (an unwritable store directory, an address it cannot listen
	// on, …). The message carries the server's own reason.
	ErrServerFailed = errors.New("broker: nats-server failed")

	// ErrStoreInUse is returned by Start when another broker, in this
	// process or another, holds the store directory. The message names
	// the holder.
	ErrStoreInUse = errors.New("broker: store directory in use")

	// ErrPortInUse is returned by Start when a configured client, peer or
	// monitoring port is taken. It is checked before the store is opened.
	ErrPortInUse = errors.New("broker: port in use")

	// ErrInsecure is returned by New when the broker would listen beyond
	// loopback without TLS, without authentication, or with a plain-text
	// peer port, and plugin.conclave.insecure is off. The message says what
	// would be exposed and which keys to set.
	ErrInsecure = errors.New("broker: refusing to listen insecurely beyond loopback")

	// ErrNotRunning is returned by a connection made with InProcessOptions
	// before Start has made the server ready or after Shutdown.
	ErrNotRunning = errors.New("broker: not running")
)
