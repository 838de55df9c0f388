package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/jsapi"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// store is everything a campaign asks of the bucket: five calls, which
// tests serve with an in-memory store.
type store interface {
	// Status reads the bucket's settings with a request sent at most
	// maxAge ago (0: after the call), and returns them and the read's age.
	Status(ctx context.Context, maxAge time.Duration) (jetstream.KeyValueStatus, time.Duration, error)
	// Write stores value, carrying st where the store can, under key if
	// its latest revision is rev (0: no message), and returns the new one.
	Write(ctx context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (uint64, error)
	// Delete writes a delete marker over revision rev of key, carrying
	// payload (a release mark) if it can, and reports whether it could.
	Delete(ctx context.Context, key string, rev uint64, payload []byte, st keymsg.Stamp) (marked bool, err error)
	// Latest returns the key's latest message, markers included, or nil
	// when it has none. A store that cannot see markers returns nil for
	// them too.
	Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	// Watch follows key: its latest message, a nil entry, then every
	// change, until the watcher is stopped. ctx bounds the set-up only.
	Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error)
}

var _ store = (*transport.Store)(nil)

// bucketAccess is how a candidate or an observer reaches its bucket.
type bucketAccess struct {
	js      jetstream.JetStream
	name    string
	who     string          // "election k" or "observer k", for logs
	timeout time.Duration   // bounds each request
	stop    context.Context // ends a candidate's requests as it stops (see refusingStore); nil for an observer
	log     Logger
}

// await returns st (if nil, the store of the bucket opened over js) and
// the bucket's settings. It retries while the broker cannot be reached or
// the bucket does not exist, logging a new failure as a warning and its
// repeats at debug level. It returns at once an error wrapping
// nats.ErrConnectionClosed, ErrPermissionDenied or ErrInvalidBucket, and
// ctx's error once ctx ends.
func (b bucketAccess) await(ctx context.Context, st store) (store, jetstream.KeyValueStatus, error) {
	var status jetstream.KeyValueStatus
	var final error
	logged := ""
	err := backoff.FiveSec.For(ctx, func(try int) error {
		rctx, cancel := context.WithTimeout(ctx, b.timeout)
		defer cancel()
		var err error
		if st == nil {
			var kv jetstream.KeyValue
			if kv, err = openNamedBucket(rctx, b.js, b.name); err == nil {
				st = newRefusingStore(newStore(kv, b.js, b.log), b.js, b.name, b.stop)
			}
		}
		if err == nil {
			status, _, err = st.Status(rctx, 0)
		}
		switch {
		case err == nil:
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, ErrPermissionDenied), errors.Is(err, ErrInvalidBucket):
			final, err = err, nil
		case ctx.Err() != nil:
		case err.Error() != logged:
			logged = err.Error()
			why := ""
			if errors.Is(err, nats.ErrReconnectBufExceeded) || b.js != nil && b.js.Conn() != nil && b.js.Conn().IsReconnecting() {
				why = " (the connection to the broker is down; it reconnects)"
			}
			b.log.Warnf("%s: cannot read bucket %s%s (try %d), retrying: %v", b.who, b.name, why, try+1, err)
		default:
			b.log.Debugf("%s: cannot read bucket %s (try %d), retrying: %v", b.who, b.name, try+1, err)
		}
		return err
	})
	if final != nil {
		return st, nil, final
	}
	return st, status, err
}

// openNamedBucket opens bucket name over js. Its errors say what to do, and
// wrap ErrPermissionDenied or (for a stream that is no KV bucket) ErrInvalidBucket.
func openNamedBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	nc := js.Conn()
	before := denied.Last(nc)
	kv, err := transport.OpenBucket(ctx, js, name)
	if err == nil {
		return kv, nil
	}
	err = denied.Explain(nc, err, before, "opening bucket "+name, jsapi.Prefix(js)+"STREAM.INFO.KV_"+name)
	switch {
	case errors.Is(err, ErrPermissionDenied), errors.Is(err, nats.ErrConnectionClosed):
		return nil, err
	case errors.Is(err, jetstream.ErrBucketNotFound):
		how := fmt.Sprintf("create it with `nats kv add %s --ttl 60s --history 1`, or name the right one with streams.InBucket", name)
		if name == bucket.Name {
			how = "brokers with plugin.choria.broker_network = true provision it (`conclave broker run`, or a Choria broker); on another NATS server " + how
		}
		return nil, fmt.Errorf("bucket %s not found: %s: %w", name, how, err)
	case errors.Is(err, jetstream.ErrBadBucket):
		return nil, fmt.Errorf("%w: stream KV_%s is not a key-value bucket: %w", ErrInvalidBucket, name, err)
	}
	return nil, fmt.Errorf("opening bucket %s: %w", name, err)
}

// newStore returns the store of a real bucket, whose shared watches tell
// news by the election's comparator, isNews.
func newStore(kv jetstream.KeyValue, js jetstream.JetStream, log Logger) store {
	return transport.NewStore(kv, js, log, func(known, msg transport.Position) bool {
		return isNews(positionOf(known), positionOf(msg))
	})
}

// positionOf is p as the comparator takes it.
func positionOf(p transport.Position) position {
	return position{epoch: p.Epoch, revision: p.Revision, written: p.Written}
}
