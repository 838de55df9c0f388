package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/jsapi"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/kvwatch"
)

// writeGrace is how long a claim in flight as a campaign that never held
// its key stops may still take: an answering broker takes milliseconds (a
// claim that wins is then released); on one that does not, Stop does not
// wait for the request timeout. A claim given up has an unknown outcome, as
// one that timed out: a key it wrote expires with the TTL.
const writeGrace = time.Second

// refusingStore is the store of a campaign or an observer on a real
// connection. Each request ends, as ErrPermissionDenied, as soon as the
// connection reports that the broker refused it for permissions (NATS
// answers a refused request with silence, until its timeout).
//
// Until a campaign has written its key, its requests also end when it
// stops: reads, settings and a watch being set up at once, a claim
// writeGrace later. Once it wrote, it may hold the key, and its release is
// marked only with what its requests tell: they keep their timeouts.
type refusingStore struct {
	store
	nc     *nats.Conn
	bucket string
	api    string          // the JetStream API prefix, "$JS.API." by default
	put    string          // what a key's subject is prefixed with when written
	stop   context.Context // ends when the campaign stops; nil for an observer
	wrote  atomic.Bool     // a write of the key succeeded: the campaign may hold it
}

// newRefusingStore wraps st, the store of bucket over js.
func newRefusingStore(st store, js jetstream.JetStream, bucket string, stop context.Context) *refusingStore {
	api, put := jsapi.Prefix(js), ""
	if api != jetstream.DefaultAPIPrefix {
		put = api
	}
	return &refusingStore{store: st, nc: js.Conn(), bucket: bucket, api: api, put: put, stop: stop}
}

// request runs call under a context that ends on a refusal covers reports,
// or, until the campaign wrote its key, wait after stop closes (never, for
// a negative wait), and explains its error as ErrPermissionDenied when it
// was refused.
func (s *refusingStore) request(ctx context.Context, what string, wait time.Duration, covers func(string) bool, call func(context.Context) error) error {
	before := denied.Last(s.nc)
	actx, release := denied.Abort(ctx, s.nc, before, what, covers)
	defer release()
	if wait >= 0 && s.stop != nil && !s.wrote.Load() {
		// No goroutine per request: thousands of campaigns start at once.
		var (
			mu       sync.Mutex
			finished bool
			grace    *time.Timer
		)
		unwatch := context.AfterFunc(s.stop, func() {
			if wait == 0 {
				release()
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				grace = time.AfterFunc(wait, release)
			}
		})
		defer func() {
			unwatch()
			mu.Lock()
			finished = true
			if grace != nil {
				grace.Stop()
			}
			mu.Unlock()
		}()
	}
	err := call(actx)
	if err == nil || errors.Is(err, ErrPermissionDenied) {
		return err
	}
	if explained := denied.ExplainFunc(s.nc, err, before, what, covers); errors.Is(explained, ErrPermissionDenied) {
		return explained
	}
	if s.stop != nil && s.stop.Err() != nil && ctx.Err() == nil && actx.Err() != nil {
		return fmt.Errorf("%w: cut short, as the campaign is stopping", err)
	}
	return err
}

func (s *refusingStore) streamInfo() string { return s.api + "STREAM.INFO.KV_" + s.bucket }

func (s *refusingStore) keySubject(key string) string { return "$KV." + s.bucket + "." + key }

func (s *refusingStore) Status(ctx context.Context, maxAge time.Duration) (st jetstream.KeyValueStatus, age time.Duration, err error) {
	err = s.request(ctx, "reading the settings of bucket "+s.bucket, 0, denied.Naming(s.streamInfo()), func(ctx context.Context) error {
		st, age, err = s.store.Status(ctx, maxAge)
		return err
	})
	return st, age, err
}

// SettingsChanges passes on the wrapped store's notices, if it gives any.
func (s *refusingStore) SettingsChanges(notify func(sent time.Time)) (stop func()) {
	if sc, ok := s.store.(settingsNotifier); ok {
		return sc.SettingsChanges(notify)
	}
	return func() {}
}

func (s *refusingStore) Latest(ctx context.Context, key string) (ent jetstream.KeyValueEntry, err error) {
	covers := denied.Naming(s.streamInfo(), s.api+"DIRECT.GET.KV_"+s.bucket+"."+s.keySubject(key), s.api+"STREAM.MSG.GET.KV_"+s.bucket)
	err = s.request(ctx, "reading election "+key, 0, covers, func(ctx context.Context) error {
		ent, err = s.store.Latest(ctx, key)
		return err
	})
	return ent, err
}

func (s *refusingStore) Write(ctx context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (n uint64, err error) {
	err = s.request(ctx, "writing election "+key, writeGrace, denied.Naming(s.put+s.keySubject(key)), func(ctx context.Context) error {
		n, err = s.store.Write(ctx, key, value, rev, st)
		if err == nil {
			s.wrote.Store(true)
		}
		return err
	})
	return n, err
}

func (s *refusingStore) Delete(ctx context.Context, key string, rev uint64, payload []byte, st keymsg.Stamp) (marked bool, err error) {
	// A release is the handover a stopping leader owes: never cut short.
	err = s.request(ctx, "releasing election "+key, -1, denied.Naming(s.put+s.keySubject(key)), func(ctx context.Context) error {
		marked, err = s.store.Delete(ctx, key, rev, payload, st)
		return err
	})
	return marked, err
}

// Watch sets the watch up under a context that ends on a refusal of its
// consumer or when the campaign stops; once set up, it lives until stopped.
func (s *refusingStore) Watch(ctx context.Context, key string) (w jetstream.KeyWatcher, err error) {
	err = s.request(ctx, "watching election "+key, 0, s.coversWatch(key), func(actx context.Context) error {
		w, err = s.store.Watch(actx, key)
		if err == nil && actx.Err() != nil {
			// The request ended as the watch came up: the watch goes with it.
			kvwatch.StopInBackground(w, new(sync.WaitGroup))
			w, err = nil, context.Cause(actx)
		}
		return err
	})
	return w, err
}

// coversWatch reports whether a refused subject is that of a watch of key
// alone: creating a consumer filtered on the key's subject, or pulling
// from a consumer of the stream. A consumer shared by a group of keys
// does not count: the store then makes one per key, and the refusal may
// be of another campaign's request.
func (s *refusingStore) coversWatch(key string) func(string) bool {
	create := s.api + "CONSUMER.CREATE.KV_" + s.bucket + "."
	next := denied.Naming(s.api + "CONSUMER.MSG.NEXT.KV_" + s.bucket + ".*")
	return func(refused string) bool {
		if next(refused) {
			return true
		}
		rest, ok := strings.CutPrefix(refused, create)
		if !ok {
			return false
		}
		_, filter, ok := strings.Cut(rest, ".") // after the consumer's name
		return ok && filter == s.keySubject(key)
	}
}
