package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// TestHandOverLandsOnTheNamedCandidate: a leader asked to hand the
// election over to a named candidate ends its term, and the named one,
// not any other, leads next, a hundred times in a row among three
// candidates in three processes.
func TestHandOverLandsOnTheNamedCandidate(t *testing.T) {
	t.Parallel()
	const tries = 100
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	names := []string{"a", "b", "c"}
	es := map[string]*Election{}
	for _, name := range names {
		es[name] = mustElection(t, name, "handover", openBucket(t, connect(t, ts.url())), rec.options(name)...)
		runElection(t, es[name])
	}
	rec.waitFor(t, 10*time.Second, "a leader", func(evs []event) bool { return wins(evs, "") == 1 })
	waitStanding(t, connect(t, ts.url()), "handover", names...)
	var took []time.Duration
	for i := range tries {
		evs := rec.snapshot()
		leader := evs[len(evs)-1].who
		others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == leader })
		to := others[i%2]
		before := wins(evs, "")
		asked := time.Now()
		if err := es[leader].HandOver(context.Background(), to); err != nil {
			t.Fatalf("try %d: %s.HandOver(%s): %v", i, leader, to, err)
		}
		evs = rec.waitFor(t, 5*time.Second, fmt.Sprintf("try %d: the next leader after %s handed over to %s", i, leader, to),
			func(evs []event) bool { return wins(evs, "") == before+1 })
		next := evs[len(evs)-1]
		if !next.won || next.who != to {
			t.Fatalf("try %d: %s handed over to %s, but %s leads: %s", i, leader, to, next.who, describe(evs))
		}
		took = append(took, time.Since(asked))
		if ended := evs[len(evs)-2]; ended.who != leader || ended.won || ended.cause != CauseHandedOver {
			t.Fatalf("try %d: before %s led: %s %v (won %v), want %s's term ended by %v", i, to, ended.who, ended.cause, ended.won, leader, CauseHandedOver)
		}
	}
	checkHistory(t, rec.snapshot())
	slices.Sort(took)
	t.Logf("%d hand-overs, each to the named candidate: from the call to its OnWon p50 %v, p99 %v, max %v",
		tries, took[len(took)/2].Round(10*time.Microsecond), took[len(took)*99/100].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
}

// TestHandOverToACandidateNotStandingIsRefused: a hand-over to a
// candidate that is not standing is refused before the term ends, and the
// leader goes on leading: it would leave the election without a leader.
func TestHandOverToACandidateNotStandingIsRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "absent", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "absent", openBucket(t, connect(t, ts.url())), rec.options("b")...))
	waitStanding(t, connect(t, ts.url()), "absent", "a", "b")
	token := a.Term().Token()
	if err := a.HandOver(context.Background(), "gone-host"); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("HandOver to a candidate not standing = %v, want ErrHandOverRefused", err)
	}
	if !a.IsLeader() || a.Term() == nil || a.Term().Token() != token {
		t.Fatalf("after a refused hand-over a leads %v with term %v, want its term %d going on", a.IsLeader(), a.Term(), token)
	}
	checkHistory(t, rec.snapshot())
}

// TestHandOverNotTakenUpFallsBack: a hand-over to a candidate that stands
// but does not take up the offer of the key (an older version) leaves the
// election without a leader for the hand-over's window only; then another
// candidate leads as after any release.
func TestHandOverNotTakenUpFallsBack(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	window := clamp(ttl/4, 500*time.Millisecond, 5*time.Second)
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	a := mustElection(t, "a", "fallback", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	runElection(t, mustElection(t, "b", "fallback", openBucket(t, connect(t, ts.url())), rec.options("b")...))
	standAsOlder(t, connect(t, ts.url()), "fallback", standing.Candidate{Identity: "old-host", Healthy: true})
	released := time.Now()
	if err := a.HandOver(context.Background(), "old-host"); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitFor(t, window+ttl, "someone to lead after the window", func(evs []event) bool { return wins(evs, "") == 2 })
	next := evs[len(evs)-1]
	if after := next.at.Sub(released); after < window*9/10 {
		t.Fatalf("%s led %v after a handed over to an absent candidate, within the %v window", next.who, after, window)
	} else {
		t.Logf("%s led %v after the hand-over to an absent candidate (window %v)", next.who, after.Round(time.Millisecond), window)
	}
	checkHistory(t, evs)
}

// TestHandOverIsForLeadersOnly: a candidate that does not lead cannot hand
// over, nor can a leader to itself or to a name that is not an identity.
func TestHandOverIsForLeadersOnly(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "leaders-only", kv, rec.options("a")...)
	if err := a.HandOver(context.Background(), "b"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("HandOver before Start = %v, want ErrNotLeader", err)
	}
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "leaders-only", openBucket(t, connect(t, ts.url())), rec.options("b")...)
	runElection(t, b)
	eventually(t, 5*time.Second, "b to stand by", func() bool { return b.State() == CandidateState })
	if err := b.HandOver(context.Background(), "a"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a standby's HandOver = %v, want ErrNotLeader", err)
	}
	if err := a.HandOver(context.Background(), "a"); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("HandOver to itself = %v, want ErrInvalidIdentity", err)
	}
	if err := a.HandOver(context.Background(), " b"); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("HandOver to an invalid identity = %v, want ErrInvalidIdentity", err)
	}
	if !a.IsLeader() {
		t.Fatal("a refused hand-over ended a's term")
	}
	checkHistory(t, rec.snapshot())
}

// TestHandOverIsOneWriteChoriaSeesANewHolder: a hand-over to a running
// Conclave candidate stores one message, the named candidate's write over
// the leader's last revision, with no release between. A Choria candidate
// watching the key sees the holder change, as after any takeover, and its
// Create fails while the new leader holds the key.
func TestHandOverIsOneWriteChoriaSeesANewHolder(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "one-write", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "one-write", openBucket(t, connect(t, ts.url())), rec.options("b")...)
	runElection(t, b)
	eventually(t, 5*time.Second, "b to stand by", func() bool { return b.State() == CandidateState })
	waitStanding(t, connect(t, ts.url()), "one-write", "a", "b")

	choria := openBucket(t, connect(t, ts.url()))
	w, err := choria.Watch(context.Background(), "one-write")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := make(chan jetstream.KeyValueEntry, 100)
	go func() {
		for e := range w.Updates() {
			if e != nil {
				seen <- e
			}
		}
	}()
	// The hand-over may have to wait for b's steward to start (it then
	// falls back to a release): try until one lands as a single write.
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("no hand-over in 5 tries was a single write by the named candidate")
		}
		from, to := a, b
		if b.IsLeader() {
			from, to = b, a
		}
		before := wins(rec.snapshot(), to.identity)
		last, err := choria.Get(context.Background(), "one-write")
		if err != nil {
			t.Fatal(err)
		}
		if err := from.HandOver(context.Background(), to.identity); err != nil {
			t.Fatalf("%s.HandOver(%s): %v", from.identity, to.identity, err)
		}
		rec.waitFor(t, 5*time.Second, to.identity+" to lead", func(evs []event) bool { return wins(evs, to.identity) == before+1 })
		var after []jetstream.KeyValueEntry
	drain:
		for {
			select {
			case e := <-seen:
				if e.Revision() > last.Revision() {
					after = append(after, e)
				}
			case <-time.After(100 * time.Millisecond):
				break drain
			}
		}
		if len(after) == 0 {
			t.Fatalf("try %d: the watch saw nothing after revision %d", try, last.Revision())
		}
		first := after[0]
		if first.Operation() != jetstream.KeyValuePut {
			t.Logf("try %d: the hand-over began with %v at revision %d (a release): again", try, first.Operation(), first.Revision())
			continue
		}
		if string(first.Value()) != to.identity || first.Revision() != last.Revision()+1 {
			t.Fatalf("try %d: after %s's revision %d the key holds %q at %d; want %s's write at %d",
				try, from.identity, last.Revision(), first.Value(), first.Revision(), to.identity, last.Revision()+1)
		}
		if _, err := choria.Create(context.Background(), "one-write", []byte("choria.example.net")); !errors.Is(err, jetstream.ErrKeyExists) {
			t.Fatalf("Choria's Create while %s leads: %v, want ErrKeyExists", to.identity, err)
		}
		break
	}
	checkHistory(t, rec.snapshot())
}

// TestChoriaCandidateSeesAHandOverAsARelease: when the named candidate does
// not take up the offer of the key (here none of that name runs), the
// hand-over is a release naming it: to Choria's candidates (and nats kv
// get) a delete marker, which they may take at once as after any release;
// Conclave's candidates then respect their lead.
func TestChoriaCandidateSeesAHandOverAsARelease(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "mixed", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	standAsOlder(t, connect(t, ts.url()), "mixed", standing.Candidate{Identity: "b", Healthy: true})
	if err := a.HandOver(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	choria := openBucket(t, connect(t, ts.url()))
	if _, err := choria.Get(context.Background(), "mixed"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Get after a hand-over = %v, want ErrKeyNotFound (a deleted key)", err)
	}
	// Choria's candidate campaigns with Create, which a delete marker allows.
	if _, err := choria.Create(context.Background(), "mixed", []byte("choria.example.net")); err != nil {
		t.Fatalf("Choria's Create after a hand-over: %v", err)
	}
	time.Sleep(time.Second) // a span in which a must not lead again: the key is Choria's
	if a.IsLeader() {
		t.Fatal("a leads while Choria's candidate holds the key")
	}
	checkHistory(t, rec.snapshot())
}

// TestHandOverToAnIdentitySeveralCandidatesShare: a host may run several
// candidates under one identity. All of them take up the leader's offer
// of the key, one write lands, and the hand-over succeeds every time, not
// failing on whichever refusal (the losers' compare-and-swap) answers
// first.
func TestHandOverToAnIdentitySeveralCandidatesShare(t *testing.T) {
	t.Parallel()
	const tries = 20
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "shared", openBucket(t, connect(t, ts.url())), rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	var bs []*Election
	for range 3 {
		b := mustElection(t, "b", "shared", openBucket(t, connect(t, ts.url())), rec.options("b")...)
		runElection(t, b)
		bs = append(bs, b)
	}
	for _, b := range bs {
		eventually(t, 5*time.Second, "the b candidates to stand by", func() bool { return b.State() == CandidateState })
	}
	eventually(t, 5*time.Second, "all four candidates to take hand-over offers", func() bool {
		return subscribers(t, ts, standing.HandOverSubject(bucketName, "shared")) == 4
	})
	for i := range tries {
		leader, to := a, "b"
		for _, b := range bs {
			if b.IsLeader() {
				leader, to = b, "a"
			}
		}
		before := wins(rec.snapshot(), to)
		if err := leader.HandOver(context.Background(), to); err != nil {
			t.Fatalf("try %d: %s.HandOver(%s): %v", i, leader.identity, to, err)
		}
		rec.waitFor(t, 5*time.Second, fmt.Sprintf("try %d: %s to lead", i, to), func(evs []event) bool { return wins(evs, to) == before+1 })
	}
	checkHistory(t, rec.snapshot())
}

// TestRequestHandOverOutlastsAnOfferNotTakenUp: at a TTL of 20 s, a named
// candidate that does not take up the offer of the key (none of that name
// runs) costs the offer's timeout, at most a second, before the release
// naming it: RequestHandOver, with its default deadline of 5 s, hears the
// leader's answer rather than giving up first.
func TestRequestHandOverOutlastsAnOfferNotTakenUp(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	a := mustElection(t, "a", "slow-offer", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 10*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	standAsOlder(t, connect(t, ts.url()), "slow-offer", standing.Candidate{Identity: "old-b", Healthy: true})
	asked := time.Now()
	from, err := standing.RequestHandOver(context.Background(), connect(t, ts.url()), bucketName, "slow-offer", "old-b")
	if err != nil || from != "a" {
		t.Fatalf("RequestHandOver after %v: from %q, %v; want a's answer", time.Since(asked).Round(time.Millisecond), from, err)
	}
	e, err := kv.Get(context.Background(), "slow-offer")
	if !errors.Is(err, jetstream.ErrKeyNotFound) && (err != nil || e.Operation() == jetstream.KeyValuePut) {
		t.Fatalf("after the hand-over the key is %v (%v), want the release naming old-b", e, err)
	}
}

// readmeCandidate is a candidate made as the README's direct-API example
// makes one: its own connection, jetstream.New, and NewElection with no
// options but callbacks and a logger.
type readmeCandidate struct {
	e    *Election
	won  chan time.Time
	done chan error
}

func newReadmeCandidate(t *testing.T, url, identity, key string) *readmeCandidate {
	t.Helper()
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := &readmeCandidate{won: make(chan time.Time, 4), done: make(chan error, 1)}
	c.e, err = NewElection(identity, key, js,
		OnWon(func() { c.won <- time.Now() }),
		WithLogger(testLogger{t, identity + ": "}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { c.done <- c.e.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			t.Errorf("Start of %s did not return", identity)
		}
	})
	return c
}

func (c *readmeCandidate) waitWon(t *testing.T, within time.Duration) time.Time {
	t.Helper()
	select {
	case at := <-c.won:
		return at
	case <-time.After(within):
		t.Fatalf("%s did not lead within %v", c.e.Identity(), within)
		return time.Time{}
	}
}

func (c *readmeCandidate) stop(t *testing.T) {
	t.Helper()
	c.e.Stop()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Start of %s returned %v", c.e.Identity(), err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Start of %s did not return after Stop", c.e.Identity())
	}
}

// TestFastPathHandOver: candidates made exactly as the README shows hand
// over at once when the leader stops, on a bucket with a 10s TTL: its
// release is marked, so neither a running standby nor a candidate that
// starts after the release waits for the TTL, as they would after an
// unmarked delete (a forced stand-down). Both on a bucket as Conclave's
// broker provisions it (per-message TTLs) and on a plain one (a Choria
// broker, or nats kv add).
func TestFastPathHandOver(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name   string
		create func(testing.TB, *nats.Conn, jetstream.KeyValueConfig) jetstream.KeyValue
	}{
		{"provisioned bucket", createBucket},
		{"plain bucket", createPlainBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			tc.create(t, connect(t, ts.url()), bucketConfig(ttl))

			leader := newReadmeCandidate(t, ts.url(), "host1", "my_app")
			leader.waitWon(t, 5*time.Second)
			standby := newReadmeCandidate(t, ts.url(), "host2", "my_app")
			eventually(t, 5*time.Second, "host2 to campaign", func() bool { return standby.e.State() == CandidateState })
			time.Sleep(500 * time.Millisecond) // host2 follows the key

			stopped := time.Now()
			leader.stop(t)
			handOver := standby.waitWon(t, ttl+5*time.Second).Sub(stopped)
			t.Logf("hand-over to a running standby (TTL %v): %v", ttl, handOver)
			if handOver >= time.Second {
				t.Fatalf("host2 led %v after host1's Stop, want well within a second (the TTL is %v): the release was not marked", handOver, ttl)
			}

			// A candidate that starts after the release leads at once too.
			standby.stop(t)
			time.Sleep(200 * time.Millisecond)
			started := time.Now()
			late := newReadmeCandidate(t, ts.url(), "host3", "my_app")
			lead := late.waitWon(t, ttl+5*time.Second).Sub(started)
			t.Logf("a candidate started after the release led after %v", lead)
			if lead >= time.Second {
				t.Fatalf("host3, started after host2's release, led after %v, want well within a second", lead)
			}
		})
	}
}
