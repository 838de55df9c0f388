package streams

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/providers/election/internal/errs"
)

// Option configures an Election or an Observer. InBucket, WithLogger and
// WithRecorder serve both; OnChange, ObserveRenewals and ObserveStanding
// serve observers alone; the others, candidates alone. Options check their
// arguments: an unusable value, or an option given to the side it does not
// serve, makes NewElection or NewObserver fail with an error wrapping
// ErrInvalidOption.
type Option func(*options) error

// Backoff spaces out a standby's safety-net campaigns. backoff.Policy and its
// presets (backoff.FiveSec, backoff.TwentySec) implement it.
type Backoff interface {
	// Duration returns how long to wait before try n, counting from 0.
	Duration(n int) time.Duration
}

// Logger receives the election's log lines. *logrus.Entry and *logrus.Logger
// implement it. Without one the election logs nothing.
type Logger interface {
	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

type options struct {
	onWon, onLost  func()
	onCampaign     func(State)
	onLeading      func(*Term)
	backoff        Backoff
	releaseOnStop  bool
	grace, margin  time.Duration
	renewInterval  time.Duration
	requestTimeout time.Duration
	clock          clock.Clock
	log            Logger
	recorder       Recorder
	bucket         string
	store          store               // tests only: replaces the bucket
	random         func(n int64) int64 // tests only: the machine's jitter (nil: math/rand)
	priority       int
	healthCheck    func(context.Context) error
	healthEvery    time.Duration
	minTerm        time.Duration // 0: twice the TTL, at least 10s
	instance       string        // "": a random one

	onChange func(Leadership) // this and the next two: observers alone
	renewals bool
	standing *nats.Conn

	// The first option given that serves candidates alone, or observers.
	candidateOnly, observerOnly string
}

// candidateOption and observerOption return the option name, serving
// candidates (observers) alone, that runs set.
func candidateOption(name string, set func(*options) error) Option {
	return func(o *options) error {
		o.candidateOnly = cmp.Or(o.candidateOnly, name)
		return set(o)
	}
}

func observerOption(name string, set func(*options) error) Option {
	return func(o *options) error {
		o.observerOnly = cmp.Or(o.observerOnly, name)
		return set(o)
	}
}

// newOptions applies opts for a candidate, or an observer, over js, and
// refuses an option that serves the other side.
func newOptions(js jetstream.JetStream, opts []Option, forObserver bool) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	over := "campaign"
	switch {
	case forObserver && o.candidateOnly != "":
		return o, fmt.Errorf("%w: %s serves candidates, and an observer does not campaign: give it to NewElection", ErrInvalidOption, o.candidateOnly)
	case !forObserver && o.observerOnly != "":
		return o, fmt.Errorf("%w: %s serves observers: give it to NewObserver", ErrInvalidOption, o.observerOnly)
	case forObserver:
		over = "watch"
	}
	if o.store == nil && (js == nil || js.Conn() == nil) { // a test's store needs no js
		what := "is nil"
		if js != nil {
			what = "has no connection"
		}
		return o, fmt.Errorf("%w: the JetStream context %s: pass jetstream.New(nc), nc being the connection to %s over", ErrInvalidOption, what, over)
	}
	return o, nil
}

func defaultOptions() options {
	return options{releaseOnStop: true, clock: clock.System{}, log: nopLogger{}, recorder: nopRecorder{}, bucket: bucket.Name}
}

// OnWon sets a function called when this candidate becomes leader. It runs
// on the election's notification goroutine, never under a lock, and may call
// any method of the Election, Stop included.
func OnWon(cb func()) Option {
	return candidateOption("OnWon", func(o *options) error { o.onWon = cb; return nil })
}

// OnLost sets a function called when this candidate stops being leader,
// for whatever reason, Stop included; OnWon and OnLost strictly alternate.
// It runs like OnWon. A graceful release waits for it to return, without
// renewing the key, so the next leader's OnWon runs after it, unless it
// outlives the lease: then the key expires and a standby leads.
func OnLost(cb func()) Option {
	return candidateOption("OnLost", func(o *options) error { o.onLost = cb; return nil })
}

// OnLeading sets a function called right after OnWon with the term: its
// fencing token, the local deadline until which leadership is guaranteed,
// and a context cancelled when it ends. Bind the leader's work to the
// term's context and send the token with every write to a resource that
// can reject stale leaders.
func OnLeading(cb func(*Term)) Option {
	return candidateOption("OnLeading", func(o *options) error { o.onLeading = cb; return nil })
}

// OnCampaign sets a function called as each campaign attempt is made, with
// CandidateState, and as each renewal is sent, with LeaderState: before the
// outcome is known. It runs like OnWon. For outcomes, use OnWon, OnLost,
// the Term, or a Recorder (Renewed counts successful renewals).
func OnCampaign(cb func(State)) Option {
	return candidateOption("OnCampaign", func(o *options) error { o.onCampaign = cb; return nil })
}

// WithBackoff slows down a standby's safety-net campaigns, made when it
// predicts the leader's key expired or its view of the key may be stale:
// attempt n after a failed one waits bo.Duration(n). Takeovers the watch
// reports (a released or removed key) are not delayed. Without it, a
// standby retries quickly (from 20ms, growing to a quarter of the TTL) so
// that a crashed leader is replaced within the TTL plus the broker's expiry
// lateness.
func WithBackoff(bo Backoff) Option {
	return candidateOption("WithBackoff", func(o *options) error {
		if bo == nil {
			return fmt.Errorf("%w: WithBackoff(nil): pass a policy such as backoff.TwentySec, or leave the option out", ErrInvalidOption)
		}
		o.backoff = bo
		return nil
	})
}

// WithReleaseOnStop sets whether a leader that stops hands its key over at
// once (true, the default) or leaves it to expire after the TTL (false). It
// offers the key to the best-ranked healthy standby it knows of, which
// takes it with one write, and otherwise releases it; both writes check
// the revision, so they never disturb another leader.
func WithReleaseOnStop(release bool) Option {
	return candidateOption("WithReleaseOnStop", func(o *options) error { o.releaseOnStop = release; return nil })
}

// WithGrace delays OnWon by d after a takeover of an expired key, as a
// cool-down for elections that mix in candidates that do not step down by a
// local deadline (Choria's). Takeovers of a key removed by someone else
// already wait a full TTL; takeovers of a released key never wait.
func WithGrace(d time.Duration) Option {
	return candidateOption("WithGrace", func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: WithGrace(%v) is negative", ErrInvalidOption, d)
		}
		o.grace = d
		return nil
	})
}

// WithInstance names this candidate among those that share its identity
// (see Election.Instance), such as "worker-3" for the third copy of a
// program on a host. Each candidate of an election needs its own; the
// default is random. The same rules as for identities apply.
func WithInstance(name string) Option {
	return candidateOption("WithInstance", func(o *options) error {
		if err := errs.ValidateIdentity(name); err != nil {
			return fmt.Errorf("%w: WithInstance(%q): %w", ErrInvalidOption, name, err)
		}
		o.instance = name
		return nil
	})
}

// WithSafetyMargin sets how long before the broker could expire its key a
// leader stops counting itself leader, to absorb clock-rate differences.
// Default: a tenth of the TTL. It must be below half the TTL; from a third
// of it, the default renew interval is half the lease.
func WithSafetyMargin(d time.Duration) Option {
	return positive("WithSafetyMargin", d, func(o *options) *time.Duration { return &o.margin })
}

// WithRenewInterval sets how often a leader renews its key. Default: a
// third of the TTL up to a TTL of about 27 s; above, as often as keeps 10 s
// plus the request timeout and a retry pause (15.25 s by default) before
// the deadline, for a renewal lost to a broker restart or a stream-leader
// election to be retried; and from about 34 s, half the lease. It must
// leave at least as much time again before the deadline.
func WithRenewInterval(d time.Duration) Option {
	return positive("WithRenewInterval", d, func(o *options) *time.Duration { return &o.renewInterval })
}

// WithRequestTimeout bounds each request to the broker. Default: a fifth of
// the TTL, between 200ms and 5s. A leader's requests are also cut off at
// its deadline.
func WithRequestTimeout(d time.Duration) Option {
	return positive("WithRequestTimeout", d, func(o *options) *time.Duration { return &o.requestTimeout })
}

// WithPriority ranks this candidate among the election's candidates: a
// leader hands the election over (see Election.HandOver) to a healthy
// candidate of a higher priority once its term has lasted the minimum term
// (WithMinTerm). Candidates of equal priority never take the election from
// one another, so leadership does not go back and forth between them.
// Default 0; a negative priority makes a candidate one that leads only when
// no other can (a canary). At most 1<<30.
func WithPriority(p int) Option {
	return candidateOption("WithPriority", func(o *options) error {
		if p > maxPriority || p < -maxPriority {
			return fmt.Errorf("%w: WithPriority(%d) is out of range (±%d)", ErrInvalidOption, p, maxPriority)
		}
		o.priority = p
		return nil
	})
}

// WithHealthCheck gates candidacy on check, run every every (and once
// before campaigning), each run bounded by every: while it fails the
// candidate does not campaign, and a leader hands the election over to a
// healthy candidate if one stands, and otherwise keeps leading (an
// unhealthy leader beats no leader). A flapping check moves leadership at
// most once per minimum term (WithMinTerm).
func WithHealthCheck(check func(ctx context.Context) error, every time.Duration) Option {
	return candidateOption("WithHealthCheck", func(o *options) error {
		if check == nil || every <= 0 {
			return fmt.Errorf("%w: WithHealthCheck needs a check and a positive interval (got every %v)", ErrInvalidOption, every)
		}
		o.healthCheck, o.healthEvery = check, every
		return nil
	})
}

// WithMinTerm sets how long a leader leads before it hands over to a better
// candidate on its own (WithPriority, WithHealthCheck). Default: twice the
// bucket's TTL, at least 10s. Forced and asked hand-overs do not wait.
func WithMinTerm(d time.Duration) Option {
	return positive("WithMinTerm", d, func(o *options) *time.Duration { return &o.minTerm })
}

// positive is the candidates' option name, setting *field(o) to d > 0.
func positive(name string, d time.Duration, field func(*options) *time.Duration) Option {
	return candidateOption(name, func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: %s(%v) must be positive", ErrInvalidOption, name, d)
		}
		*field(o) = d
		return nil
	})
}

// WithClock sets the clock used for deadlines and timers; tests pass a fake
// one (clock/clocktest) to step time.
func WithClock(c clock.Clock) Option {
	return candidateOption("WithClock", func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		o.clock = c
		return nil
	})
}

// WithLogger sets where the election or the observer logs what it does and why.
func WithLogger(l Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// WithRecorder sets a Recorder told of campaigns, wins, losses, renewals
// and who stands, for metrics; an observer given ObserveStanding tells it
// how many candidates stand (Recorder.Standing). See package metrics for a
// Prometheus one.
func WithRecorder(r Recorder) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("%w: WithRecorder(nil)", ErrInvalidOption)
		}
		o.recorder = r
		return nil
	}
}

// InBucket names the KV bucket the election's key lives in, instead of
// CHORIA_LEADER_ELECTION, the one Conclave and Choria brokers provision.
// Start (an observer's Run) opens it over the JetStream context given to
// NewElection (NewObserver), and waits, retrying, while it does not exist.
func InBucket(name string) Option {
	return func(o *options) error {
		bad := func(why string) error {
			return fmt.Errorf("%w: InBucket(%q) %s: a bucket name has only letters, digits, - and _, as in %q; leave the option out to use %s", ErrInvalidOption, name, why, bucket.Name, bucket.Name)
		}
		if name == "" {
			return bad("is empty")
		}
		for _, r := range name {
			if !nameRune(r, "-_") {
				return bad(fmt.Sprintf("contains %q", r))
			}
		}
		o.bucket = name
		return nil
	}
}

// nameRune reports whether r is an ASCII letter or digit, or one of extra.
func nameRune(r rune, extra string) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(extra, r)
}

type nopLogger struct{}

func (nopLogger) Debugf(string, ...any) {}
func (nopLogger) Infof(string, ...any)  {}
func (nopLogger) Warnf(string, ...any)  {}
func (nopLogger) Errorf(string, ...any) {}
