package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests in this file check that what an Observer reports is true of the
// election key on a real nats-server. They play the candidates themselves,
// with raw KV writes as a leader makes them: kv.Create to be elected,
// kv.Update over the latest revision to renew.

// truthObserver is an Observer running in the background, with every
// change it reported and the error its Run returned, if it returned.
type truthObserver struct {
	o *Observer

	mu      sync.Mutex
	changes []Leadership

	done   chan struct{} // closed when Run has returned
	runErr error         // what Run returned; read only after done is closed
}

func (r *truthObserver) add(l Leadership) {
	r.mu.Lock()
	r.changes = append(r.changes, l)
	r.mu.Unlock()
}

func (r *truthObserver) snapshot() []Leadership {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Leadership(nil), r.changes...)
}

// ended reports whether Run has returned, and with what.
func (r *truthObserver) ended() (bool, error) {
	select {
	case <-r.done:
		return true, r.runErr
	default:
		return false, nil
	}
}

// history describes the changes reported so far, one a line.
func (r *truthObserver) history() string {
	var b strings.Builder
	for _, l := range r.snapshot() {
		fmt.Fprintf(&b, "\n  %s (event %s, state %v, token %d, revision %d)", l, l.Event, l.State, l.Token, l.Revision)
	}
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

// startTruthObserver runs an observer of key in kv, sharing js's connection
// as the framework's does, until the test ends. Unless runMayFail, Run must
// not return before then.
func startTruthObserver(t *testing.T, key string, kv jetstream.KeyValue, js jetstream.JetStream, runMayFail bool, opts ...Option) *truthObserver {
	t.Helper()
	r := &truthObserver{done: make(chan struct{})}
	opts = append([]Option{OnChange(r.add), WithLogger(testLogger{t: t, prefix: "observer: "})}, opts...)
	o, err := NewObserver(key, js, opts...)
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}
	r.o = o
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		r.runErr = o.Run(ctx)
	}()
	t.Cleanup(func() {
		early, err := r.ended()
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Errorf("the observer's Run did not return after its context ended")
			return
		}
		switch {
		case early && err != nil && !runMayFail:
			t.Errorf("the observer's Run returned before the test ended: %v", err)
		case !early && r.runErr != nil:
			t.Errorf("the observer's Run returned %v when its context ended", r.runErr)
		}
	})
	return r
}

// waitLeadership polls the observer's Leadership every 20ms until cond
// holds or within passes, and fails t then, saying what it was waiting for,
// what the observer last said and every change it reported.
func (r *truthObserver) waitLeadership(t *testing.T, within time.Duration, what string, cond func(Leadership) bool) Leadership {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := r.o.Leadership()
		if cond(l) {
			return l
		}
		if ended, err := r.ended(); ended {
			t.Fatalf("waiting for %s: the observer's Run returned %v; it last reported %s; changes reported:%s", what, err, l, r.history())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the observer did not report %s within %v: Leadership() = %s (event %s, token %d, revision %d); changes reported:%s",
				what, within, l, l.Event, l.Token, l.Revision, r.history())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// truthRenewer renews a leader's term as a leader does: it writes its
// identity over the key's latest revision at a steady interval.
type truthRenewer struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu   sync.Mutex
	last uint64    // the revision of the latest write
	at   time.Time // when the latest write was acknowledged
	n    int       // renewals made
	err  error     // the renewal that failed, ending the renewer
}

// startRenewing renews identity's hold on key, written at revision rev,
// every interval until stopped, the test ends, or a renewal fails.
func startRenewing(t *testing.T, kv jetstream.KeyValue, key, identity string, rev uint64, every time.Duration) *truthRenewer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &truthRenewer{cancel: cancel, done: make(chan struct{}), last: rev, at: time.Now()}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r.mu.Lock()
			last := r.last
			r.mu.Unlock()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			next, err := kv.Update(wctx, key, []byte(identity), last)
			wcancel()
			r.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					r.err = err
				}
				r.mu.Unlock()
				return
			}
			r.last, r.at, r.n = next, time.Now(), r.n+1
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends the renewals and returns the revision of the latest write.
func (r *truthRenewer) stop() uint64 {
	last, _ := r.stopAt()
	return last
}

// stopAt ends the renewals and returns the revision of the latest write
// and when it was acknowledged.
func (r *truthRenewer) stopAt() (uint64, time.Time) {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.at
}

// renewals returns how many renewals were made, and the error that ended
// the renewer, if one did.
func (r *truthRenewer) renewals() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.err
}

// waitRenewals waits until r has renewed at least n times.
func (r *truthRenewer) waitRenewals(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := r.renewals()
		if err != nil {
			t.Fatalf("renewal %d failed: %v", got+1, err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d renewals of the %d wanted within %v", got, n, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// truthBucket makes the election bucket with the given TTL on a fresh
// server, and returns a connection to it, its JetStream context and the
// bucket.
func truthBucket(t *testing.T, ttl time.Duration) (*nats.Conn, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ts := newTestServer(t)
	nc := connect(t, ts.url())
	kv := createBucket(t, nc, bucketConfig(ttl))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, kv
}

func truthCreate(t *testing.T, kv jetstream.KeyValue, key, identity string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := kv.Create(ctx, key, []byte(identity))
	if err != nil {
		t.Fatalf("%s: create %s: %v", identity, key, err)
	}
	return rev
}

func truthDeleteBucket(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, bucketName); err != nil {
		t.Fatalf("delete bucket: %v", err)
	}
}

// TestObserverFollowsARemadeBucket: the election bucket is deleted and made
// again with the KV API (nats kv rm, nats kv add), and a new leader takes
// the key in the new bucket, at revision 1. The key then says "new" leads,
// and an observer that followed the old bucket must say so too, at once
// (within 1s of the write), as it does for any election it watches: the
// new bucket's revisions start below the ones it saw, but they are the
// key's latest messages.
func TestObserverFollowsARemadeBucket(t *testing.T) {
	const ttl = 2 * time.Second
	const key = "remade"
	for _, tc := range []struct {
		name string
		// untilDeleted: "old" renews right until the bucket is deleted,
		// and the bucket is made again at once; otherwise "old" stops
		// renewing, and the bucket is made again about a TTL after it is
		// deleted.
		untilDeleted bool
	}{
		{name: "made again a TTL after the old leader stopped"},
		{name: "made again at once while the old leader renewed", untilDeleted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, js, kv := truthBucket(t, ttl)
			// The old bucket's revisions run ahead of the ones the new
			// bucket will reach.
			for range 5 {
				if _, err := kv.Put(context.Background(), "filler", []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			obs := startTruthObserver(t, key, kv, js, false)
			obs.waitLeadership(t, 5*time.Second, "the key absent at first", func(l Leadership) bool { return l.Event != "" && !l.HasLeader() })

			oldRev := truthCreate(t, kv, key, "old")
			renewer := startRenewing(t, kv, key, "old", oldRev, ttl/4)
			renewer.waitRenewals(t, 2, 5*time.Second)
			obs.waitLeadership(t, 5*time.Second, "old leading", func(l Leadership) bool { return l.Leader == "old" && l.Revision > oldRev })

			last := renewer.stop()
			if tc.untilDeleted {
				// A last renewal, then the bucket goes at once: "old"'s
				// lease runs a full TTL past the deletion.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				next, err := kv.Update(ctx, key, []byte("old"), last)
				cancel()
				if err != nil {
					t.Fatalf("old's last renewal: %v", err)
				}
				last = next
				truthDeleteBucket(t, js)
			} else {
				truthDeleteBucket(t, js)
				time.Sleep(ttl) // the old leader's lease ends meanwhile
			}
			t.Logf("old's last write was at revision %d; the bucket is deleted", last)

			kv = createBucket(t, nc, bucketConfig(ttl))
			newRev := truthCreate(t, kv, key, "new")
			wrote := time.Now()
			t.Logf("new took the key in the new bucket at revision %d", newRev)
			if newRev != 1 {
				t.Fatalf("the new bucket's first write has revision %d, want 1", newRev)
			}

			l := obs.waitLeadership(t, time.Second, fmt.Sprintf("new leading at revision %d (the new bucket's write)", newRev), func(l Leadership) bool {
				return l.Leader == "new" && l.Revision == newRev
			})
			t.Logf("the observer reported %s %v after the write", l, time.Since(wrote).Round(time.Millisecond))
			// The observer may not know the token (0), but a token it
			// vouches for must be the revision that began new's term.
			if l.Token != 0 && l.Token != newRev {
				t.Fatalf("the observer reports %s with token %d, want %d (the revision of new's Create) or 0 (unknown); changes reported:%s", l, l.Token, newRev, obs.history())
			}
		})
	}
}

// TestObserverNoticesADeletedBucket: the election bucket is deleted while
// a leader holds the key, and is not made again. Nobody leads any more
// (the key is gone and cannot be written), and the leader's lease ends a
// TTL after its last write at the latest: within a TTL (plus the broker's
// lateness) of the deletion, the observer must stop reporting a leader, or
// Run must end with an error saying the election cannot be followed.
func TestObserverNoticesADeletedBucket(t *testing.T) {
	const ttl = 2 * time.Second
	const allowance = 500 * time.Millisecond
	const key = "deleted"
	_, js, kv := truthBucket(t, ttl)
	obs := startTruthObserver(t, key, kv, js, true)
	obs.waitLeadership(t, 5*time.Second, "the key absent at first", func(l Leadership) bool { return l.Event != "" && !l.HasLeader() })

	rev := truthCreate(t, kv, key, "L")
	renewer := startRenewing(t, kv, key, "L", rev, ttl/4)
	renewer.waitRenewals(t, 2, 5*time.Second)
	obs.waitLeadership(t, 5*time.Second, "L leading", func(l Leadership) bool { return l.Leader == "L" && l.Revision > rev })

	last := renewer.stop()
	truthDeleteBucket(t, js)
	deleted := time.Now()
	t.Logf("L's last write was at revision %d; the bucket is deleted and not made again", last)

	within := ttl + allowance
	deadline := deleted.Add(within)
	for {
		if ended, err := obs.ended(); ended {
			if err == nil {
				t.Fatalf("the observer's Run returned nil before the test ended")
			}
			t.Logf("the observer's Run returned %v after %v", err, time.Since(deleted).Round(time.Millisecond))
			return
		}
		l := obs.o.Leadership()
		if !l.HasLeader() {
			t.Logf("the observer reported %s %v after the deletion", l, time.Since(deleted).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket was deleted %v ago (TTL %v), but the observer still reports %s (event %s, revision %d) and Run has not returned; changes reported:%s",
				time.Since(deleted).Round(time.Millisecond), ttl, l, l.Event, l.Revision, obs.history())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestObserverReportsANewTermAfterTheSameIdentityIsElectedAgain: the
// bucket's TTL is lowered from 5s to 4.5s while h1 leads; h1 crashes, its
// key expires (4.5s after its last write), and h1 is elected again with a
// Create: a new term, whose token is that Create's revision. The observer
// must report that election, with the new token, not a renewal of the old
// term: a resource fenced by the old token would still accept the old
// term's late writes.
func TestObserverReportsANewTermAfterTheSameIdentityIsElectedAgain(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	const lowered = 4500 * time.Millisecond
	const key = "again"
	_, js, kv := truthBucket(t, ttl)
	obs := startTruthObserver(t, key, kv, js, false, ObserveRenewals())
	obs.waitLeadership(t, 5*time.Second, "the key absent at first", func(l Leadership) bool { return l.Event != "" && !l.HasLeader() })

	first := truthCreate(t, kv, key, "h1")
	renewer := startRenewing(t, kv, key, "h1", first, 1500*time.Millisecond)
	obs.waitLeadership(t, 5*time.Second, fmt.Sprintf("h1 elected with token %d", first), func(l Leadership) bool {
		return l.Leader == "h1" && l.Token == first
	})
	renewer.waitRenewals(t, 1, 5*time.Second)
	obs.waitLeadership(t, 5*time.Second, "h1's renewal", func(l Leadership) bool {
		return l.Leader == "h1" && l.Event == EventRenewed && l.Token == first && l.Revision > first
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := setBucketTTL(ctx, js, lowered); err != nil {
		t.Fatalf("lower the bucket's TTL: %v", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != lowered {
		t.Fatalf("the bucket's TTL is %v, want %v", st.TTL(), lowered)
	}

	last, written := renewer.stopAt() // h1 crashes
	// Wait for the key to expire, reading it often: h1's restart elects
	// it again as soon as it sees the key free.
	deadline := written.Add(lowered + 3*time.Second)
	for {
		gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kv.Get(gctx, key)
		gcancel()
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("h1's key (last written at revision %d) did not expire within %v of that write", last, time.Since(written).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	again := truthCreate(t, kv, key, "h1")
	t.Logf("h1's last write was revision %d; its key expired and h1 was elected again at revision %d, %v after that write",
		last, again, time.Since(written).Round(time.Millisecond))

	l := obs.waitLeadership(t, 2*time.Second, fmt.Sprintf("the write at revision %d", again), func(l Leadership) bool { return l.Revision >= again })
	// The change reported for the Create, whatever came before it (an
	// expiry may be reported first).
	for _, c := range obs.snapshot() {
		if c.Revision == again {
			l = c
		}
	}
	if l.Leader != "h1" || l.Event != EventElected || l.Token != again {
		t.Fatalf("h1's new term (its Create at revision %d, after its key expired) reported as %s (event %s, token %d, revision %d), want h1 elected with token %d; changes reported:%s",
			again, l, l.Event, l.Token, l.Revision, again, obs.history())
	}
}
