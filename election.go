package conclave

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/inter"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// NewElection returns a candidate in election name, campaigning under the
// framework's identity over conn, or over the shared connection when conn
// is nil. Run it with Start; it campaigns until Start's context ends or Stop
// is called. See NewCampaign for the options it adds and the errors.
func (fw *Framework) NewElection(ctx context.Context, conn *nats.Conn, name string, opts ...streams.Option) (inter.Election, error) {
	e, err := fw.NewCampaign(ctx, conn, name, opts...)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// NewCampaign is NewElection returning the concrete *streams.Election, for
// its Term (fencing token and term context), State and Healthy.
//
// It campaigns over the connection's JetStream context, so a leader's
// release is marked and the next candidate leads at once. Before opts it
// adds streams.WithLogger with fw.Logger("election") marked with the
// election's name; with WithRegisterer, the framework's metrics recorder;
// streams.WithPriority and streams.WithMinTerm of the configuration's
// plugin.conclave.election.priority and .min_term when set; and
// WithHealthCheck's check. Options in opts override them. ctx bounds connecting and
// opening the bucket, not the campaign.
//
// With conn nil and no broker answering yet (not started, or restarting), it
// waits for one as `conclave election run` does, trying quickly at first and
// then every 2s and logging once that it waits, until one answers or ctx
// ends: give ctx a deadline to fail instead (then the error wraps
// ErrNoBroker and ctx's error). Errors that waiting cannot mend return at
// once: ErrLogin for a refused login, ErrNoBucket when the broker that
// answers has no election bucket, ErrClosed after Close, and those of
// streams.NewElection (streams.ErrInvalidKey, …).
func (fw *Framework) NewCampaign(ctx context.Context, conn *nats.Conn, name string, opts ...streams.Option) (*streams.Election, error) {
	if err := streams.ValidateKey(name); err != nil {
		return nil, err
	}
	// Opening the bucket here reports a broker without one (ErrNoBucket)
	// now rather than in Start's log.
	_, js, err := fw.bucket(ctx, conn)
	if err != nil {
		return nil, err
	}
	all := []streams.Option{streams.WithLogger(fieldLogger{base: fw.componentLog("election"), field: "election", value: name})}
	if fw.recorder != nil {
		all = append(all, streams.WithRecorder(fw.recorder))
	}
	if fw.cfg.ElectionPriority != 0 {
		all = append(all, streams.WithPriority(fw.cfg.ElectionPriority))
	}
	if fw.cfg.ElectionMinTerm > 0 {
		all = append(all, streams.WithMinTerm(fw.cfg.ElectionMinTerm))
	}
	if fw.health != nil {
		all = append(all, streams.WithHealthCheck(fw.health, fw.healthEvery))
	}
	all = append(all, opts...)
	return streams.NewElection(fw.Identity(), name, js, all...)
}

// NewObserver returns an observer of election name over conn, or over the
// shared connection when conn is nil: it follows who leads without
// campaigning, and who stands (streams.ObserveStanding: its Candidates).
// Run it with its Run method. With WithRegisterer it tells the framework's
// metrics how many candidates stand (conclave_election_candidates). It
// logs through fw.Logger("observer") unless opts set another logger.
// Errors are as for NewCampaign.
func (fw *Framework) NewObserver(ctx context.Context, conn *nats.Conn, name string, opts ...streams.Option) (*streams.Observer, error) {
	if err := streams.ValidateKey(name); err != nil {
		return nil, err
	}
	_, js, err := fw.bucket(ctx, conn)
	if err != nil {
		return nil, err
	}
	all := []streams.Option{streams.WithLogger(fieldLogger{base: fw.componentLog("observer"), field: "election", value: name})}
	if nc := js.Conn(); nc != nil {
		all = append(all, streams.ObserveStanding(nc))
	}
	if fw.recorder != nil {
		all = append(all, streams.WithRecorder(fw.recorder))
	}
	all = append(all, opts...)
	return streams.NewObserver(name, js, all...)
}

// Bucket opens the election bucket, CHORIA_LEADER_ELECTION, over conn, or
// over the shared connection when conn is nil, waiting for a broker as
// NewCampaign does (and, for a broker that was not up when asked, for the
// bucket it provisions as it starts). It returns an error wrapping
// ErrNoBucket, naming the server and the setting that provisions the
// bucket, when a broker that was up has none.
func (fw *Framework) Bucket(ctx context.Context, conn *nats.Conn) (jetstream.KeyValue, error) {
	kv, _, err := fw.bucket(ctx, conn)
	return kv, err
}

// brokerRetry spaces the attempts of awaitConnection: quickly at first,
// then every 2s, as `conclave election run` does.
var brokerRetry = backoff.Linear(100*time.Millisecond, 2*time.Second, 10)

// awaitConnection is Connection, waiting while no broker answers (a broker
// that is not up yet, or restarting) until one does or ctx ends, and
// saying once that it waits. Other errors (a refused login, a bad
// certificate, Close) return at once: waiting would not mend them.
// It reports whether it waited: a broker that was not up may still be
// provisioning its bucket.
func (fw *Framework) awaitConnection(ctx context.Context) (*nats.Conn, bool, error) {
	var said bool
	for try := 0; ; try++ {
		conn, err := fw.Connection(ctx)
		if err == nil || !errors.Is(err, ErrNoBroker) {
			if err == nil && said {
				fw.Logger("connection").Infof("Connected to %s: the broker answers now", conn.ConnectedUrlRedacted())
			}
			return conn, said, err
		}
		if !said {
			said = true
			fw.Logger("connection").Warnf("Waiting for a broker, for as long as the context allows: %v", err)
		}
		if serr := backoff.Sleep(ctx, brokerRetry.Duration(try)); serr != nil {
			return nil, said, fmt.Errorf("%w (waited for one until the context ended: %w)", err, serr)
		}
	}
}

// awaitBucket is openBucket on a broker that has just come up, which
// provisions the bucket moments after it answers: a missing bucket is
// asked for again, as long as ctx allows, saying once that it waits.
func (fw *Framework) awaitBucket(ctx context.Context, conn *nats.Conn) (jetstream.KeyValue, jetstream.JetStream, error) {
	var said bool
	for try := 0; ; try++ {
		kv, js, err := fw.openBucket(ctx, conn)
		if err == nil || !errors.Is(err, ErrNoBucket) {
			return kv, js, err
		}
		if !said {
			said = true
			fw.Logger("connection").Warnf("Waiting for the broker that just came up to provision its bucket, for as long as the context allows: %v", err)
		}
		if serr := backoff.Sleep(ctx, brokerRetry.Duration(try)); serr != nil {
			return nil, nil, fmt.Errorf("%w (waited for it until the context ended: %w)", err, serr)
		}
	}
}

// bucket is Bucket, also returning the JetStream context it was opened with.
func (fw *Framework) bucket(ctx context.Context, conn *nats.Conn) (jetstream.KeyValue, jetstream.JetStream, error) {
	if conn == nil {
		var (
			err    error
			waited bool
		)
		if conn, waited, err = fw.awaitConnection(ctx); err != nil {
			return nil, nil, err
		}
		fw.mu.Lock()
		kv, js := fw.sharedKV, fw.sharedJS
		fw.mu.Unlock()
		if kv != nil {
			return kv, js, nil
		}
		open := fw.openBucket
		if waited {
			open = fw.awaitBucket
		}
		if kv, js, err = open(ctx, conn); err != nil {
			return nil, nil, err
		}
		fw.mu.Lock()
		fw.sharedKV, fw.sharedJS = kv, js
		fw.mu.Unlock()
		return kv, js, nil
	}
	// A connection of the caller's outlives Close; the framework's
	// elections do not, so a closed framework hands out none over it.
	if fw.closedFlag.Load() {
		return nil, nil, ErrClosed
	}
	return fw.openBucket(ctx, conn)
}

func (fw *Framework) openBucket(ctx context.Context, conn *nats.Conn) (jetstream.KeyValue, jetstream.JetStream, error) {
	js, err := jetstream.New(conn)
	if err != nil {
		return nil, nil, fmt.Errorf("conclave: JetStream on %s: %w", serverOf(conn), err)
	}
	before := denied.Last(conn)
	kv, err := js.KeyValue(ctx, bucket.Name)
	err = denied.Explain(conn, err, before, "opening the election bucket "+bucket.Name, "$JS.API.STREAM.INFO.KV_"+bucket.Name)
	switch {
	case err == nil:
		return kv, js, nil
	case errors.Is(err, ErrPermissionDenied):
		return nil, nil, fmt.Errorf("conclave: on %s: %w", serverOf(conn), err)
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, nil, fmt.Errorf("%w: %s not found on %s: run that broker with plugin.choria.broker_network = true, which provisions it, or create it with `nats kv add %s --ttl 60s --history 1`: %w",
			ErrNoBucket, bucket.Name, serverOf(conn), bucket.Name, err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, nats.ErrNoResponders): // nothing answers JetStream API requests
		return nil, nil, fmt.Errorf("%w: %s has no JetStream, so no %s bucket: use a broker with plugin.choria.broker_network = true (`conclave broker run --config FILE`), or enable JetStream and run `nats kv add %s --ttl 60s --history 1`: %w",
			ErrNoBucket, serverOf(conn), bucket.Name, bucket.Name, err)
	default:
		return nil, nil, fmt.Errorf("conclave: opening the election bucket %s on %s: %w", bucket.Name, serverOf(conn), err)
	}
}

// serverOf describes where conn is connected, for messages.
func serverOf(conn *nats.Conn) string {
	if conn.Opts.InProcessServer != nil {
		return "the embedded broker " + conn.ConnectedServerName()
	}
	url := conn.ConnectedUrlRedacted()
	if url == "" {
		url = "the broker (not connected now)"
	}
	if name := conn.ConnectedServerName(); name != "" {
		return fmt.Sprintf("%s (server %s)", url, name)
	}
	return url
}
