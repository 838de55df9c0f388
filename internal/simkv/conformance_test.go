package simkv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/simkv"
)

// The conformance tests run scripted operations against a real in-process
// nats-server, written the way providers/election/streams writes the
// election bucket, and against a simkv.Bucket, and compare what each
// returns. The simulated clock follows the wall clock (now is time.Now()
// at each call), so the expiry steps can check the server's timing against
// the model's: the model expires exactly (no lateness), the server within
// the bounds the package documents.

const (
	// writtenSlack is how far a message's server timestamp, or a stream's
	// creation time, may be from the wall-clock time the model was given
	// for the same operation.
	writtenSlack = 250 * time.Millisecond
	// pollEvery is how often the waits look again.
	pollEvery = 10 * time.Millisecond
	// msgTTLLate bounds how late the server expires a message by its
	// per-message TTL; maxAgeLate how late by MaxAge.
	msgTTLLate = 300 * time.Millisecond
	maxAgeLate = 1500 * time.Millisecond
)

// realBucket is a bucket on a real nats-server: the election bucket,
// unless a test needs a second one.
type realBucket struct {
	t      *testing.T
	ctx    context.Context
	name   string
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

// subject is key's subject in the bucket's stream.
func (r *realBucket) subject(key string) string { return "$KV." + r.name + "." + key }

func startReal(t *testing.T, ttl time.Duration, allowMsgTTL bool) *realBucket {
	t.Helper()
	srv := natstest.Start(t, &server.Options{JetStream: true})
	// A watch of a deleted bucket reports its end through the connection's
	// error handler, which otherwise prints it.
	_, js := natstest.Connect(t, srv.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := &realBucket{t: t, ctx: ctx, name: bucket.Name, js: js}
	r.create(ttl, allowMsgTTL)
	return r
}

// another makes a second bucket, called name, on r's server.
func (r *realBucket) another(name string, ttl time.Duration, allowMsgTTL bool) *realBucket {
	r.t.Helper()
	o := &realBucket{t: r.t, ctx: r.ctx, name: name, js: r.js}
	o.create(ttl, allowMsgTTL)
	return o
}

func (r *realBucket) remove() {
	r.t.Helper()
	if err := r.js.DeleteKeyValue(r.ctx, r.name); err != nil {
		r.t.Fatalf("deleting bucket %s: %v", r.name, err)
	}
}

// create makes the bucket with the KV API, history 1, and turns per-message
// TTLs on as the broker does (the KV API cannot without limit markers).
func (r *realBucket) create(ttl time.Duration, allowMsgTTL bool) {
	r.t.Helper()
	kv, err := r.js.CreateKeyValue(r.ctx, jetstream.KeyValueConfig{Bucket: r.name, TTL: ttl, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		r.t.Fatalf("creating the bucket: %v", err)
	}
	st, err := r.js.Stream(r.ctx, "KV_"+r.name)
	if err != nil {
		r.t.Fatal(err)
	}
	if allowMsgTTL {
		cfg := st.CachedInfo().Config
		cfg.AllowMsgTTL = true
		if st, err = r.js.UpdateStream(r.ctx, cfg); err != nil {
			r.t.Fatalf("allowing per-message TTLs: %v", err)
		}
	}
	r.kv, r.stream = kv, st
}

// publish writes as the election's transport.Store does: a raw publish
// with the expected last subject sequence and, when msgTTL > 0, a
// per-message TTL.
func (r *realBucket) publish(key string, data []byte, op string, expect uint64, msgTTL time.Duration) (uint64, error) {
	m := nats.NewMsg(r.subject(key))
	m.Data = data
	if op != "" {
		m.Header.Set("KV-Operation", op)
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(expect)}
	if msgTTL > 0 {
		opts = append(opts, jetstream.WithMsgTTL(msgTTL))
	}
	ack, err := r.js.PublishMsg(r.ctx, m, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (r *realBucket) latest(key string) (*simkv.Msg, error) {
	m, err := r.stream.GetLastMsgForSubject(r.ctx, r.subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &simkv.Msg{Key: key, Value: m.Data, Op: opOf(m.Header.Get("KV-Operation")), Revision: m.Sequence, Written: m.Time, TTL: ttlOf(m.Header.Get(jetstream.MsgTTLHeader))}, nil
}

// ttlOf reads a Nats-TTL header as nats.go writes it (a duration) in whole
// seconds, as the server counts it; 0 when there is none.
func ttlOf(hdr string) time.Duration {
	d, err := time.ParseDuration(hdr)
	if err != nil {
		return 0
	}
	return d.Truncate(time.Second)
}

func opOf(hdr string) simkv.Op {
	switch hdr {
	case "DEL":
		return simkv.Delete
	case "PURGE":
		return simkv.Purge
	}
	return simkv.Put
}

func (r *realBucket) status() (time.Duration, time.Time, error) {
	info, err := r.stream.Info(r.ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	return info.Config.MaxAge, info.Created, nil
}

// setTTL changes the stream's MaxAge, with the duplicate window the KV API
// gives that TTL (the server refuses one longer than MaxAge).
func (r *realBucket) setTTL(ttl time.Duration) {
	r.t.Helper()
	info, err := r.stream.Info(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxAge, cfg.Duplicates = ttl, min(ttl, 2*time.Minute)
	if _, err := r.js.UpdateStream(r.ctx, cfg); err != nil {
		r.t.Fatalf("setting the TTL: %v", err)
	}
}

// realWatch collects what a kv.Watch delivers.
type realWatch struct {
	w        jetstream.KeyWatcher
	mu       sync.Mutex
	got      []simkv.Delivery
	at       []time.Time
	closedAt time.Time // zero while open
}

func (r *realBucket) watch(key string) (*realWatch, error) {
	w, err := r.kv.Watch(r.ctx, key)
	if err != nil {
		return nil, err
	}
	rw := &realWatch{w: w}
	go func() {
		for e := range w.Updates() {
			d := simkv.Delivery{InitialDone: true}
			if e != nil {
				op := simkv.Put
				switch e.Operation() {
				case jetstream.KeyValueDelete:
					op = simkv.Delete
				case jetstream.KeyValuePurge:
					op = simkv.Purge
				}
				d = simkv.Delivery{Msg: &simkv.Msg{Key: e.Key(), Value: e.Value(), Op: op, Revision: e.Revision(), Written: e.Created()}}
			}
			rw.mu.Lock()
			rw.got, rw.at = append(rw.got, d), append(rw.at, time.Now())
			rw.mu.Unlock()
		}
		rw.mu.Lock()
		rw.closedAt = time.Now()
		rw.mu.Unlock()
	}()
	r.t.Cleanup(func() { _ = w.Stop() })
	return rw, nil
}

func (rw *realWatch) snapshot() ([]simkv.Delivery, []time.Time, time.Time) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]simkv.Delivery(nil), rw.got...), append([]time.Time(nil), rw.at...), rw.closedAt
}

// kind maps an error of the real server to the model's error it stands for;
// unknown errors stay as they are, and then match nothing.
func kind(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return simkv.ErrWrongRevision
		case 10166:
			return simkv.ErrMsgTTLDisabled
		case 10165:
			return simkv.ErrInvalidMsgTTL
		case jetstream.JSErrCodeStreamNotFound:
			return simkv.ErrNoBucket
		}
	}
	for _, gone := range []error{jetstream.ErrNoStreamResponse, nats.ErrNoResponders, jetstream.ErrStreamNotFound,
		nats.ErrStreamNotFound, jetstream.ErrBucketNotFound, nats.ErrBucketNotFound} {
		if errors.Is(err, gone) {
			return simkv.ErrNoBucket
		}
	}
	return err
}

// simKind is the sentinel a model error wraps.
func simKind(err error) error {
	for _, k := range []error{simkv.ErrWrongRevision, simkv.ErrNoBucket, simkv.ErrMsgTTLDisabled, simkv.ErrInvalidMsgTTL} {
		if errors.Is(err, k) {
			return k
		}
	}
	return err
}

// sameMsg describes how a real message differs from the model's; "" when
// they agree (Written within writtenSlack).
func sameMsg(real, sim *simkv.Msg) string {
	switch {
	case real == nil && sim == nil:
		return ""
	case real == nil || sim == nil:
		return fmt.Sprintf("server %s, model %s", describe(real), describe(sim))
	case real.Key != sim.Key || real.Op != sim.Op || real.Revision != sim.Revision || !bytes.Equal(real.Value, sim.Value) || real.TTL != sim.TTL:
		return fmt.Sprintf("server %s, model %s", describe(real), describe(sim))
	case absDiff(real.Written, sim.Written) > writtenSlack:
		return fmt.Sprintf("server wrote %s at %v, model at %v", describe(real), real.Written, sim.Written)
	}
	return ""
}

func describe(m *simkv.Msg) string {
	if m == nil {
		return "none"
	}
	if m.TTL > 0 {
		return fmt.Sprintf("%s %s %q r%d ttl %v", m.Key, m.Op, m.Value, m.Revision, m.TTL)
	}
	return fmt.Sprintf("%s %s %q r%d", m.Key, m.Op, m.Value, m.Revision)
}

func describeAll(ds []simkv.Delivery) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		if d.InitialDone {
			parts[i] = "<nil>"
		} else {
			parts[i] = fmt.Sprintf("%s %q r%d", d.Msg.Op, d.Msg.Value, d.Msg.Revision)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func absDiff(a, b time.Time) time.Duration {
	if d := a.Sub(b); d >= 0 {
		return d
	}
	return b.Sub(a)
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(pollEvery)
	}
}

// conf runs a script on both buckets.
type conf struct {
	t       *testing.T
	r       *realBucket
	s       *simkv.Bucket
	watches []*watchPair
}

// watchPair is a watch of each, with what the model's delivered so far.
type watchPair struct {
	name string
	r    *realWatch
	s    *simkv.Watcher
	sGot []simkv.Delivery
}

func newConf(t *testing.T, ttl time.Duration, allowMsgTTL bool) *conf {
	r := startReal(t, ttl, allowMsgTTL)
	return &conf{t: t, r: r, s: simkv.New(time.Now(), ttl, allowMsgTTL)}
}

// agree fails the test unless the two errors are of one kind.
func (c *conf) agree(what string, realErr, simErr error) error {
	c.t.Helper()
	rk, sk := kind(realErr), simKind(simErr)
	if rk != sk {
		c.t.Fatalf("%s: server error %v, model error %v", what, realErr, simErr)
	}
	return sk
}

// write runs a write on both and checks that they agree; it returns the
// revision and the kind of error.
func (c *conf) write(what string, real func() (uint64, error), sim func(now time.Time) (uint64, error)) (uint64, error) {
	c.t.Helper()
	now := time.Now()
	rr, rerr := real()
	sr, serr := sim(now)
	err := c.agree(what, rerr, serr)
	if rr != sr {
		c.t.Fatalf("%s: server revision %d, model revision %d", what, rr, sr)
	}
	// Let the server's watches take the message in before anything else
	// happens: one replaced before its watch's consumer sends it is
	// skipped (see TestConformanceWatchSkipsReplacedMessages).
	c.checkWatches(what)
	return rr, err
}

func (c *conf) put(key, value string, expect uint64, msgTTL time.Duration) (uint64, error) {
	c.t.Helper()
	return c.write(fmt.Sprintf("put %s %q over r%d (TTL %v)", key, value, expect, msgTTL),
		func() (uint64, error) { return c.r.publish(key, []byte(value), "", expect, msgTTL) },
		func(now time.Time) (uint64, error) { return c.s.Put(now, key, []byte(value), expect, msgTTL) })
}

func (c *conf) del(key string, expect uint64, payload string) (uint64, error) {
	c.t.Helper()
	return c.write(fmt.Sprintf("delete %s over r%d with %q", key, expect, payload),
		func() (uint64, error) { return c.r.publish(key, []byte(payload), "DEL", expect, 0) },
		func(now time.Time) (uint64, error) { return c.s.Delete(now, key, expect, []byte(payload)) })
}

// purge purges key with kv.Purge; the revision of its marker is read back.
func (c *conf) purge(key string) (uint64, error) {
	c.t.Helper()
	return c.write("kv.Purge "+key,
		func() (uint64, error) {
			if err := c.r.kv.Purge(c.r.ctx, key); err != nil {
				return 0, err
			}
			m, err := c.r.latest(key)
			if err != nil || m == nil {
				c.t.Fatalf("reading the purge marker back: %v, %v", m, err)
			}
			return m.Revision, nil
		},
		func(now time.Time) (uint64, error) {
			if rev := c.s.Purge(now, key); rev != 0 {
				return rev, nil
			}
			return 0, simkv.ErrNoBucket
		})
}

// vanish purges key's subject from the stream, as `nats stream purge
// --subject` does.
func (c *conf) vanish(key string) {
	c.t.Helper()
	now := time.Now()
	if err := c.r.stream.Purge(c.r.ctx, jetstream.WithPurgeSubject(c.r.subject(key))); err != nil {
		c.t.Fatalf("stream purge of %s: %v", key, err)
	}
	c.s.Vanish(now, key)
}

// latest reads key on both and checks that they agree.
func (c *conf) latest(key string) (real, sim *simkv.Msg, err error) {
	c.t.Helper()
	now := time.Now()
	real, rerr := c.r.latest(key)
	sim, serr := c.s.Latest(now, key)
	err = c.agree("latest "+key, rerr, serr)
	if d := sameMsg(real, sim); d != "" {
		c.t.Fatalf("latest %s: %s", key, d)
	}
	return real, sim, err
}

// want fails unless key's latest message on both is rev with op and value
// (rev 0: none).
func (c *conf) want(key string, rev uint64, op simkv.Op, value string) {
	c.t.Helper()
	real, _, err := c.latest(key)
	switch {
	case err != nil:
		c.t.Fatalf("latest %s: %v", key, err)
	case rev == 0 && real != nil:
		c.t.Fatalf("latest %s: %s, want none", key, describe(real))
	case rev != 0 && (real == nil || real.Revision != rev || real.Op != op || string(real.Value) != value):
		c.t.Fatalf("latest %s: %s, want %s %s %q r%d", key, describe(real), key, op, value, rev)
	}
}

func (c *conf) status() (time.Duration, time.Time, error) {
	c.t.Helper()
	now := time.Now()
	rttl, rcreated, rerr := c.r.status()
	sttl, screated, serr := c.s.Status(now)
	err := c.agree("status", rerr, serr)
	if err == nil && (rttl != sttl || absDiff(rcreated, screated) > writtenSlack) {
		c.t.Fatalf("status: server TTL %v created %v, model TTL %v created %v", rttl, rcreated, sttl, screated)
	}
	return rttl, rcreated, err
}

func (c *conf) setTTL(ttl time.Duration) {
	c.t.Helper()
	now := time.Now()
	c.r.setTTL(ttl)
	c.s.SetTTL(now, ttl)
}

func (c *conf) watch(name, key string) (*watchPair, error) {
	c.t.Helper()
	now := time.Now()
	rw, rerr := c.r.watch(key)
	sw, serr := c.s.Watch(now, key)
	if err := c.agree("watch "+key, rerr, serr); err != nil {
		return nil, err
	}
	p := &watchPair{name: name, r: rw, s: sw}
	c.watches = append(c.watches, p)
	c.checkWatches("watch " + name)
	return p, nil
}

// checkWatches waits until each real watch has delivered as much as its
// model has, and compares the two.
func (c *conf) checkWatches(when string) {
	c.t.Helper()
	for _, p := range c.watches {
		for d, ok := p.s.Next(); ok; d, ok = p.s.Next() {
			p.sGot = append(p.sGot, d)
		}
		var got []simkv.Delivery
		deadline := time.Now().Add(5 * time.Second)
		for got, _, _ = p.r.snapshot(); len(got) < len(p.sGot); got, _, _ = p.r.snapshot() {
			if time.Now().After(deadline) {
				c.t.Fatalf("%s: watch %s: the server delivered %s, not within 5 s what the model did: %s", when, p.name, describeAll(got), describeAll(p.sGot))
			}
			time.Sleep(pollEvery)
		}
		if !sameDeliveries(got, p.sGot) {
			c.t.Fatalf("%s: watch %s: server delivered %s, model %s", when, p.name, describeAll(got), describeAll(p.sGot))
		}
	}
}

func sameDeliveries(real, sim []simkv.Delivery) bool {
	if len(real) != len(sim) {
		return false
	}
	for i := range real {
		if real[i].InitialDone != sim[i].InitialDone || sameMsg(real[i].Msg, withoutTTL(sim[i].Msg)) != "" {
			return false
		}
	}
	return true
}

// withoutTTL is m as nats.go's KV watch delivers it: without headers, so
// without its own TTL.
func withoutTTL(m *simkv.Msg) *simkv.Msg {
	if m == nil || m.TTL == 0 {
		return m
	}
	c := *m
	c.TTL = 0
	return &c
}

// gone is a message whose expiry a wait follows.
type gone struct {
	key string
	rev uint64
	// serverFrom and serverBy bound when the server may remove it.
	serverFrom, serverBy time.Time
	// modelAt is when the model removes it.
	modelAt time.Time

	serverGone, modelGone bool
}

// waitGone polls the keys of gs on both until every message is gone from
// both, checking that the server removes each within its bounds and the
// model at its time exactly.
func (c *conf) waitGone(what string, gs ...*gone) {
	c.t.Helper()
	var last time.Time
	for _, g := range gs {
		if g.serverBy.After(last) {
			last = g.serverBy
		}
	}
	deadline := last.Add(500 * time.Millisecond)
	for {
		all := true
		for _, g := range gs {
			if !g.serverGone {
				before := time.Now()
				m, err := c.r.latest(g.key)
				after := time.Now()
				if err != nil {
					c.t.Fatalf("%s: reading %s: %v", what, g.key, err)
				}
				if m == nil || m.Revision != g.rev {
					if m != nil {
						c.t.Fatalf("%s: %s replaced by %s while it waited to expire", what, g.key, describe(m))
					}
					if after.Before(g.serverFrom) {
						c.t.Fatalf("%s: the server removed %s r%d %v before it was due", what, g.key, g.rev, g.serverFrom.Sub(after))
					}
					g.serverGone = true
					c.t.Logf("%s: the server removed %s r%d by %v after it was due", what, g.key, g.rev, after.Sub(g.serverFrom).Round(time.Millisecond))
				} else if before.After(g.serverBy) {
					c.t.Fatalf("%s: the server still had %s r%d %v after it was due to be gone", what, g.key, g.rev, before.Sub(g.serverBy))
				}
			}
			if !g.modelGone {
				now := time.Now()
				m, err := c.s.Latest(now, g.key)
				if err != nil {
					c.t.Fatal(err)
				}
				g.modelGone = m == nil
				if g.modelGone != !now.Before(g.modelAt) {
					c.t.Fatalf("%s: at %v past its expiry the model has %s (gone %v)", what, now.Sub(g.modelAt), describe(m), g.modelGone)
				}
			}
			all = all && g.serverGone && g.modelGone
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not all gone by the deadline", what)
		}
		time.Sleep(pollEvery)
	}
}

// TestConformance runs the script. Steps that wait for expiries check the
// server's timing against the model's bounds.
func TestConformance(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := newConf(t, 10*time.Second, true)
	const e, f = "e", "f"

	// A watch of a key with no message: only the end of initial values.
	c.watch("we", e)

	// Create, create again, renewals.
	if rev, err := c.put(e, "alice", 0, 0); err != nil || rev != 1 {
		t.Fatalf("create: r%d %v", rev, err)
	}
	if _, err := c.put(e, "bob", 0, 0); err != simkv.ErrWrongRevision {
		t.Fatalf("create over an existing value: %v", err)
	}
	if rev, err := c.put(e, "alice", 1, 0); err != nil || rev != 2 {
		t.Fatalf("renewal: r%d %v", rev, err)
	}
	if _, err := c.put(e, "alice", 1, 0); err != simkv.ErrWrongRevision {
		t.Fatalf("renewal over a stale revision: %v", err)
	}
	// A second key shares the stream's revisions.
	if rev, err := c.put(f, "carol", 0, 0); err != nil || rev != 3 {
		t.Fatalf("create of a second key: r%d %v", rev, err)
	}
	c.want(e, 2, simkv.Put, "alice")
	c.checkWatches("writes")

	// Release markers with a payload, over a stale and the right revision;
	// writes over the marker.
	if _, err := c.del(e, 1, "released by alice"); err != simkv.ErrWrongRevision {
		t.Fatalf("release over a stale revision: %v", err)
	}
	if rev, err := c.del(e, 2, "released by alice"); err != nil || rev != 4 {
		t.Fatalf("release: r%d %v", rev, err)
	}
	c.want(e, 4, simkv.Delete, "released by alice")
	if _, err := c.put(e, "bob", 0, 0); err != simkv.ErrWrongRevision {
		t.Fatalf("create over a delete marker: %v", err)
	}
	if rev, err := c.put(e, "bob", 4, 0); err != nil || rev != 5 {
		t.Fatalf("write over the marker's revision: r%d %v", rev, err)
	}
	// A watch that starts on a marker gets it first.
	if _, err := c.del(f, 3, ""); err != nil {
		t.Fatal(err)
	}
	c.watch("wf", f)
	c.checkWatches("release markers")

	// kv.Purge: a purge marker, no revision check.
	if rev, err := c.purge(e); err != nil || rev != 7 {
		t.Fatalf("purge: r%d %v", rev, err)
	}
	c.want(e, 7, simkv.Purge, "")
	if _, err := c.put(e, "carol", 5, 0); err != simkv.ErrWrongRevision {
		t.Fatalf("write over the purged revision: %v", err)
	}
	if rev, err := c.put(e, "carol", 7, 0); err != nil || rev != 8 {
		t.Fatalf("write over the purge marker: r%d %v", rev, err)
	}

	// The subject purged from the stream: no marker, revisions go on, the
	// key takes a create again, watches see nothing.
	c.vanish(e)
	c.want(e, 0, 0, "")
	if _, err := c.put(e, "dave", 8, 0); err != simkv.ErrWrongRevision {
		t.Fatalf("write over the vanished revision: %v", err)
	}
	if rev, err := c.put(e, "dave", 0, 0); err != nil || rev != 9 {
		t.Fatalf("create after the key vanished: r%d %v", rev, err)
	}
	c.watch("we2", e)
	c.checkWatches("purges")

	// Per-message TTLs: under a second refused after the revision check.
	if _, err := c.put(e, "dave", 3, 500*time.Millisecond); err != simkv.ErrWrongRevision {
		t.Fatalf("sub-second TTL over a wrong revision: %v", err)
	}
	if _, err := c.put(e, "dave", 9, 500*time.Millisecond); err != simkv.ErrInvalidMsgTTL {
		t.Fatalf("sub-second TTL: %v", err)
	}
	ttl, created, err := c.status()
	if err != nil || ttl != 10*time.Second {
		t.Fatalf("status: %v %v", ttl, err)
	}

	// Per-message TTL expiry: 1.5 s counts as 1 s; exact in the model,
	// within msgTTLLate on the server.
	rev, err := c.put(e, "dave", 9, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	real, sim, _ := c.latest(e)
	c.waitGone("per-message TTL", &gone{key: e, rev: rev,
		serverFrom: real.Written.Add(time.Second), serverBy: real.Written.Add(time.Second + msgTTLLate),
		modelAt: sim.Written.Add(time.Second)})
	c.want(e, 0, 0, "")
	c.checkWatches("per-message TTL expiry")

	// The TTL lowered below the age of f's marker, stored under a 10 s TTL:
	// the server expires it at the update.
	fReal, _, _ := c.latest(f)
	time.Sleep(time.Until(fReal.Written.Add(2200 * time.Millisecond)))
	setAt := time.Now()
	c.setTTL(2 * time.Second)
	setDone := time.Now()
	c.waitGone("TTL lowered", &gone{key: f, rev: fReal.Revision,
		serverFrom: fReal.Written.Add(2 * time.Second), serverBy: setDone.Add(writtenSlack), modelAt: setAt})

	// MaxAge expiry of a value, of a value whose own TTL is longer than
	// MaxAge (MaxAge wins), and of a delete marker.
	if rev, err = c.put(e, "erin", 0, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	eReal, eSim, _ := c.latest(e)
	if _, err = c.put("g", "frank", 0, 0); err != nil {
		t.Fatal(err)
	}
	gReal, gSim, _ := c.latest("g")
	if _, err = c.del("h", 0, "released by grace"); err != nil {
		t.Fatal(err)
	}
	hReal, hSim, _ := c.latest("h")
	c.checkWatches("writes before MaxAge expiry")
	byMaxAge := func(key string, real, sim *simkv.Msg) *gone {
		due := real.Written.Add(2 * time.Second)
		return &gone{key: key, rev: real.Revision, serverFrom: due, serverBy: due.Add(maxAgeLate), modelAt: sim.Written.Add(2 * time.Second)}
	}
	c.waitGone("MaxAge", byMaxAge(e, eReal, eSim), byMaxAge("g", gReal, gSim), byMaxAge("h", hReal, hSim))
	c.checkWatches("MaxAge expiry")

	// The TTL raised: a stored message lives by the new one.
	if rev, err = c.put(e, "heidi", 0, 0); err != nil {
		t.Fatal(err)
	}
	kReal, kSim, _ := c.latest(e)
	time.Sleep(time.Until(kReal.Written.Add(500 * time.Millisecond)))
	c.setTTL(3 * time.Second)
	c.waitGone("raised TTL", &gone{key: e, rev: rev,
		serverFrom: kReal.Written.Add(3 * time.Second), serverBy: kReal.Written.Add(3*time.Second + maxAgeLate),
		modelAt: kSim.Written.Add(3 * time.Second)})
	c.checkWatches("raised TTL")

	// The bucket deleted: every call fails; then made again without
	// per-message TTLs: revisions start at 1, the creation time is new,
	// old watches deliver nothing more.
	removedAt := time.Now()
	c.r.remove()
	c.s.Remove(removedAt)
	if _, err := c.put(e, "ivan", 0, 0); err != simkv.ErrNoBucket {
		t.Fatalf("write to a deleted bucket: %v", err)
	}
	if _, err := c.del(e, 0, "x"); err != simkv.ErrNoBucket {
		t.Fatalf("delete in a deleted bucket: %v", err)
	}
	if _, err := c.purge(e); err != simkv.ErrNoBucket {
		t.Fatalf("purge in a deleted bucket: %v", err)
	}
	if _, _, err := c.latest(e); err != simkv.ErrNoBucket {
		t.Fatalf("read of a deleted bucket: %v", err)
	}
	if _, _, err := c.status(); err != simkv.ErrNoBucket {
		t.Fatalf("status of a deleted bucket: %v", err)
	}
	if _, err := c.watch("gone", e); err != simkv.ErrNoBucket {
		t.Fatalf("watch of a deleted bucket: %v", err)
	}
	time.Sleep(10 * time.Millisecond) // a creation time the server can tell from the old one
	now := time.Now()
	c.r.create(2*time.Second, false)
	c.s.Recreate(now, 2*time.Second, false)
	_, created2, err := c.status()
	if err != nil || !created2.After(created) {
		t.Fatalf("status of the recreated bucket: created %v (was %v), %v", created2, created, err)
	}
	if rev, err := c.put(e, "ivan", 0, 0); err != nil || rev != 1 {
		t.Fatalf("create in the recreated bucket: r%d %v", rev, err)
	}
	if _, err := c.put(e, "judy", 5, time.Second); err != simkv.ErrMsgTTLDisabled {
		t.Fatalf("TTL in a bucket without them, over a wrong revision: %v", err)
	}
	if _, err := c.put(e, "judy", 5, 500*time.Millisecond); err != simkv.ErrWrongRevision {
		t.Fatalf("sub-second TTL in a bucket without them, over a wrong revision: %v", err)
	}
	if _, err := c.put(e, "judy", 1, 500*time.Millisecond); err != simkv.ErrInvalidMsgTTL {
		t.Fatalf("sub-second TTL in a bucket without them: %v", err)
	}
	c.watch("we3", e)
	if rev, err := c.del(e, 1, "released by ivan"); err != nil || rev != 2 {
		t.Fatalf("release in the recreated bucket: r%d %v", rev, err)
	}
	for _, p := range c.watches[:3] {
		if !p.s.Ended() {
			t.Fatalf("watch %s of the removed bucket has not ended in the model", p.name)
		}
	}
	c.checkWatches("recreated bucket")
	// Nothing more arrives. The model's old watches have ended; the
	// server's are silent, their channels open, until their client resets
	// them, no sooner than about 5 s after the removal
	// (TestConformanceWatchOfARemovedBucket).
	time.Sleep(300 * time.Millisecond)
	c.checkWatches("settled")
	for _, p := range c.watches[:3] {
		if _, _, closed := p.r.snapshot(); !closed.IsZero() {
			t.Fatalf("watch %s of the removed bucket closed %v after the removal", p.name, closed.Sub(removedAt))
		}
	}
	t.Logf("script ran in %v", time.Since(start))
}

// TestConformanceWatchOfARemovedBucket holds SetWatchReset to nats.go: a
// kv.Watch of a deleted bucket falls silent, and when its client resets it
// (about 20 s after it started, for a watch that delivered a message at
// once and whose bucket went soon after), it carries on in the bucket made
// again meanwhile from the revision after the last it delivered, or ends
// when there is none. Two buckets run side by side: the election bucket is
// made again after its removal, the other stays missing. The client picks
// the moments of the resets, so the model is run afterwards over the same
// operations at the same times, with the resets when the server's watches
// showed them.
func TestConformanceWatchOfARemovedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 20 s for nats.go to reset its watches")
	}
	t.Parallel()
	const ttl = time.Minute
	created := time.Now()
	again := &removal{t: t, r: startReal(t, ttl, false), created: created}
	missing := &removal{t: t, r: again.r.another("MISSING", ttl, false), created: created}
	for _, x := range []*removal{again, missing} {
		x.put("y", "y1", 0)
		for i := range 3 {
			x.erev = x.put("e", fmt.Sprint("e", i+1), x.erev) // r2 to r4
		}
	}
	watchedAt := time.Now()
	for _, x := range []*removal{again, missing} {
		x.watch(watchedAt)
	}
	for _, x := range []*removal{again, missing} {
		waitFor(t, 5*time.Second, "the initial values", func() bool {
			e, _, _ := x.we.snapshot()
			y, _, _ := x.wy.snapshot()
			return len(e) == 2 && len(y) == 2
		})
	}
	for _, x := range []*removal{again, missing} {
		x.removedAt = time.Now()
		x.r.remove()
		x.replay = append(x.replay, func(b *simkv.Bucket) { b.Remove(x.removedAt) })
	}

	time.Sleep(500 * time.Millisecond)
	recreatedAt := time.Now()
	again.r.create(ttl, false)
	again.replay = append(again.replay, func(b *simkv.Bucket) { b.Recreate(recreatedAt, ttl, false) })
	again.put("e", "new e1", 0) // r1, below the e watch's next revision (5)
	again.put("y", "new y1", 0) // r2, above the y watch's (2)

	// The y watch of the bucket made again shows its reset by delivering
	// y's latest message; the watches of the missing one end.
	waitFor(t, 25*time.Second, "the watches to reset", func() bool {
		y, _, _ := again.wy.snapshot()
		_, _, e := missing.we.snapshot()
		_, _, yc := missing.wy.snapshot()
		return len(y) > 2 && !e.IsZero() && !yc.IsZero()
	})
	_, at, _ := again.wy.snapshot()
	resetAt := at[2]
	// The e watch resets in the same check of its client: by 20 s after it
	// started.
	time.Sleep(time.Until(later(resetAt.Add(300*time.Millisecond), watchedAt.Add(21*time.Second))))
	again.resets = []time.Time{resetAt, resetAt}
	erev := uint64(1)
	for i := range 3 {
		erev = again.put("e", fmt.Sprint("new e", i+2), erev) // r3, r4 (below 5: not delivered), r5
	}
	again.put("y", "new y2", 2)
	waitFor(t, 5*time.Second, "the new messages", func() bool {
		e, _, _ := again.we.snapshot()
		y, _, _ := again.wy.snapshot()
		return len(e) == 3 && len(y) == 4
	})
	time.Sleep(100 * time.Millisecond) // nothing more
	_, _, e := missing.we.snapshot()
	_, _, y := missing.wy.snapshot()
	missing.resets = []time.Time{e, y}

	for _, x := range []*removal{again, missing} {
		x.compare()
	}
}

// removal is one bucket of TestConformanceWatchOfARemovedBucket.
type removal struct {
	t       *testing.T
	r       *realBucket
	created time.Time
	// replay holds the operations, run on the model afterwards at the
	// times they ran on the server.
	replay    []func(b *simkv.Bucket)
	erev      uint64
	we, wy    *realWatch
	models    []*simkv.Watcher
	removedAt time.Time
	resets    []time.Time // each watch's reset, in the order they were made
}

func (x *removal) put(key, value string, expect uint64) uint64 {
	x.t.Helper()
	now := time.Now()
	rev, err := x.r.publish(key, []byte(value), "", expect, 0)
	if err != nil {
		x.t.Fatalf("%s: put %s %q: %v", x.r.name, key, value, err)
	}
	x.replay = append(x.replay, func(b *simkv.Bucket) {
		if got, err := b.Put(now, key, []byte(value), expect, 0); err != nil || got != rev {
			x.t.Fatalf("%s: put %s %q: model r%d %v, server r%d", x.r.name, key, value, got, err, rev)
		}
	})
	return rev
}

func (x *removal) watch(now time.Time) {
	x.t.Helper()
	var err error
	if x.we, err = x.r.watch("e"); err != nil {
		x.t.Fatal(err)
	}
	if x.wy, err = x.r.watch("y"); err != nil {
		x.t.Fatal(err)
	}
	x.replay = append(x.replay, func(b *simkv.Bucket) {
		for _, key := range []string{"e", "y"} {
			w, err := b.Watch(now, key)
			if err != nil {
				x.t.Fatal(err)
			}
			x.models = append(x.models, w)
		}
	})
}

// compare runs the model and compares its watches with the server's.
func (x *removal) compare() {
	x.t.Helper()
	for i, at := range x.resets {
		d := at.Sub(x.removedAt)
		if d < 4*time.Second || d > 21*time.Second {
			x.t.Errorf("%s: watch %d reset %v after the removal, want about 5 to 20 s", x.r.name, i, d)
		}
		x.t.Logf("%s: watch %d reset %v after the removal", x.r.name, i, d)
	}
	resets := x.resets
	b := simkv.New(x.created, time.Minute, false)
	b.SetWatchReset(func() time.Duration {
		at := resets[0]
		resets = resets[1:]
		return at.Sub(x.removedAt)
	})
	for _, do := range x.replay {
		do(b)
	}
	b.Advance(time.Now())
	for i, real := range []*realWatch{x.we, x.wy} {
		var sim []simkv.Delivery
		for d, ok := x.models[i].Next(); ok; d, ok = x.models[i].Next() {
			sim = append(sim, d)
		}
		got, _, closed := real.snapshot()
		if !sameDeliveries(got, sim) {
			x.t.Errorf("%s: watch %d: server delivered %s, model %s", x.r.name, i, describeAll(got), describeAll(sim))
		}
		if x.models[i].Ended() != !closed.IsZero() {
			x.t.Errorf("%s: watch %d: server's closed %v, model's ended %v", x.r.name, i, !closed.IsZero(), x.models[i].Ended())
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
