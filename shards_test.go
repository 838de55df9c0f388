package conclave_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// TestFrameworksSplitAShardGroup: two frameworks' members of one group,
// each under its framework's identity over its shared connection, hold
// half the shards each, and report them in the framework's metrics.
func TestFrameworksSplitAShardGroup(t *testing.T) {
	b := startBroker(t)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	holders := map[int]string{}
	changed := make(chan struct{}, 1)
	for i, id := range []string{"n1", "n2"} {
		var opts []conclave.Option
		if i == 0 {
			opts = append(opts, conclave.WithRegisterer(reg))
		}
		fw := newFramework(t, testConfig(id, b.ClientURL()), opts...)
		g, err := fw.NewShardGroup(context.Background(), nil, "work", 8,
			shards.OnAssigned(func(s int, term *streams.Term) {
				mu.Lock()
				holders[s] = term.Identity()
				mu.Unlock()
				select {
				case changed <- struct{}{}:
				default:
				}
			}),
			shards.OnRevoked(func(s int) { mu.Lock(); delete(holders, s); mu.Unlock() }))
		if err != nil {
			t.Fatalf("NewShardGroup: %v", err)
		}
		if g.Identity() != id {
			t.Errorf("member identity %q, want the framework's %q", g.Identity(), id)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		})
	}
	deadline := time.After(wait)
	for {
		mu.Lock()
		c := map[string]int{}
		for _, id := range holders {
			c[id]++
		}
		mu.Unlock()
		if c["n1"] == 4 && c["n2"] == 4 {
			break
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("not 4 each within %v: %v", wait, c)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "conclave_shards_held" {
			found = true
		}
	}
	if !found {
		t.Error("no conclave_shards_held in the framework's registry")
	}
}

// TestNewShardGroupChecksTheGroupFirst: a bad name fails before any
// connection is made.
func TestNewShardGroupChecksTheGroupFirst(t *testing.T) {
	fw := newFramework(t, testConfig("n1", "nats://127.0.0.1:1"))
	if _, err := fw.NewShardGroup(context.Background(), nil, "bad name", 4); !errors.Is(err, shards.ErrInvalidGroup) {
		t.Errorf("NewShardGroup: %v, want shards.ErrInvalidGroup", err)
	}
}
