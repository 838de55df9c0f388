package acl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// stand runs a candidate named identity in election key as user, until the
// test ends, and returns it once it leads (lead) or stands.
func (f *fixture) stand(t *testing.T, user, identity, key string, lead bool) *streams.Election {
	t.Helper()
	_, js := f.kv(t, user)
	won := make(chan struct{}, 1)
	e, err := streams.NewElection(identity, key, js, streams.OnWon(func() {
		select {
		case won <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	t.Cleanup(func() {
		e.Stop()
		if err := <-done; err != nil {
			t.Errorf("%s in %s: %v", identity, key, err)
		}
	})
	if lead {
		select {
		case <-won:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not win %s", identity, key)
		}
	}
	return e
}

// whoStands asks, as nc's user, who stands in key.
func whoStands(t *testing.T, nc *nats.Conn, key string) []string {
	t.Helper()
	cs, err := standing.Standing(context.Background(), nc, bucket, key, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Identity)
	}
	return ids
}

// waitStanding asks as nc's user until want stand in key.
func waitStanding(t *testing.T, nc *nats.Conn, key string, want int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := whoStands(t, nc, key)
		if len(ids) >= want {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d candidates answer in %s, want %d: %v", len(ids), key, want, ids)
		}
	}
}

// TestWhoStandsIsScopedByElection: a user of app-a.> can ask who stands in
// app-a.x, and its candidates can answer (allow_responses), also to an
// observer; it cannot ask in billing.x, nor ask billing.x's leader to hand
// over; an observer cannot ask for a hand-over.
func TestWhoStandsIsScopedByElection(t *testing.T) {
	f := newFixture(t)
	f.stand(t, "app-a", "a1", "app-a.x", true)
	a2 := f.stand(t, "app-a", "a2", "app-a.x", false)
	f.stand(t, "ops", "o1", "billing.x", true)

	// The candidates of app-a.x answer app-a and dash (another user: the
	// answers go to dash's inbox, allowed as responses).
	ncA, _ := f.conn(t, "app-a")
	if ids := waitStanding(t, ncA, "app-a.x", 2); len(ids) != 2 {
		t.Errorf("app-a sees %v standing in app-a.x, want a1 and a2", ids)
	}
	ncD, _ := f.conn(t, "dash")
	if ids := waitStanding(t, ncD, "app-a.x", 2); len(ids) != 2 {
		t.Errorf("dash sees %v standing in app-a.x, want a1 and a2", ids)
	}
	if ids := waitStanding(t, ncD, "billing.x", 1); len(ids) != 1 {
		t.Errorf("dash sees %v standing in billing.x, want o1", ids)
	}

	// app-a may not ask in billing.x: refused, and nobody answers.
	if ids := whoStands(t, ncA, "billing.x"); len(ids) != 0 {
		t.Errorf("app-a sees %v standing in billing.x", ids)
	}
	refused(t, "app-a asking who stands in billing.x", ncA, errors.New("no answer"), standing.CandidatesSubject(bucket, "billing.x"))

	// Nor ask billing.x's leader to hand over.
	ctx, cancel := short()
	defer cancel()
	_, err := standing.RequestHandOver(ctx, ncA, bucket, "billing.x", "a1")
	if !errors.Is(err, standing.ErrNoLeaderAnswered) {
		t.Errorf("app-a's hand-over request in billing.x: %v, want no answer", err)
	}
	refused(t, "app-a asking billing.x to hand over", ncA, err, standing.HandOverSubject(bucket, "billing.x"))

	// An observer may ask who stands, not for a hand-over.
	ctx, cancel = short()
	defer cancel()
	ncD2, _ := f.conn(t, "dash")
	_, err = standing.RequestHandOver(ctx, ncD2, bucket, "app-a.x", "a2")
	refused(t, "dash asking app-a.x to hand over", ncD2, err, standing.HandOverSubject(bucket, "app-a.x"))

	// app-a may: a1 hands over to a2, by offering a2 the key, which a2
	// takes with its own write (its answer goes to a1's inbox): the key
	// goes from a1 to a2 with no release between.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kvA, _ := f.kv(t, "app-a")
	w, err := kvA.Watch(ctx, "app-a.x", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if from, err := standing.RequestHandOver(ctx, ncA, bucket, "app-a.x", "a2"); err != nil || from != "a1" {
		t.Errorf("app-a's hand-over request in app-a.x: from %q, %v; want a1 to hand over", from, err)
	}
	took := false
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			t.Fatalf("the hand-over stored a %v at revision %d: a2 did not take up a1's offer of the key", e.Operation(), e.Revision())
		}
		if string(e.Value()) == "a2" {
			took = true
			break
		}
	}
	if !took {
		t.Fatal("the watch ended before a2's write")
	}
	eventuallyLeads(t, a2)
}

// eventuallyLeads waits for e to lead.
func eventuallyLeads(t *testing.T, e *streams.Election) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !e.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not lead", e.Identity())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
