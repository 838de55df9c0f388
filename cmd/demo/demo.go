package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/internal/logging"
	"github.com/conclave-io/conclave/metrics"
)

// splayWindow is the spread of the workers' first campaigns unless NOSPLAY.
const splayWindow = time.Second

// Run runs the demo with the command line args until ctx ends or q is read
// from stdin, and returns the exit status: 0 after a clean stop, 1 when the
// demo could not run, 2 for a bad command line.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "demo: %v\nRun demo --help for the flags.\n", err)
		return 2
	}
	if err := run(ctx, s, stdin, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// demo is a running demo.
type demo struct {
	s       settings
	fw      *conclave.Framework
	log     *logrus.Entry
	ttl     time.Duration
	copyID  string // this process's part of its workers' instances, drawn as a candidate's default instance is
	workers []*worker
	out     io.Writer
}

func run(ctx context.Context, s settings, stdin io.Reader, stdout, stderr io.Writer) error {
	ctx, quit := context.WithCancel(ctx)
	defer quit()

	// A registry of the demo's own: the framework registers the election
	// metrics on it, and nothing is registered globally.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	fw, brokerNote, cleanup, err := newFramework(ctx, s, reg, stderr)
	if err != nil {
		return err
	}
	defer cleanup()

	kv, err := fw.Bucket(ctx, nil)
	if err != nil {
		return err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the election bucket: %w", err)
	}
	d := &demo{s: s, fw: fw, log: fw.Logger("demo"), ttl: st.TTL(), copyID: keymsg.RandomInstance(), out: stdout}

	for i := range s.workers {
		instance := d.instance(i + 1)
		d.workers = append(d.workers, &worker{
			instance: instance, fw: fw, key: s.key,
			log:    fw.Logger("worker").WithField("instance", instance),
			splay:  d.splay(),
			rejoin: 2 * d.ttl,
		})
	}

	metricsURL, stopMetrics, err := d.serveMetrics(reg)
	if err != nil {
		return err
	}
	defer stopMetrics()

	d.banner(brokerNote, metricsURL)

	var wg sync.WaitGroup
	for _, w := range d.workers {
		wg.Go(func() { w.run(ctx) })
	}
	go d.readCommands(ctx, stdin, quit)
	<-ctx.Done()
	d.log.Info("Stopping: the leader hands over as it goes")
	wg.Wait()
	d.log.Info("All workers stopped")
	return nil
}

// newFramework builds the framework: on an embedded broker, or on the
// brokers of s.config. It returns a note on the broker for the banner, and a
// function that closes the framework and removes what it made.
func newFramework(ctx context.Context, s settings, reg prometheus.Registerer, stderr io.Writer) (*conclave.Framework, string, func(), error) {
	var (
		cfg *config.Config
		err error
	)
	lookup := func(name string) (string, bool) {
		v := s.getenv(name)
		return v, v != ""
	}
	if s.config != "" {
		cfg, err = config.LoadWithEnv(s.config, lookup)
	} else {
		cfg, err = config.FromEnv(lookup)
	}
	if err != nil {
		return nil, "", nil, err
	}
	var store string
	if s.config == "" {
		store, err = os.MkdirTemp("", "conclave-demo-")
		if err != nil {
			return nil, "", nil, fmt.Errorf("a store for the embedded broker: %w", err)
		}
		cfg.BrokerNetwork = true
		cfg.ListenAddress = "127.0.0.1"
		cfg.ClientPort = config.RandomPort
		cfg.PeerPort, cfg.Peers = 0, nil
		cfg.StatsPort = 0
		cfg.StreamStore = store
		cfg.LeaderElectionTTL = s.ttl
		cfg.LeaderElectionReplicas = 1
	}
	removeStore := func() {
		if store != "" {
			_ = os.RemoveAll(store)
		}
	}

	l, closeLog, err := logging.New(cfg, stderr)
	if err != nil {
		removeStore()
		return nil, "", nil, err
	}
	l.SetFormatter(quietServer{l.Formatter})
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(l), conclave.WithRegisterer(reg))
	if err != nil {
		_ = closeLog()
		removeStore()
		return nil, "", nil, err
	}
	cleanup := func() {
		_ = fw.Close()
		removeStore()
		_ = closeLog()
	}
	if s.config != "" {
		return fw, fmt.Sprintf("%s (from %s)", strings.Join(fw.Servers(), ", "), s.config), cleanup, nil
	}
	b, err := embedded.StartBroker(ctx, fw)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return fw, fmt.Sprintf("%s (embedded, store %s, removed at exit)", b.ClientURL(), store), cleanup, nil
}

// instance returns the instance of worker n: "worker-N." and the copy's part.
func (d *demo) instance(n int) string { return fmt.Sprintf("worker-%d.%s", n, d.copyID) }

// splay returns how long a worker waits before its first campaign.
func (d *demo) splay() time.Duration {
	if d.s.noSplay {
		return 0
	}
	return rand.N(splayWindow)
}

// serveMetrics serves /metrics and /healthz on --metrics, and returns the
// base URL and a function that stops the server. With --metrics "" it serves
// nothing.
func (d *demo) serveMetrics(reg *prometheus.Registry) (string, func(), error) {
	if d.s.metrics == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", d.s.metrics)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: %w: pass --metrics with another address (127.0.0.1:0 for any free port), or --metrics \"\" to serve none", err)
	}
	checkers := make([]metrics.Checker, len(d.workers))
	for i, w := range d.workers {
		checkers[i] = w
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// A leader that has missed two renewals is unhealthy.
	mux.Handle("/healthz", metrics.HealthHandler(d.ttl/3, checkers...))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Errorf("Metrics server stopped: %v", err)
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// banner tells the user what runs where and what to type.
func (d *demo) banner(brokerNote, metricsURL string) {
	w := d.out
	fmt.Fprintf(w, "Conclave demo: %d workers campaigning in election %q as %s/worker-N.%s\n", len(d.workers), d.s.key, d.fw.Identity(), d.copyID)
	fmt.Fprintf(w, "Broker:  %s, election TTL %v\n", brokerNote, d.ttl)
	if metricsURL != "" {
		fmt.Fprintf(w, "Metrics: %s/metrics  health: %s/healthz\n", metricsURL, metricsURL)
	}
	url := d.fw.Servers()[0]
	fmt.Fprintf(w, "Watch:   conclave election watch --server %s %s\n", url, d.s.key)
	fmt.Fprintf(w, "         nats --server %s kv get %s %s\n", url, "CHORIA_LEADER_ELECTION", d.s.key)
	fmt.Fprintln(w, commandHelp)
}

// quietServer leaves out the embedded nats-server's informational lines
// (its start-up banner) unless the log level is debug: the demo's own lines
// say what matters. Its warnings and errors still show.
type quietServer struct{ logrus.Formatter }

// Format formats e, or returns nothing for a line to leave out.
func (q quietServer) Format(e *logrus.Entry) ([]byte, error) {
	if e.Data["component"] == "nats-server" && e.Level > logrus.WarnLevel && !e.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return nil, nil
	}
	return q.Formatter.Format(e)
}
