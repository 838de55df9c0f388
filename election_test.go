package conclave_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func TestNewElectionOverSharedConnection(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("shared-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	c := newCandidate()
	e, err := fw.NewElection(ctx, nil, "shared_app", c.callbacks()...)
	if err != nil {
		t.Fatalf("NewElection: %v", err)
	}
	if n := connectionsNamed(t, b.Server(), "shared-node"); n != 1 {
		t.Fatalf("%d connections named after the identity, want the shared one", n)
	}
	c.start(t, e)
	await(t, c.won, "win")
	if !e.IsLeader() {
		t.Error("IsLeader false after OnWon")
	}
	assertLeaderValue(t, ctx, fw, "shared_app", "shared-node")
	c.stop(t)
	await(t, c.lost, "loss after stop")
	if e.IsLeader() {
		t.Error("IsLeader true after Start returned")
	}
}

// assertLeaderValue checks that the election key holds identity, as `nats kv
// get` would show it.
func assertLeaderValue(t *testing.T, ctx context.Context, fw *conclave.Framework, key, identity string) {
	t.Helper()
	kv, err := fw.Bucket(ctx, nil)
	if err != nil {
		t.Fatalf("Bucket: %v", err)
	}
	ent, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if got := string(ent.Value()); got != identity {
		t.Errorf("key %s holds %q, want %q", key, got, identity)
	}
}

func TestNewElectionOverExplicitConnection(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("explicit-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := fw.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	c := newCandidate()
	e, err := fw.NewElection(ctx, nc, "explicit_app", c.callbacks()...)
	if err != nil {
		t.Fatalf("NewElection: %v", err)
	}
	if n := connectionsNamed(t, b.Server(), "explicit-node"); n != 1 {
		t.Fatalf("%d connections, want only the explicit one: no shared connection was needed", n)
	}
	c.start(t, e)
	await(t, c.won, "win")
	// The election writes over nc: closing it for good makes the leader
	// stand down and the campaign end with an error that says why.
	nc.Close()
	await(t, c.lost, "loss after the connection closed")
	select {
	case err := <-c.done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Start = %v, want an error wrapping nats.ErrConnectionClosed", err)
		}
		c.cancel()
		c.cancel = nil
	case <-time.After(wait):
		t.Fatal("Start did not return after its connection closed")
	}
}

func TestCampaignsTakeOverAndFence(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("campaign-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	terms := make(chan *streams.Term, 2)
	var cs [2]*candidate
	var es [2]*streams.Election
	for i := range cs {
		cs[i] = newCandidate()
		opts := append(cs[i].callbacks(), streams.OnLeading(func(tm *streams.Term) { terms <- tm }))
		e, err := fw.NewCampaign(ctx, nil, "fenced_app", opts...)
		if err != nil {
			t.Fatalf("NewCampaign: %v", err)
		}
		es[i] = e
		cs[i].start(t, e)
	}
	var first *streams.Term
	select {
	case first = <-terms:
	case <-time.After(wait):
		t.Fatal("nobody won")
	}
	leader := 0
	if es[1].Term() == first {
		leader = 1
	}
	if es[leader].Term() != first || first.Identity() != "campaign-node" || first.Key() != "fenced_app" {
		t.Fatalf("term %v not the leader's", first)
	}
	cs[leader].stop(t) // graceful: the other takes over at once
	var second *streams.Term
	select {
	case second = <-terms:
	case <-time.After(wait):
		t.Fatal("no takeover after a graceful stop")
	}
	if second.Token() <= first.Token() {
		t.Errorf("token %d after %d: tokens must grow across terms", second.Token(), first.Token())
	}
	if es[1-leader].Term() != second {
		t.Error("the second term is not the standby's")
	}
}

func TestNewObserver(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("observed-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	elected := make(chan streams.Leadership, 10)
	current := make(chan struct{}, 1)
	o, err := fw.NewObserver(ctx, nil, "observed_app", streams.OnChange(func(l streams.Leadership) {
		switch l.Event {
		case streams.EventElected:
			elected <- l
		case streams.EventCurrent:
			current <- struct{}{}
		}
	}))
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}
	octx, ocancel := context.WithCancel(ctx)
	odone := make(chan error, 1)
	go func() { odone <- o.Run(octx) }()
	defer func() { ocancel(); <-odone }()
	// The observer reports the key's state when its watch is up: an
	// election that began before would be reported as current, not elected.
	select {
	case <-current:
	case <-time.After(wait):
		t.Fatal("the observer reported no current state")
	}

	c := newCandidate()
	e, err := fw.NewElection(ctx, nil, "observed_app", c.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	select {
	case l := <-elected:
		if l.Leader != "observed-node" {
			t.Errorf("observer saw %q elected, want observed-node", l.Leader)
		}
	case <-time.After(wait):
		t.Fatal("observer saw no election")
	}
}

func TestNewElectionInvalidKey(t *testing.T) {
	fw := newFramework(t, testConfig("key-node", natstest.DeadURL(t)))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The key is checked before connecting: no broker is needed to learn it is wrong.
	if _, err := fw.NewElection(ctx, nil, "my app"); !errors.Is(err, streams.ErrInvalidKey) {
		t.Errorf("NewElection(\"my app\"): %v, want ErrInvalidKey", err)
	}
	if _, err := fw.NewObserver(ctx, nil, "a.*"); !errors.Is(err, streams.ErrInvalidKey) {
		t.Errorf("NewObserver(\"a.*\"): %v, want ErrInvalidKey", err)
	}
}

func TestUserOptionsWin(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("opts-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	logger, buf := bufferLogger()
	c := newCandidate()
	e, err := fw.NewElection(ctx, nil, "opts_app", append(c.callbacks(), streams.WithLogger(logger.WithField("mine", true)))...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	await(t, c.won, "win")
	if !strings.Contains(buf.String(), `"mine":true`) {
		t.Errorf("the election did not log through the user's logger: %q", buf.String())
	}
}

// startPlainServer starts a nats-server without the election bucket,
// with or without JetStream.
func startPlainServer(t *testing.T, jetStream bool) *server.Server {
	t.Helper()
	return natstest.Start(t, &server.Options{ServerName: "plain", JetStream: jetStream})
}

func TestMissingBucket(t *testing.T) {
	for _, js := range []bool{true, false} {
		name := map[bool]string{true: "JetStream without the bucket", false: "no JetStream"}[js]
		t.Run(name, func(t *testing.T) {
			srv := startPlainServer(t, js)
			fw := newFramework(t, testConfig("bucketless-node", srv.ClientURL()))
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err := fw.NewElection(ctx, nil, "app")
			if !errors.Is(err, conclave.ErrNoBucket) {
				t.Fatalf("NewElection error %v does not match ErrNoBucket", err)
			}
			for _, want := range []string{"CHORIA_LEADER_ELECTION", srv.ClientURL(), "server plain", "plugin.choria.broker_network = true", "nats kv add CHORIA_LEADER_ELECTION --ttl 60s --history 1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// metricValue returns the value of the metric family name with label
// election=key in reg, and whether it exists.
func metricValue(t *testing.T, reg *prometheus.Registry, name, key string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "election", key) {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue(), true
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestMetricsAfterWin(t *testing.T) {
	b := startBroker(t)
	reg := prometheus.NewRegistry()
	fw := newFramework(t, testConfig("metered-node", b.ClientURL()), conclave.WithRegisterer(reg))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	if _, ok := metricValue(t, reg, "conclave_election_wins_total", "metered_app"); ok {
		t.Fatal("a win recorded before any election ran")
	}
	c := newCandidate()
	e, err := fw.NewElection(ctx, nil, "metered_app", c.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	await(t, c.won, "win")
	for name, want := range map[string]float64{"conclave_election_wins_total": 1, "conclave_election_leader": 1} {
		if got, ok := metricValue(t, reg, name, "metered_app"); !ok || got != want {
			t.Errorf("%s{election=metered_app} = %v (present %v), want %v", name, got, ok, want)
		}
	}
	c.stop(t)
	if got, _ := metricValue(t, reg, "conclave_election_leader", "metered_app"); got != 0 {
		t.Errorf("conclave_election_leader = %v after stop, want 0", got)
	}
}

// TestObserverCountsTheCandidates: fw.NewObserver follows who stands, and
// with WithRegisterer the framework's conclave_election_candidates counts
// them, in a process that only observes.
func TestObserverCountsTheCandidates(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reg := prometheus.NewRegistry()
	fw := newFramework(t, testConfig("watcher", b.ClientURL()), conclave.WithRegisterer(reg))
	obs, err := fw.NewObserver(ctx, nil, "counted_app")
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- obs.Run(ctx) }()
	for _, id := range []string{"n1", "n2"} {
		c := newCandidate()
		e, err := newFramework(t, testConfig(id, b.ClientURL())).NewElection(ctx, nil, "counted_app", c.callbacks()...)
		if err != nil {
			t.Fatal(err)
		}
		c.start(t, e)
	}
	healthy := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "conclave_election_candidates" && labelIs(m, "election", "counted_app") && labelIs(m, "health", "healthy") {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	deadline := time.Now().Add(wait)
	for healthy() != 2 || len(obs.Candidates()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("conclave_election_candidates{health=healthy} = %v and the observer lists %+v, want 2 of each", healthy(), obs.Candidates())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cs := obs.Candidates(); cs[0].Identity != "n1" || cs[1].Identity != "n2" {
		t.Fatalf("the observer lists %+v, want n1 and n2", cs)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("observer Run: %v", err)
	}
}
