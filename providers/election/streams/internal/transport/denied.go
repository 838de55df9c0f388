package transport

import (
	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/denied"
)

// conn returns the store's connection, or nil when it has none.
func (s *Store) conn() *nats.Conn {
	if s.js == nil {
		return nil
	}
	return s.js.Conn()
}

// lastErr returns the connection's latest asynchronous error, to tell a
// refusal that happened during a request from an older one.
func (s *Store) lastErr() error { return denied.Last(s.conn()) }

// denied explains err as denied.ErrPermissionDenied when the broker refused
// the request for permissions; see denied.Explain.
func (s *Store) denied(err, before error, what string, subjects ...string) error {
	return denied.Explain(s.conn(), err, before, what, subjects...)
}
