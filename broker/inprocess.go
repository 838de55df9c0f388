package broker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"
)

// internalUser is the user name of the broker's in-process credential. It
// holds a ':', which configured user names cannot, so it names no user.
const internalUser = "conclave:in-process"

// internalCredential is a random password, made at New and kept in memory
// only, that in-process connections log in with.
type internalCredential struct{ user, password string }

func newInternalCredential() (internalCredential, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return internalCredential{}, fmt.Errorf("broker: making the in-process credential: %w", err)
	}
	return internalCredential{user: internalUser, password: hex.EncodeToString(raw[:])}, nil
}

// inProcessDialer gives nats.InProcessServer a connection to the running
// server, or an error when the broker is not running.
type inProcessDialer struct{ b *Broker }

// InProcessConn connects to the broker's server in memory.
func (d inProcessDialer) InProcessConn() (net.Conn, error) {
	srv := d.b.Server()
	if srv == nil || !srv.Running() {
		return nil, fmt.Errorf("%w: no in-process connection", ErrNotRunning)
	}
	return srv.InProcessConn()
}

// InProcessOptions returns the nats.Connect options that connect to this
// broker in memory, through no network port and no TLS, logged in with a
// credential the broker made at New and holds only in memory, with full
// permissions. Pass them with an empty URL:
//
//	nc, err := nats.Connect("", append(b.InProcessOptions(), nats.Name("app"))...)
//
// Connecting fails with ErrNotRunning before Start has made the server
// ready and after Shutdown.
func (b *Broker) InProcessOptions() []nats.Option {
	return []nats.Option{
		nats.InProcessServer(inProcessDialer{b}),
		nats.UserInfo(b.internal.user, b.internal.password),
	}
}
