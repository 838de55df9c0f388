// Package denied recognises a NATS request the broker refused for
// permissions. NATS answers a refused publish or subscription with silence,
// so the request itself just times out; only the connection's asynchronous
// error names the cause.
package denied

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPermissionDenied means the broker refused a request because the
// connection's user may not make it. Package streams and the framework
// export it.
var ErrPermissionDenied = errors.New("election: permission denied")

// Last returns nc's latest asynchronous error, to pass to Explain as
// before; nil for a nil connection.
func Last(nc *nats.Conn) error {
	if nc == nil {
		return nil
	}
	return nc.LastError()
}

// Explain returns err explained as ErrPermissionDenied when the broker
// refused the request for permissions: err is not an answer from the
// broker, and nc's asynchronous error changed since before (its value when
// the request was about to be sent) to a permissions violation naming one of
// subjects or nc's inbox. Otherwise it returns err. what says what was
// asked, for the message.
//
// A subject may hold the wildcards of NATS subscriptions, for a part of the
// request's subject the caller cannot know (the random consumer name in
// $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>): * matches any one
// token and a last > one or more. A refused subject's own * and > tokens
// are matched as any others.
func Explain(nc *nats.Conn, err, before error, what string, subjects ...string) error {
	if err == nil || nc == nil {
		return err
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return err // the broker answered: not a refusal
	}
	after := nc.LastError()
	if after == nil || after == before || !errors.Is(after, nats.ErrPermissionViolation) {
		return err
	}
	msg := after.Error()
	if refused, ok := refusedSubject(msg); ok {
		for _, subj := range subjects {
			if matches(subj, refused) {
				return fmt.Errorf("%w: %s: the broker refused %s to this connection's user (%v): ask the broker's operator to allow it (a user's plugin.conclave.user.NAME.campaign or .observe keys), or connect as a user who may", ErrPermissionDenied, what, refused, after)
			}
		}
	}
	if inbox := InboxPrefix(nc); strings.Contains(msg, `Subscription to "`+inbox) {
		return fmt.Errorf("%w: %s: the broker refused replies on this connection's inbox %s.> (%v): a broker with users gives each its own inbox prefix; connect with nats.CustomInboxPrefix(\"_INBOX.<user>\") (Conclave's framework and CLI do so when plugin.nats.user is set)", ErrPermissionDenied, what, inbox, after)
	}
	return err
}

// InboxPrefix returns the prefix of nc's inboxes.
func InboxPrefix(nc *nats.Conn) string {
	inbox := nc.NewInbox()
	if i := strings.LastIndexByte(inbox, '.'); i > 0 {
		return inbox[:i]
	}
	return inbox
}

// refusedSubject returns the subject a permissions violation's message
// names: the first quoted one, as in `Permissions Violation for Publish to
// "$KV.B.k"` or `for Subscription to "x" using queue "q"`.
func refusedSubject(msg string) (string, bool) {
	_, rest, ok := strings.Cut(msg, `"`)
	if !ok {
		return "", false
	}
	subj, _, ok := strings.Cut(rest, `"`)
	return subj, ok && subj != ""
}

// matches reports whether subject matches pattern, whose * tokens match any
// one token and whose last > token one or more.
func matches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">" && i == len(pt)-1:
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}
