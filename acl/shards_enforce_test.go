package acl_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// TestShardGroupUnderPermissions: a user who may campaign in app-a.> runs
// a shard group app-a.ingest: its members hear each other on the group's
// subject, which the grant allows, and split the shards evenly, rather
// than each, deaf to the others, racing for all of them.
func TestShardGroupUnderPermissions(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	held := map[string][]int{}
	var done sync.WaitGroup
	for _, id := range []string{"m1", "m2"} {
		g, err := shards.NewGroup(id, "app-a.ingest", 4, f.js(t, "app-a"),
			shards.OnAssigned(func(shard int, _ *streams.Term) {
				mu.Lock()
				held[id] = append(held[id], shard)
				mu.Unlock()
			}),
			shards.OnRevoked(func(shard int) {
				mu.Lock()
				held[id] = slices.DeleteFunc(held[id], func(s int) bool { return s == shard })
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		done.Go(func() {
			if err := g.Start(ctx); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n1, n2 := len(held["m1"]), len(held["m2"])
		mu.Unlock()
		if n1 == 2 && n2 == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m1 holds %d shards and m2 %d, want 2 each", n1, n2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	done.Wait()
}
