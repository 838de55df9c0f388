// Package natstest starts plain nats-servers inside tests: a server with
// the options a test gives, for what Conclave's own broker would not do
// (users with hand-written permissions, a server configuration file, a
// bucket made by the KV API). Tests that want a Conclave broker use
// conclavetest or internal/brokertest instead.
package natstest

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect connects to url with opts for t, closing the connection when t
// ends, and returns it with its JetStream context. It fails t if either
// cannot be made.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// ReadyWithin is how long Start waits for the server to accept clients.
const ReadyWithin = 10 * time.Second

// Start starts a nats-server with opts for t, waits until it accepts
// clients, and shuts it down when t ends (a test may shut it down earlier).
// Unset options get what tests want: host 127.0.0.1, a free port (Port 0,
// which nats-server reads as 4222, becomes -1), a store in a new temporary
// directory when JetStream is on; logging, signal handling and the
// JetStream banner are always off. It fails t if the server cannot start.
func Start(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	if opts.JetStream && opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	opts.NoLog, opts.NoSigs, opts.DisableJetStreamBanner = true, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: nats-server: %v", err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(ReadyWithin) {
		t.Fatalf("natstest: nats-server not ready for clients within %v", ReadyWithin)
	}
	return srv
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: no free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// DeadURL returns a nats:// URL of a loopback port nothing listens on, for
// tests of a broker that is down.
func DeadURL(t testing.TB) string {
	t.Helper()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
