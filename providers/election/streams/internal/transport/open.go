package transport

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// opening is one request to open a bucket that the elections of a process
// starting together share.
type opening struct {
	done chan struct{}
	kv   jetstream.KeyValue
	err  error
}

// openings holds the opens under way, by connection and bucket.
var openings = struct {
	mu sync.Mutex
	m  map[hubKey]*opening
}{m: map[hubKey]*opening{}}

// OpenBucket opens bucket name over js as js.KeyValue does, once for the
// process's elections on js's connection: a bucket a live store opened is
// not asked for again, and elections opening it together share one request
// (the JetStream API refuses requests past a limit of pending ones).
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	k := hubKey{conn: js.Conn(), api: putPrefix(js), bucket: name}
	hubs.mu.Lock()
	if h := hubs.m[k].Value(); h != nil {
		hubs.mu.Unlock()
		return h.kv, nil
	}
	hubs.mu.Unlock()

	openings.mu.Lock()
	o := openings.m[k]
	if o == nil {
		o = &opening{done: make(chan struct{})}
		openings.m[k] = o
		openings.mu.Unlock()
		o.kv, o.err = js.KeyValue(ctx, name)
		openings.mu.Lock()
		delete(openings.m, k)
		openings.mu.Unlock()
		close(o.done)
		return o.kv, o.err
	}
	openings.mu.Unlock()
	select {
	case <-o.done:
		if errors.Is(o.err, context.Canceled) || errors.Is(o.err, context.DeadlineExceeded) {
			// The opener's context ended (its election stopped, or its
			// time ran out), not necessarily ours: open it ourselves.
			return OpenBucket(ctx, js, name)
		}
		return o.kv, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
