package streams

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// store is everything a campaign asks of the bucket: five calls. The
// algorithm depends on this and nothing wider, which documents its I/O and
// lets table tests drive it with an in-memory store and a fake clock.
type store interface {
	// Status reads the bucket's settings with a request sent at most
	// maxAge before it returns (0: sent after the call), and returns them
	// and the read's age.
	Status(ctx context.Context, maxAge time.Duration) (jetstream.KeyValueStatus, time.Duration, error)
	// Write stores value under key if the key's latest revision is rev (0:
	// the key has no message at all), and returns the new revision.
	// The write carries st, what it says of itself, where the store can.
	Write(ctx context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (uint64, error)
	// Delete writes a delete marker over revision rev of key, carrying
	// payload when the store can (a release mark), and reports whether it
	// could.
	Delete(ctx context.Context, key string, rev uint64, payload []byte, st keymsg.Stamp) (marked bool, err error)
	// Latest returns the key's latest message, markers included, or nil
	// when it has none. A store that cannot see markers returns nil for
	// them too.
	Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	// Watch follows key: its latest message first, then a nil entry, then
	// every change, until the watcher is stopped. ctx bounds the set-up
	// only (a store whose watch ends with ctx is given one that does not
	// end before the watch is stopped).
	Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error)
}

var _ store = (*transport.Store)(nil)

// newStore returns the store of a real bucket (see transport.Store). Its
// watches, shared by the process, tell a bucket made again by the
// election's comparator, isNews, as campaigns and observers do.
func newStore(kv jetstream.KeyValue, js jetstream.JetStream, log Logger) store {
	return transport.NewStore(kv, js, log, func(known, msg transport.Position) bool {
		return isNews(positionOf(known), positionOf(msg))
	})
}

// positionOf is p as the comparator takes it.
func positionOf(p transport.Position) position {
	return position{epoch: p.Epoch, revision: p.Revision, written: p.Written}
}

// errLogged marks an error the store's shared watches already logged for
// the process: the campaigns it reaches log it at debug level only.
type errLogged = transport.LoggedError
