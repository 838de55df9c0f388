package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/conclave-io/conclave/clock/clocktest"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/metrics"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bucket starts a broker with the election bucket and returns the bucket,
// the JetStream context of a connection to it, and a function that stops it.
func bucket(t *testing.T, ttl time.Duration) (jetstream.KeyValue, jetstream.JetStream, func()) {
	t.Helper()
	b := brokertest.StartSingle(t, func(c *config.Config) { c.LeaderElectionTTL = ttl })
	_, js := natstest.Connect(t, b.ClientURL())
	kv, err := js.KeyValue(context.Background(), "CHORIA_LEADER_ELECTION")
	if err != nil {
		t.Fatal(err)
	}
	return kv, js, b.Shutdown
}

func start(t *testing.T, e *streams.Election) func() {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		e.Stop()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMetricsAfterAWinAndALoss(t *testing.T) {
	_, js, _ := bucket(t, time.Second)
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
	e, err := streams.NewElection("n1", "app", js, streams.WithRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, e)
	waitUntil(t, "a win", e.IsLeader)
	waitUntil(t, "a renewal", func() bool {
		n, _ := find(t, reg, "conclave_election_renew_duration_seconds")
		return n >= 1
	})
	if v := gauge(t, reg, "conclave_election_leader"); v != 1 {
		t.Fatalf("leader gauge = %v while leading", v)
	}
	if v := gauge(t, reg, "conclave_election_wins_total"); v != 1 {
		t.Fatalf("wins = %v", v)
	}
	if age := gauge(t, reg, "conclave_election_last_renewal_age_seconds"); age < 0 || age > 1 {
		t.Fatalf("renewal age %v while renewing every third of a second", age)
	}
	if n := campaigns(t, reg, "leader"); n < 1 {
		t.Fatalf("%v renewals counted as leader campaigns", n)
	}
	stop()
	if v := gauge(t, reg, "conclave_election_leader"); v != 0 {
		t.Fatalf("leader gauge = %v after stopping", v)
	}
	if v := lossCount(t, reg, "released"); v != 1 {
		t.Fatalf("released losses = %v", v)
	}
	if _, ok := find(t, reg, "conclave_election_last_renewal_age_seconds"); ok {
		t.Fatal("renewal age reported while not leading")
	}
	if v := campaigns(t, reg, "candidate"); v < 1 {
		t.Fatalf("candidate campaigns = %v", v)
	}
}

func TestACandidateThatNeverLedReportsZero(t *testing.T) {
	kv, js, _ := bucket(t, time.Minute)
	if _, err := kv.Create(context.Background(), "app", []byte("someone-else")); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rec, _ := metrics.New(reg)
	if _, ok := find(t, reg, "conclave_election_leader"); ok {
		t.Fatal("a leader gauge before any campaign")
	}
	e, _ := streams.NewElection("n1", "app", js, streams.WithRecorder(rec))
	start(t, e)
	waitUntil(t, "the leader gauge", func() bool {
		_, ok := series(t, reg, "conclave_election_leader", map[string]string{"election": "app"})
		return ok
	})
	if v := gauge(t, reg, "conclave_election_leader"); v != 0 {
		t.Fatalf("leader gauge of a candidate that never led: %v, want 0", v)
	}
	if e.IsLeader() {
		t.Fatal("the candidate leads an election held by another for a minute")
	}
}

func TestDeposedLossIsCountedByCause(t *testing.T) {
	kv, js, _ := bucket(t, time.Second)
	reg := prometheus.NewRegistry()
	rec, _ := metrics.New(reg)
	e, _ := streams.NewElection("n1", "app", js, streams.WithRecorder(rec))
	start(t, e)
	waitUntil(t, "a win", e.IsLeader)
	if err := kv.Delete(context.Background(), "app"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a deposed loss", func() bool { return lossCount(t, reg, "deposed") == 1 })
}

func TestHealthFlipsWhenRenewalsStop(t *testing.T) {
	_, js, shutdown := bucket(t, 3*time.Second)
	e, _ := streams.NewElection("n1", "app", js, streams.WithRequestTimeout(200*time.Millisecond))
	start(t, e)
	waitUntil(t, "a win", e.IsLeader)
	h := metrics.HealthHandler(300*time.Millisecond, e)
	if code, body := serve(h); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthy leader: %d %q", code, body)
	}
	shutdown() // renewals now fail; the term still holds until its deadline
	waitUntil(t, "the health check to fail", func() bool { code, _ := serve(h); return code == http.StatusServiceUnavailable })
	if !e.IsLeader() {
		t.Fatal("health failed only after the term ended: it should flag a leader that still counts on its lease")
	}
	_, body := serve(h)
	if !strings.Contains(body, "last renewed") {
		t.Fatalf("body %q does not say why", body)
	}
	// At the deadline it stops leading, and a non-leader is healthy.
	waitUntil(t, "the term to end", func() bool { return !e.IsLeader() })
	if code, _ := serve(h); code != http.StatusOK {
		t.Fatalf("non-leader reported unhealthy: %d", code)
	}
}

func serve(h http.Handler) (int, string) {
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	body, _ := io.ReadAll(rr.Body)
	return rr.Code, string(body)
}

// series returns the value of the series of name whose labels include
// want, and whether there is one.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func find(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	return series(t, reg, name, nil)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := find(t, reg, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return v
}

func campaigns(t *testing.T, reg *prometheus.Registry, state string) float64 {
	t.Helper()
	v, _ := series(t, reg, "conclave_election_campaigns_total", map[string]string{"state": state})
	return v
}

func lossCount(t *testing.T, reg *prometheus.Registry, cause string) float64 {
	t.Helper()
	v, _ := series(t, reg, "conclave_election_losses_total", map[string]string{"cause": cause})
	return v
}

// candidates returns conclave_election_candidates of election app for
// health, and whether the series exists.
func candidates(t *testing.T, reg *prometheus.Registry, health string) (float64, bool) {
	t.Helper()
	return series(t, reg, "conclave_election_candidates", map[string]string{"election": "app", "health": health})
}

// awaitCandidates waits until reg reports healthy and unhealthy candidates
// of election app.
func awaitCandidates(t *testing.T, reg *prometheus.Registry, who string, healthy, unhealthy float64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%s to report %v healthy and %v unhealthy candidates", who, healthy, unhealthy), func() bool {
		h, okH := candidates(t, reg, "healthy")
		u, okU := candidates(t, reg, "unhealthy")
		return okH && okU && h == healthy && u == unhealthy
	})
}

// TestCandidatesGaugeFollowsTheCandidates: conclave_election_candidates
// counts the candidates of every process by health, in the leader's
// process and in one that only observes (a standby's process counts its
// own candidate): joining, turning unhealthy,
// dying without a word (within the announcement expiry, 5 s at TTL 1 s),
// stopping; it is gone from a process whose last candidate stopped.
func TestCandidatesGaugeFollowsTheCandidates(t *testing.T) {
	_, js1, _ := bucket(t, time.Second)
	url := js1.Conn().ConnectedUrl()
	connJS := func() jetstream.JetStream {
		_, js := natstest.Connect(t, url)
		return js
	}
	reg1, reg2, reg3 := prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()
	rec1, _ := metrics.New(reg1)
	rec2, _ := metrics.New(reg2)
	rec3, _ := metrics.New(reg3)
	if _, ok := candidates(t, reg1, "healthy"); ok {
		t.Fatal("a candidates gauge before any candidate")
	}

	e1, _ := streams.NewElection("n1", "app", js1, streams.WithRecorder(rec1))
	stop1 := start(t, e1)
	waitUntil(t, "n1 to lead", e1.IsLeader)
	awaitCandidates(t, reg1, "n1's process", 1, 0)
	var sick atomic.Bool
	check := func(context.Context) error {
		if sick.Load() {
			return errors.New("sick")
		}
		return nil
	}
	e2, _ := streams.NewElection("n2", "app", connJS(), streams.WithRecorder(rec2), streams.WithHealthCheck(check, 50*time.Millisecond))
	stop2 := start(t, e2)
	js3 := connJS()
	e3, _ := streams.NewElection("n3", "app", js3)
	done3 := make(chan error, 1)
	go func() { done3 <- e3.Start(context.Background()) }()
	awaitCandidates(t, reg1, "n1's process", 3, 0)

	// A process that only observes.
	js4 := connJS()
	obs, err := streams.NewObserver("app", js4, streams.ObserveStanding(js4.Conn()), streams.WithRecorder(rec3))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- obs.Run(ctx) }()
	awaitCandidates(t, reg3, "the observing process", 3, 0)

	// n2's process, of a standby, counts n2 alone.
	awaitCandidates(t, reg2, "n2's process", 1, 0)

	sick.Store(true)
	awaitCandidates(t, reg1, "n1's process", 2, 1)
	awaitCandidates(t, reg2, "n2's process", 0, 1)
	awaitCandidates(t, reg3, "the observing process", 2, 1)

	// n3's process dies: its connection closes without a word.
	js3.Conn().Close()
	if err := <-done3; err == nil {
		t.Fatal("n3's Start returned nil after its connection closed")
	}
	if h, _ := candidates(t, reg1, "healthy"); h != 2 {
		t.Fatalf("n1's process counts %v healthy at once after n3 died; want 2 until the announcements expire", h)
	}
	awaitCandidates(t, reg1, "n1's process", 1, 1)
	awaitCandidates(t, reg3, "the observing process", 1, 1)

	stop2()
	awaitCandidates(t, reg1, "n1's process", 1, 0)
	if _, ok := candidates(t, reg2, "healthy"); ok {
		t.Fatal("n2's process reports candidates after its only candidate stopped")
	}
	stop1()
	if _, ok := candidates(t, reg1, "healthy"); ok {
		t.Fatal("n1's process reports candidates after its only candidate stopped")
	}
	awaitCandidates(t, reg3, "the observing process", 0, 0)
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("observer Run: %v", err)
	}
	if _, ok := candidates(t, reg3, "healthy"); ok {
		t.Fatal("the observing process reports candidates after its observer stopped")
	}
}

// TestCandidatesGaugeCountsCopiesApart: copies that share an identity (a
// host's workers) are counted one by one, by the leader's process and by
// an observing one, and each leaves the count as it stops.
func TestCandidatesGaugeCountsCopiesApart(t *testing.T) {
	_, js1, _ := bucket(t, time.Second)
	regLeader, regObserver := prometheus.NewRegistry(), prometheus.NewRegistry()
	recLeader, _ := metrics.New(regLeader)
	recObserver, _ := metrics.New(regObserver)
	e1, _ := streams.NewElection("vm", "app", js1, streams.WithInstance("worker-1"), streams.WithRecorder(recLeader))
	start(t, e1)
	waitUntil(t, "worker-1 to lead", e1.IsLeader)
	var stops []func()
	for _, inst := range []string{"worker-2", "worker-3"} {
		e, _ := streams.NewElection("vm", "app", js1, streams.WithInstance(inst))
		stops = append(stops, start(t, e))
	}
	awaitCandidates(t, regLeader, "the leader's process", 3, 0)

	obs, err := streams.NewObserver("app", js1, streams.ObserveStanding(js1.Conn()), streams.WithRecorder(recObserver))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- obs.Run(ctx) }()
	awaitCandidates(t, regObserver, "the observing process", 3, 0)

	stops[1]()
	awaitCandidates(t, regLeader, "the leader's process", 2, 0)
	awaitCandidates(t, regObserver, "the observing process", 2, 0)
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("observer Run: %v", err)
	}
}

// TestRenewalAgeIsReadFromTheRecordersClock: WithClock sets the clock the
// renewal age is measured on: the age is the time on that clock since the
// last win or renewal, whatever the wall clock says.
func TestRenewalAgeIsReadFromTheRecordersClock(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := clocktest.New(time.Unix(1_000_000, 0))
	rec, err := metrics.New(reg, metrics.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	rec.Won("app")
	rec.Leading("app", true)
	clk.Advance(90 * time.Second)
	if age := gauge(t, reg, "conclave_election_last_renewal_age_seconds"); age != 90 {
		t.Fatalf("renewal age %v after the clock moved 90s from the win, want 90", age)
	}
	rec.Renewed("app", time.Millisecond)
	clk.Advance(2 * time.Second)
	if age := gauge(t, reg, "conclave_election_last_renewal_age_seconds"); age != 2 {
		t.Fatalf("renewal age %v 2s after a renewal on the clock, want 2", age)
	}
}
