package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/conclave-io/conclave/bucket"
)

// Gauges served on /metrics besides the Go and process collectors. Each has
// the label identity, the broker's configured identity.
const (
	// MetricUp is 1 while the NATS server runs.
	MetricUp = "conclave_broker_up"
	// MetricConnections counts client connections, the broker's own included.
	MetricConnections = "conclave_broker_connections"
	// MetricRoutes counts route connections to other cluster servers.
	MetricRoutes = "conclave_broker_routes"
	// MetricJetStreamEnabled is 1 when JetStream is enabled.
	MetricJetStreamEnabled = "conclave_broker_jetstream_enabled"
	// MetricJetStreamMetaLeader is 1 when this server is the JetStream meta
	// leader; a server that is not clustered always is.
	MetricJetStreamMetaLeader = "conclave_broker_jetstream_meta_leader"
	// MetricElectionBucketMessages counts the messages (live elections) in
	// this server's replica of the election bucket, 0 when it holds none.
	MetricElectionBucketMessages = "conclave_broker_election_bucket_messages"
)

// monitor serves the NATS monitoring endpoints and /metrics.
type monitor struct {
	ln   net.Listener
	http *http.Server
	done chan struct{}
}

// startMonitor listens on the stats address and serves in the background.
func startMonitor(b *Broker, srv *server.Server) (*monitor, error) {
	port := b.set.statsPort
	if port == randomPort {
		port = 0
	}
	hp := net.JoinHostPort(b.set.statsHost, strconv.Itoa(port))
	ln, err := net.Listen("tcp", hp)
	if err != nil {
		return nil, fmt.Errorf("broker: monitoring on %s (%s, %s): %w", hp, keyStatsAddress, keyStatsPort, err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	registerBrokerGauges(reg, srv, b.set.identity)

	mux := http.NewServeMux()
	mux.HandleFunc("/varz", srv.HandleVarz)
	mux.HandleFunc("/connz", srv.HandleConnz)
	mux.HandleFunc("/routez", srv.HandleRoutez)
	mux.HandleFunc("/jsz", srv.HandleJsz)
	mux.HandleFunc("/healthz", srv.HandleHealthz)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	m := &monitor{
		ln:   ln,
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Errorf("Monitoring server on %s stopped: %v", hp, err)
		}
	}()
	return m, nil
}

func (m *monitor) addr() string { return m.ln.Addr().String() }

func (m *monitor) url() string { return "http://" + m.addr() }

// close stops serving, letting requests in flight finish for a while.
func (m *monitor) close() {
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := m.http.Shutdown(ctx); err != nil {
		m.http.Close()
	}
	<-m.done
}

// registerBrokerGauges adds gauges read from srv at scrape time.
func registerBrokerGauges(reg prometheus.Registerer, srv *server.Server, identity string) {
	labels := prometheus.Labels{"identity": identity}
	gauge := func(name, help string, value func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, value)
	}
	boolean := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge(MetricUp, "1 while the NATS server is running.", func() float64 {
			return boolean(srv.Running())
		}),
		gauge(MetricConnections, "Client connections to this server.", func() float64 {
			return float64(srv.NumClients())
		}),
		gauge(MetricRoutes, "Route connections to other cluster servers.", func() float64 {
			return float64(srv.NumRoutes())
		}),
		gauge(MetricJetStreamEnabled, "1 when JetStream is enabled on this server.", func() float64 {
			return boolean(srv.JetStreamEnabled())
		}),
		gauge(MetricJetStreamMetaLeader, "1 when this server is the JetStream meta leader (always, when not clustered).", func() float64 {
			return boolean(srv.JetStreamIsLeader())
		}),
		gauge(MetricElectionBucketMessages, "Messages in this server's replica of the election bucket (0 when it holds none).", func() float64 {
			return float64(bucketMessages(srv))
		}),
	)
}

// bucketMessages returns the message count of the local replica of the
// election stream, or 0 when this server has none.
func bucketMessages(srv *server.Server) uint64 {
	acc, err := srv.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil || acc == nil {
		return 0
	}
	for _, st := range acc.Streams {
		if st.Name == bucket.Stream {
			return st.State.Msgs
		}
	}
	return 0
}
