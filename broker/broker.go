package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/bucket/fit"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/buildinfo"
)

// provisionPolicy paces the retries while JetStream comes up and a cluster
// forms: quick at first (a single server is ready within milliseconds, a
// cluster elects its meta leader within seconds), then every few seconds.
var provisionPolicy = backoff.Linear(100*time.Millisecond, 5*time.Second, 20)

const (
	// maxTryTimeout bounds one provisioning attempt. Attempts start with a
	// second and grow: before a cluster has a meta leader, JetStream API
	// requests go unanswered, and a long first wait would delay start-up.
	maxTryTimeout = 10 * time.Second
	// quietTries is how many failed attempts log at info level before the
	// broker warns: a cluster that is still forming fails the first few.
	quietTries = 10
	// readyPoll is how long each readiness check of the server waits.
	readyPoll = 100 * time.Millisecond
	// httpShutdownTimeout bounds the graceful close of the monitoring server.
	httpShutdownTimeout = 5 * time.Second
)

// Broker is an embedded NATS server with JetStream that holds the election
// bucket. Build it with New, then Start (or Run) it once; Shutdown stops it.
// Its methods are safe for concurrent use.
type Broker struct {
	set      settings
	log      *logrus.Entry
	slog     *serverLogger
	internal internalCredential

	mu          sync.Mutex
	started     bool
	closing     bool
	cancelStart context.CancelFunc
	starting    chan struct{}  // closed when Start's work is over
	srv         *server.Server // for Shutdown, from before it starts
	ready       *server.Server // for the accessors, once it accepts clients
	nc          *nats.Conn
	mon         *monitor
	lock        *storeLock
	report      ProvisionReport

	shutdownOnce sync.Once
	done         chan struct{}
}

// New validates cfg and returns a Broker that is not started yet. log
// receives the broker's and nats-server's messages; nil discards them.
//
// It returns an error wrapping ErrInvalidConfig when a setting is missing or
// out of range or a TLS file cannot be used (then also wrapping
// security.ErrTLSFiles), ErrNotEnoughServers when the configured election
// bucket replicas exceed the servers the configuration names, and ErrInsecure
// when the broker would listen beyond loopback without TLS or authentication
// and plugin.conclave.insecure is off.
func New(cfg *config.Config, log *logrus.Entry, opts ...Option) (*Broker, error) {
	o := options{clusterName: DefaultClusterName}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	set, err := newSettings(cfg, o)
	if err != nil {
		return nil, err
	}
	internal, err := newInternalCredential()
	if err != nil {
		return nil, err
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = logrus.NewEntry(l)
	}
	return &Broker{
		set:      set,
		log:      log,
		slog:     newServerLogger(log.WithField("component", "nats-server")),
		internal: internal,
		done:     make(chan struct{}),
	}, nil
}

// BucketSpec returns the election bucket settings the broker provisions.
func (b *Broker) BucketSpec() BucketSpec { return b.set.spec }

// StoreDir returns the directory of JetStream's files, which the broker
// holds locked while it runs (plugin.choria.network.stream.store).
func (b *Broker) StoreDir() string { return b.set.storeDir }

// ClusterSize returns the number of servers the configuration names: 1
// without peers, else this server plus every distinct other peer.
func (b *Broker) ClusterSize() int { return b.set.clusterSize }

// Start runs the NATS server and returns once it accepts clients, JetStream
// is ready and the election bucket has the configured settings, retrying
// while a cluster forms. ctx bounds the start-up only; the broker runs until
// Shutdown.
//
// When Start fails the broker is shut down and cannot be started again. It
// returns ErrAlreadyStarted on a second call, ErrShutdown when Shutdown ran
// first or meanwhile, ErrPortInUse when a configured port is taken,
// ErrStoreInUse when another broker holds the store directory (both are
// checked before the store is opened), ErrServerFailed when nats-server
// could not start, the errors of ProvisionElectionBucket that retrying
// cannot fix, and otherwise
// ctx's error joined with the reason of the last failed attempt.
func (b *Broker) Start(ctx context.Context) error {
	b.mu.Lock()
	switch {
	case b.closing:
		b.mu.Unlock()
		return ErrShutdown
	case b.started:
		b.mu.Unlock()
		return ErrAlreadyStarted
	}
	b.started = true
	ctx, cancel := context.WithCancel(ctx)
	b.cancelStart = cancel
	starting := make(chan struct{})
	b.starting = starting
	b.mu.Unlock()

	err := b.start(ctx)
	cancel()
	close(starting)
	if err == nil {
		return nil
	}
	b.mu.Lock()
	closing := b.closing
	b.mu.Unlock()
	b.Shutdown()
	if closing && !errors.Is(err, ErrShutdown) {
		err = fmt.Errorf("%w during start-up: %w", ErrShutdown, err)
	}
	return err
}

func (b *Broker) start(ctx context.Context) error {
	b.log.WithField("version", buildinfo.Read().Version).Infof("Conclave %s starting broker %s (nats-server %s)", buildinfo.Read(), b.set.identity, server.VERSION)
	b.logSecurity()
	if err := b.set.checkPorts(); err != nil {
		return err
	}
	lock, err := lockStore(b.set.storeDir, b.set.identity)
	if err != nil {
		return err
	}
	b.keep(func() { b.lock = lock })
	srv, err := server.NewServer(b.serverOptions())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrServerFailed, err)
	}
	debug, trace := b.slog.levels()
	srv.SetLoggerV2(b.slog, debug, trace, false)
	b.keep(func() { b.srv = srv })

	srv.Start()
	if err := b.waitReady(ctx, srv); err != nil {
		return err
	}
	// nats-server's accessors race with its Start: expose it only now.
	b.keep(func() { b.ready = srv })

	nc, err := nats.Connect("", append(b.InProcessOptions(), nats.Name("conclave broker "+b.set.identity))...)
	if err != nil {
		return fmt.Errorf("%w: in-process connection: %w", ErrServerFailed, err)
	}
	b.keep(func() { b.nc = nc })
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("%w: JetStream context: %w", ErrServerFailed, err)
	}

	if b.set.statsPort != 0 {
		mon, err := startMonitor(b, srv)
		if err != nil {
			return err
		}
		b.keep(func() { b.mon = mon })
		b.log.Infof("Serving monitoring and metrics on %s", mon.url())
	}

	report, err := b.provision(ctx, js)
	if err != nil {
		return err
	}
	b.keep(func() { b.report = report })
	b.log.WithFields(logrus.Fields{"client_url": srv.ClientURL(), "bucket": bucket.Name}).
		WithField("max_consumers", report.Consumers.Max).
		Infof("Broker %s ready: election bucket %s; consumers limit %s", b.set.identity, report, report.Consumers)
	return nil
}

// keep hands a resource over to the broker, for Shutdown to release. Shutdown
// waits for Start's work to end before it releases anything, so that it
// never stops a server that is still starting: nats-server does not support
// that.
func (b *Broker) keep(set func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set()
}

// serverOptions translates the settings into nats-server options.
func (b *Broker) serverOptions() *server.Options {
	s := b.set
	opts := &server.Options{
		ServerName:             s.identity,
		Host:                   s.listenHost,
		Port:                   s.clientPort,
		JetStream:              true,
		StoreDir:               s.storeDir,
		SyncAlways:             s.syncAlways,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
	if s.peerPort != 0 {
		opts.Cluster = server.ClusterOpts{Name: s.clusterName, Host: s.listenHost, Port: s.peerPort}
	}
	var auth server.Authentication
	if len(s.sec.users) > 0 {
		auth = newAuthenticator(s.sec.users, b.internal, b.log.WithField("component", "auth"))
	}
	s.applySecurity(opts, auth)
	if s.peerPort != 0 && (s.sec.tls != nil || s.sec.peerUser != "") {
		opts.CustomRouterAuthentication = newRouteAuthenticator(&s, b.log.WithField("component", "routes"))
	}
	return opts
}

// minBcryptCost is the lowest bcrypt cost of a password hash the broker
// takes without a warning, as `conclave hash-password` makes them.
const minBcryptCost = 10

// logSecurity logs how clients and peers connect and log in, with no
// secret, and warns about everything the configuration exposes.
func (b *Broker) logSecurity() {
	sec := &b.set.sec
	b.log.Infof("Security: %s", b.set.describeTLS())
	switch {
	case len(sec.users) > 0:
		for _, u := range sec.users {
			b.log.WithField("user", u.Name).Infof("Broker %s", describeUser(u))
			if cost, err := bcrypt.Cost([]byte(u.PasswordHash)); err == nil && cost < minBcryptCost {
				b.log.WithField("user", u.Name).Warnf("User %s's password hash has bcrypt cost %d: below %d it is cheap to crack if the configuration leaks; make a new one with `conclave hash-password`", u.Name, cost, minBcryptCost)
			}
		}
	case sec.authenticated():
		b.log.Infof("No users configured: every client with a certificate the CA signed has full access")
	default:
		b.log.Infof("No users configured: every client that reaches the client port has full access")
	}
	if sec.peerUser != "" {
		b.log.Infof("Routes log in as peer user %q", sec.peerUser)
	}
	for _, e := range sec.exposures {
		b.log.WithField("setting", keyInsecure).Warnf("INSECURE (%s = true): %s", keyInsecure, e)
	}
	for _, n := range sec.notices {
		b.log.Warnf("Exposed: %s", n)
	}
}

// waitReady waits until the server accepts clients, failing fast when it
// reported a fatal error.
func (b *Broker) waitReady(ctx context.Context, srv *server.Server) error {
	for {
		if msg := b.slog.fatalMessage(); msg != "" {
			return fmt.Errorf("%w: %s", ErrServerFailed, msg)
		}
		if srv.ReadyForConnections(readyPoll) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: not ready for connections: %w", ErrServerFailed, err)
		}
	}
}

// provision retries ProvisionElectionBucket until it succeeds, fails for
// good, or ctx ends.
func (b *Broker) provision(ctx context.Context, js jetstream.JetStream) (ProvisionReport, error) {
	var (
		report ProvisionReport
		final  error
	)
	began := time.Now()
	err := provisionPolicy.For(ctx, func(try int) error {
		tctx, cancel := context.WithTimeout(ctx, min(time.Duration(try+1)*time.Second, maxTryTimeout))
		defer cancel()
		var err error
		report, err = b.provisionOnce(tctx, js)
		switch {
		case err == nil:
			return nil
		case permanent(err):
			final = err
			return nil
		case ctx.Err() != nil:
			return err
		}
		entry := b.log.WithField("try", try+1)
		if try < quietTries {
			entry.Infof("Election bucket %s not ready yet, retrying: %v", bucket.Name, err)
		} else {
			entry.Warnf("Election bucket %s still not ready, retrying: %v", bucket.Name, err)
		}
		return err
	})
	switch {
	case final != nil:
		return ProvisionReport{}, final
	case err != nil:
		return ProvisionReport{}, fmt.Errorf("broker: election bucket %s not provisioned: %w", bucket.Name, err)
	}
	if !report.Created && report.BucketCreated.After(began) {
		// On a fresh cluster the create that succeeds is often one whose
		// answer came after its try's deadline, this broker's or a
		// peer's: the bucket is new all the same, and operators look for
		// that line.
		report.CreatedMeanwhile = true
		b.log.Infof("Election bucket %s was created during start-up, by this broker or a peer, at %s: TTL %v, %d replicas, history %d, revisions from %d",
			bucket.Name, report.BucketCreated.UTC().Format(time.RFC3339Nano), report.Config.MaxAge, report.Config.Replicas, report.Config.MaxMsgsPerSubject, report.Config.FirstSeq)
	}
	return report, nil
}

func (b *Broker) provisionOnce(ctx context.Context, js jetstream.JetStream) (ProvisionReport, error) {
	if _, err := js.AccountInfo(ctx); err != nil {
		return ProvisionReport{}, fmt.Errorf("JetStream not ready: %w", err)
	}
	report, err := ProvisionElectionBucket(ctx, js, b.set.spec, b.log)
	if err != nil {
		return ProvisionReport{}, err
	}
	return b.checkFit(report)
}

// checkFit judges the provisioned bucket as candidates and `conclave
// election info` do (package fit). A problem candidates would refuse means
// provisioning went wrong, and is an ErrBucketMisconfigured error; the
// others are logged once at warn level and kept in the report.
func (b *Broker) checkFit(report ProvisionReport) (ProvisionReport, error) {
	problems := fit.Check(report.Config, fit.Use{Clustered: b.set.clusterSize > 1})
	if refused := fit.Refused(problems); len(refused) > 0 {
		errs := make([]error, len(refused))
		for i, p := range refused {
			errs[i] = p
		}
		return ProvisionReport{}, fmt.Errorf("%w: candidates would refuse the provisioned bucket %s: %w", ErrBucketMisconfigured, bucket.Name, errors.Join(errs...))
	}
	for _, p := range problems {
		b.log.WithField("setting", p.Kind.String()).Warnf("Election bucket %s: %s", bucket.Name, p.Text)
		report.Warnings = append(report.Warnings, p)
	}
	return report, nil
}

// permanent reports whether retrying cannot fix a provisioning error. Too few
// servers is not permanent in a cluster: New checked the configured size, so
// the missing peers are still joining.
func permanent(err error) bool {
	return errors.Is(err, ErrBucketMisconfigured) || errors.Is(err, ErrInvalidConfig)
}

// Run starts the broker, blocks until ctx ends, then shuts it down. It
// returns Start's error, or nil after a clean shutdown. It also returns when
// Shutdown is called from elsewhere.
func (b *Broker) Run(ctx context.Context) error {
	if err := b.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-b.done:
	}
	b.Shutdown()
	return nil
}

// Shutdown stops the monitoring server, the NATS server and the broker's own
// connection, and returns when they have stopped. It interrupts a Start in
// progress, waiting for the NATS server to finish starting first (which
// takes long only while JetStream recovers a large store). Calling it again,
// concurrently, or before Start is safe.
func (b *Broker) Shutdown() {
	b.shutdownOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		cancel, starting := b.cancelStart, b.starting
		b.mu.Unlock()
		if cancel != nil {
			cancel()
			<-starting
		}

		b.mu.Lock()
		srv, nc, mon, lock := b.srv, b.nc, b.mon, b.lock
		b.mu.Unlock()
		if mon != nil {
			mon.close()
		}
		if nc != nil {
			nc.Close()
		}
		if srv != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			b.log.Infof("Broker %s stopped", b.set.identity)
		}
		lock.release()
		close(b.done)
	})
	<-b.done
}

// Done is closed once the broker has shut down.
func (b *Broker) Done() <-chan struct{} { return b.done }

// Server returns the NATS server once it accepts clients, nil before. For
// tests and tools.
func (b *Broker) Server() *server.Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready
}

// ClientURL returns the URL clients connect to, such as
// nats://127.0.0.1:4222, once the server accepts clients; "" before.
func (b *Broker) ClientURL() string {
	srv := b.Server()
	if srv == nil {
		return ""
	}
	return srv.ClientURL()
}

// ClusterURL returns the URL other brokers list as a peer, such as
// nats://127.0.0.1:5222, built from the listen address and the bound peer
// port, or "" when the broker does not cluster or has not started. With a
// wildcard listen address (0.0.0.0) peers need the host's own address instead.
func (b *Broker) ClusterURL() string {
	srv := b.Server()
	if srv == nil {
		return ""
	}
	addr := srv.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats://" + net.JoinHostPort(b.set.listenHost, strconv.Itoa(addr.Port))
}

// StatsURL returns the monitoring server's base URL, such as
// http://127.0.0.1:8222, or "" when monitoring is off or not started.
func (b *Broker) StatsURL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mon == nil {
		return ""
	}
	return b.mon.url()
}

// MetricsAddr returns the monitoring server's listen address (host:port),
// or "" when monitoring is off or not started.
func (b *Broker) MetricsAddr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mon == nil {
		return ""
	}
	return b.mon.addr()
}

// ProvisionReport returns what Start's provisioning of the election bucket
// did; the zero report before Start has succeeded.
func (b *Broker) ProvisionReport() ProvisionReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.report
}
