package streams

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// changes collects what an observer reports.
type changes struct {
	mu   sync.Mutex
	list []Leadership
}

func (c *changes) add(l Leadership) {
	c.mu.Lock()
	c.list = append(c.list, l)
	c.mu.Unlock()
}

func (c *changes) waitFor(t *testing.T, what string, cond func(Leadership) bool) Leadership {
	t.Helper()
	var found Leadership
	eventually(t, 10*time.Second, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, l := range c.list {
			if cond(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func (c *changes) reset() {
	c.mu.Lock()
	c.list = nil
	c.mu.Unlock()
}

func runObserver(t *testing.T, o *Observer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestObserverFollowsTermsReleasesRemovalsAndExpiries(t *testing.T) {
	const ttl = time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	seen := &changes{}
	o, err := NewObserver("watched", kv, OnChange(seen.add), ObserveRenewals())
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	seen.waitFor(t, "no leader at first", func(l Leadership) bool { return l.Event == EventCurrent && !l.HasLeader() })

	rec := newRecorder()
	stopA := runElection(t, mustElection(t, "a", "watched", kv, rec.options("a")...))
	evs := rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	elected := seen.waitFor(t, "a elected", func(l Leadership) bool { return l.Event == EventElected })
	if elected.Leader != "a" || elected.Token != evs[0].term.Token() || elected.Since.IsZero() {
		t.Fatalf("elected %+v, want a with token %d", elected, evs[0].term.Token())
	}
	renewed := seen.waitFor(t, "a renewed", func(l Leadership) bool { return l.Event == EventRenewed })
	if renewed.Token != elected.Token || renewed.Revision <= elected.Revision || !renewed.Since.Equal(elected.Since) {
		t.Fatalf("renewal %+v lost the term's token or start (%+v)", renewed, elected)
	}
	if got := o.Leadership(); got.Leader != "a" {
		t.Fatalf("Leadership() = %v", got)
	}

	stopA() // released, then removed since nobody takes it
	seen.waitFor(t, "a released", func(l Leadership) bool { return l.Event == EventReleased && !l.HasLeader() })
	seen.waitFor(t, "the released key removed", func(l Leadership) bool { return l.Event == EventRemoved })

	// A leader that stops without releasing: the key expires.
	stopB := runElection(t, mustElection(t, "b", "watched", kv, append(rec.options("b"), ReleaseOnStop(false))...))
	b := seen.waitFor(t, "b elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "b" })
	stopB()
	seen.reset()
	expired := seen.waitFor(t, "b's key to expire", func(l Leadership) bool { return l.Event == EventExpired })
	if expired.HasLeader() || expired.Revision < b.Revision {
		t.Fatalf("expired %+v", expired)
	}

	// A forced stand-down.
	runElection(t, mustElection(t, "c", "watched", kv, rec.options("c")...))
	seen.waitFor(t, "c elected", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "c" })
	if err := kv.Delete(context.Background(), "watched"); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, "c removed", func(l Leadership) bool { return l.Event == EventRemoved })
	seen.waitFor(t, "c elected again", func(l Leadership) bool { return l.Event == EventElected && l.Leader == "c" })
}

func TestObserverStartedMidTermKnowsTheLeaderNotTheToken(t *testing.T) {
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	runElection(t, mustElection(t, "a", "mid", kv, rec.options("a")...))
	rec.waitFor(t, 5*time.Second, "a to win", func(evs []event) bool { return wins(evs, "a") == 1 })
	_, rev0, _ := value(t, kv, "mid")
	eventually(t, 5*time.Second, "a renewal", func() bool { _, r, _ := value(t, kv, "mid"); return r > rev0 })

	seen := &changes{}
	o, err := NewObserver("mid", kv, OnChange(seen.add))
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	l := seen.waitFor(t, "the current leader", func(l Leadership) bool { return l.Event == EventCurrent })
	if l.Leader != "a" || l.Token != 0 || !l.Since.IsZero() || l.Revision == 0 || l.ExpiresBy.Before(l.Renewed) {
		t.Fatalf("mid-term view %+v: want leader a, unknown token and start", l)
	}
	if s := l.String(); s == "" || !containsAll(s, "a leads", "token unknown") {
		t.Fatalf("String() = %q", s)
	}
}

func TestNewObserverRejectsBadInput(t *testing.T) {
	if _, err := NewObserver("bad key", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("got %v", err)
	}
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(time.Second))
	if _, err := NewObserver("ok", nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil bucket: %v", err)
	}
	if _, err := NewObserver("ok", kv, ObserverLogger(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil logger: %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !contains(s, p) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
