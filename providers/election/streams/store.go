package streams

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// store is everything a campaign asks of the bucket: five calls. The
// algorithm depends on this and nothing wider, which documents its I/O and
// lets table tests drive it with an in-memory store and a fake clock.
type store interface {
	// Status reads the bucket's settings.
	Status(ctx context.Context) (jetstream.KeyValueStatus, error)
	// Write stores value under key if the key's latest revision is rev (0:
	// the key has no message at all), and returns the new revision.
	Write(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	// Delete writes a delete marker over revision rev of key, carrying
	// payload when the store can (a release mark), and reports whether it
	// could.
	Delete(ctx context.Context, key string, rev uint64, payload []byte) (marked bool, err error)
	// Latest returns the key's latest message, markers included, or nil
	// when it has none. A store that cannot see markers returns nil for
	// them too.
	Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	// Watch follows key: its latest message first, then a nil entry, then
	// every change.
	Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error)
}

// kvStore is the store of a real bucket. With a JetStream context it writes
// release markers and reads markers directly from the stream; without one it
// has only the KV API, which can do neither.
type kvStore struct {
	kv jetstream.KeyValue
	js jetstream.JetStream

	mu     sync.Mutex
	stream jetstream.Stream
}

func newKVStore(kv jetstream.KeyValue, js jetstream.JetStream) *kvStore {
	return &kvStore{kv: kv, js: js}
}

func (s *kvStore) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return s.kv.Status(ctx)
}

func (s *kvStore) Write(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.kv.Update(ctx, key, value, rev)
}

func (s *kvStore) subject(key string) string { return "$KV." + s.kv.Bucket() + "." + key }

func (s *kvStore) Delete(ctx context.Context, key string, rev uint64, payload []byte) (bool, error) {
	if s.js == nil || len(payload) == 0 {
		return false, s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	}
	m := nats.NewMsg(s.subject(key))
	m.Header.Set(kvOperationHeader, "DEL")
	m.Data = payload
	_, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	return true, err
}

// kvOperationHeader is the header NATS KV marks deletes and purges with.
const kvOperationHeader = "KV-Operation"

func (s *kvStore) Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if s.js == nil {
		ent, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, nil
		}
		return ent, err
	}
	st, err := s.openStream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ent := &rawEntry{bucket: s.kv.Bucket(), key: key, value: m.Data, revision: m.Sequence, created: m.Time}
	switch m.Header.Get(kvOperationHeader) {
	case "DEL":
		ent.op = jetstream.KeyValueDelete
	case "PURGE":
		ent.op = jetstream.KeyValuePurge
	default:
		switch m.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			ent.op = jetstream.KeyValuePurge
		case "Remove":
			ent.op = jetstream.KeyValueDelete
		}
	}
	return ent, nil
}

func (s *kvStore) openStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		return s.stream, nil
	}
	st, err := s.js.Stream(ctx, "KV_"+s.kv.Bucket())
	if err != nil {
		return nil, err
	}
	s.stream = st
	return st, nil
}

func (s *kvStore) Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error) {
	return s.kv.Watch(ctx, key)
}

// rawEntry is a key's message read straight from the stream.
type rawEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *rawEntry) Bucket() string                  { return e.bucket }
func (e *rawEntry) Key() string                     { return e.key }
func (e *rawEntry) Value() []byte                   { return e.value }
func (e *rawEntry) Revision() uint64                { return e.revision }
func (e *rawEntry) Created() time.Time              { return e.created }
func (e *rawEntry) Delta() uint64                   { return 0 }
func (e *rawEntry) Operation() jetstream.KeyValueOp { return e.op }

var _ store = (*kvStore)(nil)
