// Package transport is how an election reaches its bucket: the KV adapter
// (Store) that reads and writes election keys, and the watches that every
// candidate and observer of a process on one connection and bucket share
// (watchHub, feed). It knows the messages of a bucket, not what they mean
// for an election; whether a message is news it asks the comparator it is
// given (the election's isNews).
package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/jsapi"
	"github.com/conclave-io/conclave/internal/keymsg"
)

// Logger receives the transport's log lines: the same methods as the
// election's Logger, so that any of its loggers serves.
type Logger interface {
	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Position places a message of a bucket: the bucket's epoch (its stream's
// creation time), its revision, and when the broker wrote it; zero: unknown.
type Position struct {
	Epoch    time.Time
	Revision uint64
	Written  time.Time
}

// Comparator (the election's isNews) reports whether a message at msg tells
// something the holder of known does not know. A feed asks it about
// messages at or below the highest revision it delivered, to tell a bucket
// made again (whose revisions start again at 1).
type Comparator func(known, msg Position) bool

// Store is an election bucket as a campaign uses it. It writes raw
// messages (with a per-message TTL when the bucket allows one) and release
// markers, and reads markers from the stream. Its watches are shared with
// the process's other stores of the connection and bucket (see watchHub).
// Its callers explain refusals for permissions (streams' refusingStore).
type Store struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream
	hub *watchHub

	mu sync.Mutex
	// ttl is the bucket's TTL as last read; msgTTL is the per-message TTL
	// writes carry, 0 when the bucket does not allow one.
	ttl, msgTTL time.Duration
}

// NewStore returns the store of bucket kv, over js (not nil). Its shared
// watches log to, and judge with, the log and isNews of the first store of
// the connection and bucket.
func NewStore(kv jetstream.KeyValue, js jetstream.JetStream, log Logger, isNews Comparator) *Store {
	return &Store{kv: kv, js: js, hub: hubFor(kv, js, log, isNews)}
}

// putPrefix returns what nats.go's KV puts in front of a key's subject when
// it publishes through js: the API prefix ("$JS.<domain>.API." for a
// domain) unless it is the default one. The broker maps "<prefix>$KV.>" to
// "$KV.>" in the JetStream it names; a write to the bare subject would
// reach whichever stream listens locally (a leaf node's own bucket), or none.
func putPrefix(js jetstream.JetStream) string {
	if pre := jsapi.Prefix(js); pre != jetstream.DefaultAPIPrefix {
		return pre
	}
	return ""
}

// Status reads the bucket's settings with a request sent at most maxAge
// ago (0: after the call began; see watchHub.status), returns them and
// their age, and notes whether writes may carry a per-message TTL.
func (s *Store) Status(ctx context.Context, maxAge time.Duration) (jetstream.KeyValueStatus, time.Duration, error) {
	st, age, err := s.hub.status(ctx, maxAge)
	if err != nil {
		return nil, 0, err
	}
	bs, _ := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	s.mu.Lock()
	s.ttl, s.msgTTL = st.TTL(), 0
	if bs != nil && bs.StreamInfo() != nil && bs.StreamInfo().Config.AllowMsgTTL {
		s.msgTTL = MessageTTL(st.TTL())
	}
	s.mu.Unlock()
	return st, age, nil
}

// ShareByPrefix makes the hub follow keys through per-key and prefix
// consumers only, as for a user refused consumers with several filters.
func (s *Store) ShareByPrefix() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.noSet = time.Now().Add(24 * time.Hour)
}

// SettingsChanges calls notify, when the bucket's settings change, with
// when a read of them made since was sent (see watchHub.settingsChanges),
// and returns a function that stops the calls. notify must not block.
func (s *Store) SettingsChanges(notify func(sent time.Time)) (stop func()) {
	return s.hub.settingsChanges(notify)
}

// MessageTTL is the per-message TTL for a bucket TTL: whole seconds, as the
// server counts them, rounded up so that a message never expires before the
// bucket's TTL (the bucket's MaxAge then expires it, as without one).
func MessageTTL(ttl time.Duration) time.Duration {
	return (ttl + time.Second - 1).Truncate(time.Second)
}

// Write publishes value raw, carrying st, with a revision check. When the
// bucket allows it, the message carries the TTL itself: the broker then
// expires it within milliseconds of the TTL, where MaxAge can be hundreds
// late. Choria's candidates write without one, and MaxAge expires theirs.
func (s *Store) Write(ctx context.Context, key string, value []byte, rev uint64, st keymsg.Stamp) (uint64, error) {
	s.mu.Lock()
	ttl := s.msgTTL
	s.mu.Unlock()
	leave, err := s.hub.gate.enter(ctx, Writes)
	if err != nil {
		return 0, err
	}
	defer leave()
	m := s.message(key, value, rev, st)
	if ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	seq, err := s.publish(ctx, m)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMessageTTLDisabled {
			// Write without a TTL until Status says the bucket allows one.
			s.mu.Lock()
			s.msgTTL = 0
			s.mu.Unlock()
		}
		return 0, MapMismatch(err)
	}
	return seq, nil
}

// publish sends m and returns the stream sequence acknowledged, as the
// JetStream context's PublishMsg does: bounded by ctx (or
// defaultAPITimeout), retried while no stream answers (then
// jetstream.ErrNoStreamResponse), a refusal as a *jetstream.APIError, an
// unreadable acknowledgement as jetstream.ErrInvalidJSAck. Every renewal
// gets an acknowledgement: readAck reads it without encoding/json.
func (s *Store) publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	nc := s.js.Conn()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultAPITimeout)
		defer cancel()
	}
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for try := 0; errors.Is(err, nats.ErrNoResponders) && try < jetstream.DefaultPubRetryAttempts; try++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return 0, jetstream.ErrNoStreamResponse
	case err != nil:
		return 0, err
	}
	return readAck(resp.Data)
}

// defaultAPITimeout is the JetStream context's bound on a request whose
// context has no deadline.
const defaultAPITimeout = 5 * time.Second

// readAck reads a publish's acknowledgement: the stream sequence stored,
// or the broker's refusal. The shapes the broker writes are read by hand
// (readStored, readRefusal), any other by encoding/json.
func readAck(data []byte) (uint64, error) {
	if seq, ok := readStored(data); ok {
		return seq, nil
	}
	if apiErr, ok := readRefusal(data); ok {
		return 0, fmt.Errorf("nats: %w", apiErr)
	}
	var ack struct {
		Error    *jetstream.APIError `json:"error"`
		Stream   string              `json:"stream"`
		Sequence uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return ack.Sequence, nil
}

// MapMismatch makes a raw publish's revision conflict match
// jetstream.ErrKeyRevisionMismatch, as kv.Update's does; it returns other
// errors as they are.
func MapMismatch(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
		}
	}
	return err
}

// message returns a raw write of data to key over revision rev, carrying
// st, on the subject nats.go's KV would put it to through the same
// JetStream context (the hub's key holds that context's putPrefix).
func (s *Store) message(key string, data []byte, rev uint64, st keymsg.Stamp) *nats.Msg {
	m := nats.NewMsg(s.hub.key.api + s.hub.subject(key))
	m.Data = data
	st.Set(m.Header)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	return m
}

// Delete writes a delete marker over revision rev of key: with a payload, a
// raw one carrying it (a release mark); otherwise the KV API's. It reports
// whether the payload went.
func (s *Store) Delete(ctx context.Context, key string, rev uint64, payload []byte, st keymsg.Stamp) (bool, error) {
	leave, err := s.hub.gate.enter(ctx, Writes)
	if err != nil {
		return false, err
	}
	defer leave()
	if len(payload) == 0 {
		return false, s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	}
	m := s.message(key, payload, rev, st)
	m.Header.Set(keymsg.OperationHeader, "DEL")
	_, err = s.publish(ctx, m)
	return true, err
}

// Latest returns the key's latest message, markers included (read from the
// stream: the KV API's Get hides them), nil when it has none.
func (s *Store) Latest(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	leave, err := s.hub.gate.enter(ctx, Routine)
	if err != nil {
		return nil, err
	}
	defer leave()
	st, err := s.hub.openStream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.hub.subject(key))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return keymsg.EntryOf(s.kv.Bucket(), key, m.Data, m.Header, m.Sequence, m.Time), nil
}

// Watch follows key through the process's shared watches (see
// watchHub.subscribe); the watcher also has Err and Restart (see hubWatch).
func (s *Store) Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error) {
	s.mu.Lock()
	ttl := s.ttl
	s.mu.Unlock()
	return s.hub.subscribe(ctx, key, ttl)
}

// errCodeMessageTTLDisabled is the JetStream error code for a per-message
// TTL on a stream that does not allow them (nats.go names no constant).
const errCodeMessageTTLDisabled jetstream.ErrorCode = 10166

// StreamCreated returns when the stream behind a bucket's status was
// created (made again, not restarted), or zero when the status does not say.
func StreamCreated(st jetstream.KeyValueStatus) time.Time {
	if bs, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo }); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().Created
	}
	return time.Time{}
}

// readStored reads an acknowledgement {"stream":"<name>","seq":<N>…}; ok
// is false for any other shape.
func readStored(data []byte) (seq uint64, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"stream":`))
	if !ok {
		return 0, false
	}
	name, rest, ok := cutString(rest)
	if !ok || len(name) == 0 {
		return 0, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return 0, false
	}
	seq, rest, ok = cutUint(rest)
	return seq, ok && len(rest) > 0 && (rest[0] == '}' || rest[0] == ',')
}

// readRefusal reads a refusal {"error":{"code":N,"err_code":M,
// "description":"<text>"}}; ok is false for any other shape.
func readRefusal(data []byte) (apiErr *jetstream.APIError, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"error":{"code":`))
	if !ok {
		return nil, false
	}
	code, rest, ok := cutUint(rest)
	if !ok || code > 999 {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"err_code":`)); !ok {
		return nil, false
	}
	errCode, rest, ok := cutUint(rest)
	if !ok || errCode > 65535 {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"description":`)); !ok {
		return nil, false
	}
	desc, rest, ok := cutString(rest)
	if !ok || !bytes.Equal(rest, []byte("}}")) {
		return nil, false
	}
	return &jetstream.APIError{Code: int(code), ErrorCode: jetstream.ErrorCode(errCode), Description: string(desc)}, true
}

// cutString cuts a JSON string without escapes off the front of b: its
// contents and what follows; ok is false for anything else.
func cutString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	end := bytes.IndexByte(b[1:], '"')
	if end < 0 || bytes.IndexByte(b[1:1+end], '\\') >= 0 {
		return nil, b, false
	}
	return b[1 : 1+end], b[2+end:], true
}

// cutUint cuts a JSON unsigned integer of at most 19 digits (no overflow)
// off the front of b; ok is false for anything else.
func cutUint(b []byte) (n uint64, rest []byte, ok bool) {
	i := 0
	for ; i < len(b) && i < 19 && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + uint64(b[i]-'0')
	}
	if i == 0 || i < len(b) && b[i] >= '0' && b[i] <= '9' {
		return 0, b, false
	}
	return n, b[i:], true
}
