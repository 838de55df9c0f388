package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/jsapi"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/internal/natsconn"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// session is a connection to a broker and the election bucket on it.
type session struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	bucket  string
	url     string // the server connected to, for messages
	timeout time.Duration
	api     string           // the JetStream API's subject prefix, with its final dot
	refused *refusals        // told of the requests the broker refuses
	stream  jetstream.Stream // the bucket's stream, once readRaw looked it up
}

// Close closes the connection.
func (s *session) Close() { s.nc.Close() }

// request returns a context bounding one request to the broker by --timeout.
func (s *session) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// open connects and opens the bucket. Errors say what to do. With
// co.wait, a broker that does not answer yet, or has no bucket or JetStream
// yet (it is starting), is waited for, saying so once; any other error
// returns at once.
func (e *elections) open(ctx context.Context, co connectOptions) (*session, error) {
	var waitingFor error // what is being waited for, once said
	began := time.Now()
	for attempt := 0; ; attempt++ {
		s, err := e.tryOpen(ctx, co)
		if err == nil {
			if waitingFor != nil {
				co.log.event("connected", nil, "connected to %s and opened bucket %s after waiting %v", s.url, s.bucket, human(time.Since(began)))
			}
			return s, nil
		}
		if !co.wait || co.log == nil || !notUpYet(err) || ctx.Err() != nil {
			return nil, err
		}
		if waitingFor == nil || errors.Is(err, errBucketNotYet) != errors.Is(waitingFor, errBucketNotYet) {
			co.log.event("waiting", nil, "waiting for the broker (retrying until it answers; Ctrl-C to stop): %v", err)
			waitingFor = err
		}
		if err := backoff.Sleep(ctx, natsconn.ReconnectDelay.Duration(attempt)); err != nil {
			return nil, err
		}
	}
}

// errBucketNotYet marks a broker that answers without the bucket, or
// without JetStream, for open's waiting (errors.Is); the error's text is
// the one it marks.
var errBucketNotYet = errors.New("bucket not there yet")

// bucketNotYet marks err as errBucketNotYet without changing its text.
type bucketNotYet struct{ err error }

func (e bucketNotYet) Error() string      { return e.err.Error() }
func (e bucketNotYet) Unwrap() error      { return e.err }
func (bucketNotYet) Is(target error) bool { return target == errBucketNotYet }

// notUpYet reports whether err from tryOpen may be a broker still starting:
// not answering, or answering without JetStream or the bucket.
func notUpYet(err error) bool {
	var (
		netErr  net.Error
		pathErr *fs.PathError
	)
	if errors.As(err, &pathErr) {
		return false // a file the connection needs: it will not appear by waiting
	}
	return errors.Is(err, errBucketNotYet) || errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrTimeout) || errors.As(err, &netErr)
}

// tryOpen connects and opens the bucket once.
func (e *elections) tryOpen(ctx context.Context, co connectOptions) (*session, error) {
	co.refused = newRefusals()
	nc, t, err := e.a.connect(ctx, co)
	if err != nil {
		return nil, err
	}
	s := &session{nc: nc, bucket: e.bucket, url: nc.ConnectedUrlRedacted(), timeout: e.a.conn.timeout, refused: co.refused}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	if err := s.openBucket(ctx, t); err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, nats.ErrNoResponders) {
			return nil, bucketNotYet{err}
		}
		return nil, err
	}
	return s, nil
}

func (s *session) openBucket(ctx context.Context, t *target) error {
	var err error
	switch {
	case t.ctx != nil && t.ctx.JSDomain != "":
		s.js, err = jetstream.NewWithDomain(s.nc, t.ctx.JSDomain)
	case t.ctx != nil && t.ctx.JSAPIPrefix != "":
		s.js, err = jetstream.NewWithAPIPrefix(s.nc, t.ctx.JSAPIPrefix)
	default:
		s.js, err = jetstream.New(s.nc)
	}
	if err != nil {
		return fmt.Errorf("JetStream on %s: %w", s.url, err)
	}
	s.api = jsapi.Prefix(s.js)
	rctx, cancel := s.request(ctx)
	defer cancel()
	before := denied.Last(s.nc)
	subject := s.api + "STREAM.INFO.KV_" + s.bucket
	stop := s.cancelOnRefusal(cancel, before, subject)
	s.kv, err = s.js.KeyValue(rctx, s.bucket)
	stop()
	if err == nil {
		return nil
	}
	err = denied.Explain(s.nc, err, before, "opening bucket "+s.bucket, subject)
	switch {
	case errors.Is(err, denied.ErrPermissionDenied):
		return fmt.Errorf("on %s: %w", s.url, err)
	case errors.Is(err, jetstream.ErrBucketNotFound):
		if s.bucket == bucket.Name {
			return fmt.Errorf("bucket %s not found on %s: brokers with plugin.choria.broker_network = true create it (`conclave broker run`, or a Choria broker); on another NATS server create it with `nats kv add %s --ttl 1m --history 1`: %w", s.bucket, s.url, s.bucket, err)
		}
		return fmt.Errorf("bucket %s not found on %s: check --bucket, or create it with `nats kv add %s --ttl 1m --history 1`: %w", s.bucket, s.url, s.bucket, err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("JetStream is not enabled on %s (for this account): the election bucket lives in JetStream: connect to a Conclave or Choria broker, or a NATS server run with JetStream (nats-server -js): %w", s.url, err)
	case errors.Is(err, jetstream.ErrBadBucket):
		return fmt.Errorf("stream KV_%s on %s is not a key-value bucket: %w", s.bucket, s.url, err)
	case errors.Is(err, jetstream.ErrInvalidBucketName):
		return fmt.Errorf("--bucket %q is not a bucket name: use letters, digits, - and _: %w", s.bucket, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("JetStream on %s did not answer within %v (--timeout): %w", s.url, s.timeout, err)
	}
	return fmt.Errorf("opening bucket %s on %s: %w", s.bucket, s.url, err)
}

// errProbe stands for a request's failure when asking denied.Explain
// whether the broker refused it.
var errProbe = errors.New("no answer")

// cancelOnRefusal calls cancel as soon as the broker refuses the
// connection's user a request to one of subjects (as denied.Explain judges
// it; before is denied.Last from before the request), rather than leaving
// the request to wait out --timeout. Call stop once the request has
// returned; it waits for the watching to end.
func (s *session) cancelOnRefusal(cancel context.CancelFunc, before error, subjects ...string) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			next := s.refused.next()
			if errors.Is(denied.Explain(s.nc, errProbe, before, "", subjects...), denied.ErrPermissionDenied) {
				cancel()
				return
			}
			select {
			case <-next:
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// status reads the bucket's settings.
func (s *session) status(ctx context.Context) (*jetstream.KeyValueBucketStatus, error) {
	rctx, cancel := s.request(ctx)
	defer cancel()
	st, err := s.kv.Status(rctx)
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s on %s: %w", s.bucket, s.url, err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, fmt.Errorf("bucket %s on %s: unexpected status type %T", s.bucket, s.url, st)
	}
	return bs, nil
}

// record is an election key's latest message, read as an election by
// streams.ReadEntry: the one home of what a message means (held, released
// by its holder, removed, absent), shared with candidates and observers.
type record = streams.Entry

// stateText says what a record's state is in a word or three: "held",
// "released by X", "removed".
func stateText(r record) string {
	if r.State == streams.KeyReleased {
		return "released by " + r.ReleasedBy
	}
	return r.State.String()
}

// readRecords returns the latest message of every key matching filter (">"
// for all of them), markers included, sorted by key. It reads them through a
// watch because a plain Get hides delete markers.
//
// A broker that refuses the watch to the connection's user does not answer;
// the error then matches denied.ErrPermissionDenied and names the subject,
// rather than saying that the broker did not answer in time.
func (s *session) readRecords(ctx context.Context, filter string) ([]record, error) {
	rctx, cancel := s.request(ctx)
	defer cancel()
	before := denied.Last(s.nc)
	stop := s.cancelOnRefusal(cancel, before, s.watchSubject(filter))
	w, err := s.kv.Watch(rctx, filter)
	stop()
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s on %s: %w", s.bucket, s.url, s.explainWatch(err, before, filter))
	}
	defer kvwatch.Stop(w)
	var recs []record
	for {
		select {
		case <-rctx.Done():
			return nil, fmt.Errorf("reading bucket %s on %s: no answer within %v (--timeout): %w", s.bucket, s.url, s.timeout, rctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("reading bucket %s on %s: the watch ended early", s.bucket, s.url)
			}
			if ent == nil {
				slices.SortFunc(recs, func(a, b record) int { return strings.Compare(a.Key, b.Key) })
				return recs, nil
			}
			recs = append(recs, streams.ReadEntry(ent))
		}
	}
}

// explainWatch explains err, from creating a watch of the keys matching
// filter, as denied.ErrPermissionDenied when the broker refused it to the
// connection's user (see denied.Explain; before is denied.Last before the
// watch was asked for). The consumer's name in the refused subject is
// random, hence the *.
func (s *session) explainWatch(err, before error, filter string) error {
	what := "reading election " + filter
	if isPattern(filter) {
		what = "reading the elections matching " + filter
	}
	return denied.Explain(s.nc, err, before, what, s.watchSubject(filter))
}

// watchSubject is the subject of the request creating a watch of filter,
// with * for the consumer's random name.
func (s *session) watchSubject(filter string) string {
	return s.api + "CONSUMER.CREATE.KV_" + s.bucket + ".*.$KV." + s.bucket + "." + filter
}

// isPattern reports whether an election name holds a wildcard token (* or
// >), so that it names a set of elections.
func isPattern(name string) bool {
	for t := range strings.SplitSeq(name, ".") {
		if t == "*" || t == ">" {
			return true
		}
	}
	return false
}

// readElection returns the record of election name, or an error that lists
// the elections there are when the bucket has no such key.
func (s *session) readElection(ctx context.Context, name string) (record, error) {
	if err := validateElectionName(name); err != nil {
		return record{}, err
	}
	recs, err := s.readRecords(ctx, name)
	if err != nil {
		return record{}, err
	}
	if len(recs) == 1 {
		return s.withStamp(ctx, recs[0]), nil
	}
	return record{}, s.unknownElection(ctx, name)
}

// withStamp reads r's key again straight from the stream, for what its
// writer said of itself (instance and token), which the KV API hides. A
// message written since r (a renewal landing between the two reads) is as
// good an answer and is returned in r's place: the key's latest message is
// what the caller asked for. It returns r as it is when that read fails (a
// user that may not read messages directly, say) or finds an older
// message.
func (s *session) withStamp(ctx context.Context, r record) record {
	if latest, ok := s.readRaw(ctx, r.Key); ok && latest.Key == r.Key && latest.Revision >= r.Revision {
		return latest
	}
	return r
}

// takerName names the candidate a stop handed election key over to,
// identity as Election.HandedOverTo says it: as identity/instance when
// the key's latest write is that identity's and says its instance (the
// taker's write, or a renewal of it), else as the identity.
func (s *session) takerName(ctx context.Context, key, identity string) (name, instance string) {
	if r, ok := s.readRaw(context.WithoutCancel(ctx), key); ok && r.State == streams.KeyHeld && r.Leader == identity {
		return named(identity, r.Instance), r.Instance
	}
	return identity, ""
}

// readRaw reads election key's latest message straight from the stream,
// with what its writer said of itself; ok is false when it cannot.
func (s *session) readRaw(ctx context.Context, key string) (record, bool) {
	rctx, cancel := s.request(ctx)
	defer cancel()
	if s.stream == nil { // looked up once: a watch reads many keys
		st, err := s.js.Stream(rctx, "KV_"+s.bucket)
		if err != nil {
			return record{}, false
		}
		s.stream = st
	}
	msg, err := s.stream.GetLastMsgForSubject(rctx, "$KV."+s.bucket+"."+key)
	if err != nil {
		return record{}, false
	}
	return streams.ReadEntry(keymsg.Read(s.bucket, msg)), true
}

// errElectionAppeared is what unknownElection's error wraps when the
// election it was asked about appeared while it listed the others.
var errElectionAppeared = errors.New("it appeared just after it was read: try again")

// unknownElection explains that the bucket has no key name, listing the
// elections it has; when name is among them, it appeared meanwhile, and
// the error wraps errElectionAppeared.
func (s *session) unknownElection(ctx context.Context, name string) error {
	recs, err := s.readRecords(ctx, ">")
	if err == nil && slices.ContainsFunc(recs, func(r record) bool { return r.Key == name }) {
		return fmt.Errorf("election %q in %s: %w", name, s.bucket, errElectionAppeared)
	}
	if errors.Is(err, denied.ErrPermissionDenied) {
		return fmt.Errorf("no election %q in %s (the others are not listed: this user may not read every election)", name, s.bucket)
	}
	if err != nil {
		return fmt.Errorf("no election %q in %s (and listing the elections failed: %w)", name, s.bucket, err)
	}
	const most = 10
	var names []string
	for i, r := range recs {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(recs)-most))
			break
		}
		names = append(names, r.Key)
	}
	if len(names) == 0 {
		return fmt.Errorf("no election %q in %s: it has no elections (a key appears when a candidate first campaigns, and goes a TTL after its last write)", name, s.bucket)
	}
	return fmt.Errorf("no election %q in %s (elections: %s)", name, s.bucket, strings.Join(names, ", "))
}

// accountInfo reads the JetStream account's information for its limits, or
// returns nil when the account's permissions do not allow it (found at
// once, not after --timeout) or the request fails: callers then go without.
func (s *session) accountInfo(ctx context.Context) *jetstream.AccountInfo {
	rctx, cancel := s.request(ctx)
	defer cancel()
	stop := s.cancelOnRefusal(cancel, denied.Last(s.nc), s.api+"INFO")
	info, err := s.js.AccountInfo(rctx)
	stop()
	if err != nil {
		return nil
	}
	return info
}
