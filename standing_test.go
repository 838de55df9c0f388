package conclave_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// standingAs waits until identity answers who is standing in key as match
// accepts.
func standingAs(t *testing.T, url, key, identity string, match func(standing.Candidate) bool) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(wait)
	for {
		cs, err := standing.Standing(context.Background(), nc, bucket.Name, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Identity == identity && match(c) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not stand in %s as wanted within %v: %+v", identity, key, wait, cs)
		}
	}
}

// TestConfigPriorityAndMinTerm: plugin.conclave.election.priority and
// .min_term reach the framework's elections: a node of priority 5 joining
// takes over from one of priority 0 whose min_term is 1s, well before the
// default minimum term (10s).
func TestConfigPriorityAndMinTerm(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	cfgLow := testConfig("low", b.ClientURL())
	cfgLow.ElectionMinTerm = time.Second
	low := newCandidate()
	e, err := newFramework(t, cfgLow).NewElection(ctx, nil, "ranked", low.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	low.start(t, e)
	await(t, low.won, "low's win")
	began := time.Now()

	cfgHigh := testConfig("high", b.ClientURL())
	cfgHigh.ElectionPriority = 5
	high := newCandidate()
	e2, err := newFramework(t, cfgHigh).NewElection(ctx, nil, "ranked", high.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	high.start(t, e2)
	await(t, high.won, "high's takeover")
	if took := time.Since(began); took > 8*time.Second {
		t.Errorf("low handed over %v into its term: min_term 1s not applied", took)
	}
	await(t, low.lost, "low's hand-over")
	standingAs(t, b.ClientURL(), "ranked", "high", func(c standing.Candidate) bool { return c.Priority == 5 && c.Leader })
}

// TestFrameworkHealthCheck: WithHealthCheck gates the framework's
// elections: unhealthy, the node stands but does not campaign; healthy, it
// leads.
func TestFrameworkHealthCheck(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var healthy atomic.Bool
	check := func(context.Context) error {
		if healthy.Load() {
			return nil
		}
		return errors.New("not ready")
	}
	fw := newFramework(t, testConfig("gated", b.ClientURL()), conclave.WithHealthCheck(check, 100*time.Millisecond))
	c := newCandidate()
	e, err := fw.NewElection(ctx, nil, "gated_app", c.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	standingAs(t, b.ClientURL(), "gated_app", "gated", func(c standing.Candidate) bool { return !c.Healthy })
	select {
	case <-c.won:
		t.Fatal("an unhealthy node won")
	default:
	}
	healthy.Store(true)
	await(t, c.won, "the win once healthy")

	if _, err := conclave.NewWithConfig(testConfig("x"), conclave.WithHealthCheck(nil, time.Second)); !errors.Is(err, conclave.ErrInvalidOption) {
		t.Errorf("WithHealthCheck(nil): %v, want ErrInvalidOption", err)
	}
}

// TestConfigPriorityOutOfRange: a configuration built in code is checked
// too.
func TestConfigPriorityOutOfRange(t *testing.T) {
	cfg := testConfig("x")
	cfg.ElectionPriority = 1 << 31
	_, err := conclave.NewWithConfig(cfg)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "plugin.conclave.election.priority") {
		t.Errorf("priority 1<<31: %v, want config.ErrInvalid naming the key", err)
	}
	cfg = testConfig("x")
	cfg.ElectionMinTerm = -time.Second
	if _, err := conclave.NewWithConfig(cfg); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "plugin.conclave.election.min_term") {
		t.Errorf("min_term -1s: %v, want config.ErrInvalid naming the key", err)
	}
}
