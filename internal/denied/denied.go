// Package denied recognises a NATS request the broker refused for
// permissions. NATS answers a refused publish or subscription with silence,
// so the request itself just times out; only the connection's asynchronous
// error names the cause.
package denied

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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
	return ExplainFunc(nc, err, before, what, Naming(subjects...))
}

// ExplainFunc is Explain for a request whose refused subject covers tells
// apart, where a list of patterns cannot: a watch's consumer, whose filter
// may be the key's subject or a wildcard over a group of keys.
func ExplainFunc(nc *nats.Conn, err, before error, what string, covers func(refused string) bool) error {
	if err == nil || nc == nil {
		return err
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return err // the broker answered: not a refusal
	}
	if refusal := refusalSince(nc, before, what, covers); refusal != nil {
		return refusal
	}
	return err
}

// Naming returns a covers function for ExplainFunc and Abort that matches
// the refused subject against subjects, as Explain does.
func Naming(subjects ...string) func(refused string) bool {
	return func(refused string) bool {
		for _, subj := range subjects {
			if matches(subj, refused) {
				return true
			}
		}
		return false
	}
}

// refusalSince returns the error explaining a refusal when nc's
// asynchronous error changed since before to a permissions violation of a
// subject covers reports, or of nc's inbox; otherwise nil.
func refusalSince(nc *nats.Conn, before error, what string, covers func(string) bool) error {
	after := nc.LastError()
	if after == nil || after == before || !errors.Is(after, nats.ErrPermissionViolation) {
		return nil
	}
	msg := after.Error()
	if refused, ok := refusedSubject(msg); ok && covers(refused) {
		return fmt.Errorf("%w: %s: the broker refused %s to this connection's user (%v): ask the broker's operator to allow it (a user's plugin.conclave.user.NAME.campaign or .observe keys), or connect as a user who may", ErrPermissionDenied, what, refused, after)
	}
	if inbox := InboxPrefix(nc); strings.Contains(msg, `Subscription to "`+inbox) {
		want := "_INBOX.<user>"
		if nc.Opts.User != "" {
			want = "_INBOX." + nc.Opts.User
		}
		return fmt.Errorf("%w: %s: the broker refused replies on this connection's inbox %s.> (%v): a broker with users lets each receive replies only under its own inbox prefix, %s: connect with nats.CustomInboxPrefix(%q) (Conclave's framework and CLI do so for plugin.nats.user and --user), or with the NATS CLI's --inbox-prefix %s (inbox_prefix in a NATS context)", ErrPermissionDenied, what, inbox, after, want, want, want)
	}
	return nil
}

// pollEvery is how often Abort looks at the connection's asynchronous
// error. nats.go has one error handler per connection, the application's:
// reading the last error leaves it alone.
const pollEvery = 10 * time.Millisecond

// ErrRefused is the cause of a context that Abort ended: the broker refused
// the request for permissions. It does not match ErrPermissionDenied, as a
// refusal need not be for good (a shared consumer refused, say, is then
// made for one key alone); callers say so with Explain or ExplainFunc.
var ErrRefused = errors.New("the broker refused the request for permissions")

// Abort returns a context that ends with ctx, or as soon as nc reports a
// refusal that Explain would name for the request (a permissions violation
// after before, of a subject covers reports or of nc's inbox): NATS answers
// a refused request with silence, and waiting for its timeout only delays
// the same answer. Its cause then wraps ErrRefused and says what was
// refused. stop releases it; call it once the request returned.
func Abort(ctx context.Context, nc *nats.Conn, before error, what string, covers func(refused string) bool) (context.Context, context.CancelFunc) {
	if nc == nil {
		return context.WithCancel(ctx)
	}
	actx, cancel := context.WithCancelCause(ctx)
	w := &waiter{before: before, what: what, covers: covers, cancel: cancel}
	p := pollerFor(nc)
	p.add(w)
	var once sync.Once
	return actx, func() {
		once.Do(func() { p.remove(w) })
		cancel(context.Canceled)
	}
}

// A poller watches one connection's last error for the requests waiting on
// it: one goroutine per connection while any request waits, whatever their
// number, and a look at each request's subjects only when the error
// changed. A process with thousands of elections in flight on one
// connection (starting, or on a slow broker) must not run a timer each.
type poller struct {
	nc      *nats.Conn
	mu      sync.Mutex
	waiters map[*waiter]struct{}
	running bool
}

type waiter struct {
	before error
	what   string
	covers func(string) bool
	cancel context.CancelCauseFunc
}

// pollers holds the poller of each connection while requests wait on it.
var pollers = struct {
	mu sync.Mutex
	m  map[*nats.Conn]*poller
}{m: map[*nats.Conn]*poller{}}

func pollerFor(nc *nats.Conn) *poller {
	pollers.mu.Lock()
	defer pollers.mu.Unlock()
	p := pollers.m[nc]
	if p == nil {
		p = &poller{nc: nc, waiters: map[*waiter]struct{}{}}
		pollers.m[nc] = p
	}
	return p
}

func (p *poller) add(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiters[w] = struct{}{}
	if !p.running {
		p.running = true
		go p.run()
	}
}

func (p *poller) remove(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiters, w)
}

// run looks at the connection's last error every pollEvery until no
// request waits, and ends the requests it refuses.
func (p *poller) run() {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var seen error
	for range t.C {
		err := p.nc.LastError()
		p.mu.Lock()
		if len(p.waiters) == 0 {
			p.running = false
			p.mu.Unlock()
			pollers.mu.Lock()
			p.mu.Lock()
			if !p.running && len(p.waiters) == 0 && pollers.m[p.nc] == p {
				delete(pollers.m, p.nc)
			}
			p.mu.Unlock()
			pollers.mu.Unlock()
			return
		}
		var refused []*waiter
		var why []error
		if err != nil && err != seen {
			for w := range p.waiters {
				if refusal := refusalSince(p.nc, w.before, w.what, w.covers); refusal != nil {
					refused, why = append(refused, w), append(why, refusal)
					delete(p.waiters, w)
				}
			}
		}
		seen = err
		p.mu.Unlock()
		for i, w := range refused {
			w.cancel(fmt.Errorf("%w: %v", ErrRefused, why[i]))
		}
	}
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
