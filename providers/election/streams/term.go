package streams

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/conclave-io/conclave/clock"
)

// Term is one period of leadership of one candidate.
//
// Its validity is read from the clock: Valid turns false, and the context's
// Err turns non-nil, the instant the local deadline passes, even if the
// election's goroutine has not run since. Check Valid right before acting
// as leader, and give the Token to any resource that can reject writes
// carrying a token lower than one it has seen.
type Term struct {
	key      string
	identity string
	token    uint64
	from     KeyState
	started  time.Time
	clock    clock.Clock
	parent   context.Context

	mu         sync.Mutex
	validUntil time.Time // once ended, when it ended
	ended      bool
	cause      Cause
	done       chan struct{}
}

func newTerm(parent context.Context, c clock.Clock, key, identity string, token uint64, from KeyState, validUntil time.Time) *Term {
	return &Term{
		key: key, identity: identity, token: token, from: from, started: c.Now(), clock: c, parent: parent,
		validUntil: validUntil, done: make(chan struct{}),
	}
}

// Key returns the election key.
func (t *Term) Key() string { return t.key }

// Identity returns the leader's identity.
func (t *Term) Identity() string { return t.identity }

// Token returns the fencing token: the revision of the write that began the
// term. Tokens of later terms in the same bucket are always larger.
func (t *Term) Token() uint64 { return t.token }

// Started returns when the term began, on the election's clock. The
// minimum term (WithMinTerm) counts from then.
func (t *Term) Started() time.Time { return t.started }

// From returns what the key was when this candidate took it, which decides
// how long the term waited to begin: KeyReleased after a release or a
// hand-over (at once: the previous leader had stopped); KeyRemoved after a
// removal such as a forced stand-down (a TTL after the removal, when the
// removed leader has surely stopped counting on its lease); KeyAbsent for a
// new or expired key (at once, or after Grace). Work that can outlive its
// term by some time should, unless From is KeyReleased, wait that long
// before it starts.
func (t *Term) From() KeyState { return t.from }

// ValidUntil returns the local time until which leadership is guaranteed.
// Renewals move it later while the term lasts; once the term has ended it is
// the time it ended.
func (t *Term) ValidUntil() time.Time {
	_, until, _ := t.state()
	return until
}

// Valid reports whether the term still holds at this instant.
func (t *Term) Valid() bool {
	ended, _, _ := t.state()
	return !ended
}

// Done returns a channel closed when the term ends. It closes when the
// election's goroutine notices the end, or when Valid or Err observe it,
// whichever is first.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err returns nil while the term is valid, and an error wrapping
// ErrTermEnded, saying why, once it has ended.
func (t *Term) Err() error {
	if ended, _, cause := t.state(); ended {
		return fmt.Errorf("%w: %s", ErrTermEnded, cause)
	}
	return nil
}

// Cause returns why the term ended, or 0 while it lasts.
func (t *Term) Cause() Cause {
	_, _, cause := t.state()
	return cause
}

// Context returns a context cancelled when the term ends. Its Err is read
// from the clock like Valid, and its values come from the context passed to
// Start. It has no Deadline because renewals move the term's end.
func (t *Term) Context() context.Context { return termContext{t} }

// String describes the term for logs.
func (t *Term) String() string {
	return fmt.Sprintf("term %d of %s in %s", t.token, t.identity, t.key)
}

// extend moves the deadline to until if the term is still valid, and reports
// whether it did.
func (t *Term) extend(until time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkLocked()
	if !t.ended {
		t.validUntil = until
	}
	return !t.ended
}

// limit brings the deadline forward to until, if that is earlier.
func (t *Term) limit(until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended && until.Before(t.validUntil) {
		t.validUntil = until
	}
	t.checkLocked()
}

// end ends the term now for cause, if it has not already ended, and returns
// the cause it ended with.
func (t *Term) end(cause Cause) Cause {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkLocked()
	if !t.ended {
		t.finishLocked(t.clock.Now(), cause)
	}
	return t.cause
}

// state returns, at this instant, whether the term has ended, ValidUntil
// and the cause it ended with.
func (t *Term) state() (ended bool, until time.Time, cause Cause) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkLocked()
	return t.ended, t.validUntil, t.cause
}

// checkLocked ends the term if the clock passed its deadline.
func (t *Term) checkLocked() {
	if !t.ended && !t.clock.Now().Before(t.validUntil) {
		t.finishLocked(t.validUntil, CauseDeadline)
	}
}

// finishLocked ends the term at at (its deadline, if that is earlier).
func (t *Term) finishLocked(at time.Time, cause Cause) {
	t.ended, t.cause = true, cause
	if at.Before(t.validUntil) {
		t.validUntil = at
	}
	close(t.done)
}

// termContext adapts a Term to context.Context.
type termContext struct{ t *Term }

func (c termContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c termContext) Done() <-chan struct{}       { return c.t.Done() }
func (c termContext) Value(key any) any           { return c.t.parent.Value(key) }

func (c termContext) Err() error {
	if c.t.Valid() {
		return nil
	}
	return context.Canceled
}
