package streams

import (
	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/denied"
)

// ErrPermissionDenied means the broker refused one of the election's
// requests because the connection's user may not make it: it may not
// publish to the election's key or to the JetStream API subject involved,
// or may not receive replies on the connection's inbox. The message names
// what was refused and what to change. Start returns it rather than
// retrying, since retrying cannot succeed until the broker's permissions
// change. Candidates always recognise it; observers only with
// ObserveWithJetStream (as the framework passes).
var ErrPermissionDenied = denied.ErrPermissionDenied

// conn returns the store's connection, or nil when it has none.
func (s *kvStore) conn() *nats.Conn {
	if s.js == nil {
		return nil
	}
	return s.js.Conn()
}

// lastErr returns the connection's latest asynchronous error, to tell a
// refusal that happened during a request from an older one.
func (s *kvStore) lastErr() error { return denied.Last(s.conn()) }

// denied explains err as ErrPermissionDenied when the broker refused the
// request for permissions; see denied.Explain.
func (s *kvStore) denied(err, before error, what string, subjects ...string) error {
	return denied.Explain(s.conn(), err, before, what, subjects...)
}
