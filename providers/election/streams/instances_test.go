package streams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/standing"
)

// observeJS starts an observer of key that reads the writes' headers (the
// shared watch, through the JetStream context of kv's connection).
func observeJS(t *testing.T, key string, kv jetstream.KeyValue, opts ...Option) *changes {
	t.Helper()
	_, seen := newObserver(t, key, kv, opts...)
	return seen
}

// TestCopiesOfOneIdentityStandApart: candidates that share an identity
// (the copies of a program on one host) each answer who is standing with
// their own instance, and only the one leading says it leads, with its
// term's token.
func TestCopiesOfOneIdentityStandApart(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	var es []*Election
	for i := range 3 {
		e := mustElection(t, "vm", "copies", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance([]string{"w1", "w2", "w3"}[i]))...)
		runElection(t, e)
		es = append(es, e)
	}
	runElection(t, mustElection(t, "other", "copies", kv, rec.options("other")...))
	rec.waitFor(t, 10*time.Second, "a leader", func(evs []event) bool { return wins(evs, "") == 1 })
	nc := connect(t, ts.url())
	var cs []standing.Candidate
	eventually(t, 10*time.Second, "four candidates to answer", func() bool {
		var err error
		cs, err = standing.Standing(context.Background(), nc, bucketName, "copies", 200*time.Millisecond)
		return err == nil && len(cs) == 4
	})
	leaders := 0
	for _, c := range cs {
		if !c.Leader {
			continue
		}
		leaders++
		for _, e := range append(es, nil) {
			if e == nil {
				if c.Identity != "other" {
					t.Fatalf("%+v says it leads, but no copy of vm leads", c)
				}
				break
			}
			if e.Instance() == c.Instance {
				if !e.IsLeader() || e.Term().Token() != c.Token {
					t.Fatalf("%+v says it leads; its election leads %v with %v", c, e.IsLeader(), e.Term())
				}
				break
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("%d candidates say they lead: %+v", leaders, cs)
	}
	// Each copy answers for itself, so what it says, such as since when
	// it stands, is the same from one question to the next.
	again, err := standing.Standing(context.Background(), nc, bucketName, "copies", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	since := map[string]time.Time{}
	for _, c := range cs {
		since[c.Identity+"/"+c.Instance] = c.Since
	}
	for _, c := range again {
		if was, ok := since[c.Identity+"/"+c.Instance]; !ok || !was.Equal(c.Since) {
			t.Errorf("%s/%s stands since %v, and said %v (known %v) before", c.Identity, c.Instance, c.Since, was, ok)
		}
	}
}

// TestObserverReportsAHandOverBetweenCopiesOfOneIdentity: a hand-over
// from one copy of an identity to another is a new term, and the observer
// reports it as one: elected, with the new term's token, the new
// instance, and who handed over.
func TestObserverReportsAHandOverBetweenCopiesOfOneIdentity(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "vm", "twins", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance("w1"))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "w1 to lead", func(evs []event) bool { return wins(evs, "vm") == 1 })
	b := mustElection(t, "vm", "twins", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance("w2"))...)
	runElection(t, b)
	seen := observeJS(t, "twins", kv, ObserveRenewals())
	first := seen.waitFor(t, "the term found", func(l Leadership) bool { return l.HasLeader() })
	if first.Token != a.Term().Token() || first.Instance != "w1" {
		t.Fatalf("observer found %+v, want w1's term %d", first, a.Term().Token())
	}
	waitStanding(t, connect(t, ts.url()), "twins", "vm")
	eventually(t, 5*time.Second, "w2 to stand", func() bool {
		cs, _ := standing.Standing(context.Background(), connect(t, ts.url()), bucketName, "twins", 100*time.Millisecond)
		return len(cs) == 2
	})
	if err := a.HandOver(context.Background(), "w2"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 5*time.Second, "w2 to lead", func(evs []event) bool { return wins(evs, "vm") == 2 })
	l := seen.waitFor(t, "the hand-over", func(l Leadership) bool { return l.Event == EventElected && l.Instance == "w2" })
	if l.Token != b.Term().Token() || l.HandedOverBy != "vm" || l.HandedOverByInstance != "w1" || l.Leader != "vm" {
		t.Fatalf("hand-over reported as %+v, want elected w2 with token %d handed over by vm/w1", l, b.Term().Token())
	}
	// Renewals of the new term keep its token.
	seen.waitFor(t, "w2's renewal", func(l Leadership) bool {
		return l.Event == EventRenewed && l.Instance == "w2" && l.Token == b.Term().Token() && l.Revision > b.Term().Token()
	})
	checkHistory(t, rec.snapshot())
}

// TestHandOverToIdentitySlashInstance: a hand-over may name a candidate
// as identity/instance, which tells apart candidates of several identities
// that share an instance name; the leader refuses to name itself so.
func TestHandOverToIdentitySlashInstance(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "shared", openBucket(t, connect(t, ts.url())), append(rec.options("a"), WithInstance("w1"))...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a/w1 to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "shared", openBucket(t, connect(t, ts.url())), append(rec.options("b"), WithInstance("w1"))...)
	runElection(t, b)
	runElection(t, mustElection(t, "c", "shared", openBucket(t, connect(t, ts.url())), append(rec.options("c"), WithInstance("w1"))...))
	eventually(t, 5*time.Second, "three candidates to stand", func() bool {
		cs, _ := standing.Standing(context.Background(), connect(t, ts.url()), bucketName, "shared", 100*time.Millisecond)
		return len(cs) == 3
	})
	if err := a.HandOver(context.Background(), "a/w1"); !errors.Is(err, ErrInvalidIdentity) || !a.IsLeader() {
		t.Fatalf("a/w1 handing over to a/w1: %v (leads %v), want ErrInvalidIdentity and the term going on", err, a.IsLeader())
	}
	if err := a.HandOver(context.Background(), "b/w1"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 5*time.Second, "b/w1 to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	if wins(rec.snapshot(), "c") != 0 {
		t.Fatalf("c/w1 led after a hand-over to b/w1")
	}
	checkHistory(t, rec.snapshot())
}

// TestObserverKnowsTheTokenWithoutSeeingTheTermBegin: an observer that
// starts mid-term, or after the same identity was elected again, reports
// the exact token of the term that runs: every write says it.
func TestObserverKnowsTheTokenWithoutSeeingTheTermBegin(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "midterm", openBucket(t, connect(t, ts.url())), rec.options("a")...)
	stop := runElection(t, a)
	evs := rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	token := evs[len(evs)-1].term.Token()
	eventually(t, 5*time.Second, "a renewal", func() bool {
		e, err := kv.Get(context.Background(), "midterm")
		return err == nil && e.Revision() > token
	})
	seen := observeJS(t, "midterm", kv)
	if l := seen.waitFor(t, "the term found", func(l Leadership) bool { return l.HasLeader() }); l.Token != token || l.Event != EventCurrent {
		t.Fatalf("observer started mid-term reported %+v, want current with token %d", l, token)
	}
	// The same identity elected again: a new term, a new token.
	stop()
	rec.waitFor(t, 5*time.Second, "a to stop", func(evs []event) bool { return len(evs) == 2 })
	a2 := mustElection(t, "a", "midterm", openBucket(t, connect(t, ts.url())), rec.options("a")...)
	runElection(t, a2)
	evs = rec.waitFor(t, 5*time.Second, "a to lead again", func(evs []event) bool { return wins(evs, "a") == 2 })
	token2 := evs[len(evs)-1].term.Token()
	if l := seen.waitFor(t, "the new term", func(l Leadership) bool { return l.Event == EventElected }); l.Token != token2 {
		t.Fatalf("the observer reported %+v, want elected with token %d", l, token2)
	}
	late := observeJS(t, "midterm", openBucket(t, connect(t, ts.url())))
	if l := late.waitFor(t, "the term found", func(l Leadership) bool { return l.HasLeader() }); l.Token != token2 {
		t.Fatalf("a late observer reported %+v, want token %d", l, token2)
	}
}

// TestObserverReportsATermOnlyOnceItBegins: after a forced removal the
// next holder's term waits a TTL; the observer reports the holder as
// taking, and the term as elected only once it has begun, with its token.
func TestObserverReportsATermOnlyOnceItBegins(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	a := mustElection(t, "a", "forced", openBucket(t, connect(t, ts.url())), rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	b := mustElection(t, "b", "forced", openBucket(t, connect(t, ts.url())), rec.options("b")...)
	runElection(t, b)
	seen := &changes{}
	var electedAt atomic.Pointer[time.Time]
	o, err := NewObserver("forced", jsFor(kv), OnChange(func(l Leadership) {
		if l.Event == EventElected {
			now := time.Now()
			electedAt.CompareAndSwap(nil, &now)
		}
		seen.add(l)
	}))
	if err != nil {
		t.Fatal(err)
	}
	runObserver(t, o)
	seen.waitFor(t, "a's term", func(l Leadership) bool { return l.HasLeader() })
	if err := kv.Delete(context.Background(), "forced"); err != nil { // a forced stand-down
		t.Fatal(err)
	}
	removed := seen.waitFor(t, "the removal", func(l Leadership) bool { return l.Event == EventRemoved })
	l := seen.waitFor(t, "the next holder", func(l Leadership) bool { return l.State == KeyHeld && l.Revision > removed.Revision })
	if l.Event != EventTaking || l.Token != 0 {
		t.Fatalf("the write after a removal was reported as %+v, want taking without a token", l)
	}
	elected := seen.waitFor(t, "the term to begin", func(l Leadership) bool { return l.Event == EventElected && l.Revision > removed.Revision })
	reported := *electedAt.Load()
	evs := rec.waitFor(t, 5*time.Second, "a second term", func(evs []event) bool { return wins(evs, "") == 2 })
	term := evs[len(evs)-1].term
	if elected.Token != term.Token() || elected.Leader != term.Identity() {
		t.Fatalf("elected %+v, want %s's token %d", elected, term.Identity(), term.Token())
	}
	if reported.Before(term.Started()) {
		t.Fatalf("elected reported at %v, before the term began at %v", reported, term.Started())
	}
	checkHistory(t, rec.snapshot())
}

// TestUnhealthyLeaderHandsOverToAHealthyCopyOfItsIdentity: copies that
// share an identity are candidates like any other: a leader whose check
// fails hands over to a healthy copy of its own identity.
func TestUnhealthyLeaderHandsOverToAHealthyCopyOfItsIdentity(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	var sick atomic.Bool
	check := func(context.Context) error {
		if sick.Load() {
			return errors.New("sick")
		}
		return nil
	}
	b1 := mustElection(t, "b", "sick-copy", openBucket(t, connect(t, ts.url())),
		append(rec.options("b"), WithInstance("b1"), WithHealthCheck(check, 100*time.Millisecond), WithMinTerm(time.Second))...)
	runElection(t, b1)
	rec.waitFor(t, 5*time.Second, "b1 to lead", func(evs []event) bool { return wins(evs, "b") == 1 })
	b2 := mustElection(t, "b", "sick-copy", openBucket(t, connect(t, ts.url())),
		append(rec.options("b"), WithInstance("b2"), WithMinTerm(time.Second))...)
	runElection(t, b2)
	eventually(t, 5*time.Second, "both copies to stand", func() bool {
		cs, _ := standing.Standing(context.Background(), connect(t, ts.url()), bucketName, "sick-copy", 100*time.Millisecond)
		return len(cs) == 2
	})
	sick.Store(true)
	rec.waitFor(t, 10*time.Second, "b2 to lead", func(evs []event) bool { return wins(evs, "b") == 2 })
	if !b2.IsLeader() || b1.IsLeader() {
		t.Fatalf("b1 leads %v, b2 leads %v: want b2, the healthy copy", b1.IsLeader(), b2.IsLeader())
	}
	checkHistory(t, rec.snapshot())
}

// TestHandOverToAnUnhealthyCandidateIsRefused: a hand-over, asked of the
// leader or over NATS (as stand-down --to does), to a candidate whose
// health check fails is refused with the reason, and the term goes on.
func TestHandOverToAnUnhealthyCandidateIsRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	a := mustElection(t, "a", "sick-target", kv, rec.options("a")...)
	runElection(t, a)
	rec.waitFor(t, 5*time.Second, "a to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
	sick := func(context.Context) error { return errors.New("not ready") }
	runElection(t, mustElection(t, "n1", "sick-target", openBucket(t, connect(t, ts.url())), append(rec.options("n1"), WithHealthCheck(sick, time.Second))...))
	nc := connect(t, ts.url())
	waitStanding(t, nc, "sick-target", "n1")
	token := a.Term().Token()
	if err := a.HandOver(context.Background(), "n1"); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("HandOver to an unhealthy candidate = %v, want ErrHandOverRefused", err)
	}
	leader, err := standing.RequestHandOver(context.Background(), nc, bucketName, "sick-target", "n1")
	if err == nil || leader != "a" {
		t.Fatalf("RequestHandOver to an unhealthy candidate = %q, %v; want a's refusal", leader, err)
	}
	t.Logf("refused: %v", err)
	if !a.IsLeader() || a.Term().Token() != token {
		t.Fatalf("a leads %v with %v after the refusals, want its term %d going on", a.IsLeader(), a.Term(), token)
	}
	checkHistory(t, rec.snapshot())
}

// TestStopHandsTheKeyToACopyOfItsIdentity: a leader that stops offers the
// key to the best standby it knows, also when that standby is a copy of
// its own identity (a host's workers): the next term begins by the
// hand-over, with no release in between.
func TestStopHandsTheKeyToACopyOfItsIdentity(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(2*time.Second))
	rec := newRecorder()
	stops := map[string]func(){}
	var es []*Election
	var logMu sync.Mutex
	var logged []string
	log := WithLogger(funcLogger(func(s string) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, s)
	}))
	for _, inst := range []string{"w1", "w2", "w3"} {
		e := mustElection(t, "vm", "copy-stop", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance(inst), log)...)
		stops[inst] = runElection(t, e)
		es = append(es, e)
	}
	rec.waitFor(t, 5*time.Second, "a leader", func(evs []event) bool { return wins(evs, "") == 1 })
	var leader *Election
	for _, e := range es {
		if e.IsLeader() {
			leader = e
		}
	}
	// The leader learns who stands by asking once its term began.
	eventually(t, 10*time.Second, "the leader to know its standbys", func() bool {
		leader.mu.Lock()
		s := leader.steward
		leader.mu.Unlock()
		return s != nil && len(s.st.roll.list()) == 2
	})
	seen := observeJS(t, "copy-stop", kv)
	seen.waitFor(t, "the leader", func(l Leadership) bool { return l.HasLeader() })
	stops[leader.Instance()]()
	l := seen.waitFor(t, "the next term", func(l Leadership) bool { return l.Event == EventElected })
	if l.HandedOverBy != "vm" || l.HandedOverByInstance != leader.Instance() || l.Instance == leader.Instance() {
		t.Fatalf("the next term %+v, want one handed over by vm/%s to another copy", l, leader.Instance())
	}
	// The leader's log names the copy it offers the key to.
	logMu.Lock()
	said := strings.Join(logged, "\n")
	logMu.Unlock()
	if want := "vm stopped leading (stopping: offering the key to vm/" + l.Instance + ", else releasing it)"; !strings.Contains(said, want) {
		t.Fatalf("the leader's log does not say %q:\n%s", want, said)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, ch := range seen.list {
		if ch.Event == EventReleased {
			t.Fatalf("the key was released before the next term: %+v", seen.list)
		}
	}
	checkHistory(t, rec.snapshot())
}

// TestForcedStandDownOfACopyLetsItsSiblingsTakeAtOnce: a forced stand-down
// of one copy of an identity is meant for that copy alone. Its siblings,
// told apart by their instances, take the key at once (their term still
// waits a TTL after the removal), rather than sit the takeover out as the
// deposed copy does.
func TestForcedStandDownOfACopyLetsItsSiblingsTakeAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(ttl))
	rec := newRecorder()
	deposed := mustElection(t, "vm", "siblings", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance("w1"))...)
	runElection(t, deposed)
	rec.waitFor(t, 10*time.Second, "w1 to lead", func(evs []event) bool { return wins(evs, "") == 1 })
	for _, inst := range []string{"w2", "w3"} {
		runElection(t, mustElection(t, "vm", "siblings", openBucket(t, connect(t, ts.url())), append(rec.options("vm"), WithInstance(inst))...))
	}
	// The siblings see w1's renewals in the key, in the name of their
	// identity.
	_, rev, _ := value(t, kv, "siblings")
	eventually(t, 2*ttl, "two renewals by w1", func() bool { _, r, _ := value(t, kv, "siblings"); return r >= rev+2 })
	removed := time.Now()
	if err := kv.Delete(context.Background(), "siblings"); err != nil {
		t.Fatal(err)
	}
	var taken jetstream.KeyValueEntry
	eventually(t, 3*ttl, "a copy to take the key", func() bool {
		ent, err := kv.Get(context.Background(), "siblings")
		if err == nil {
			taken = ent
		}
		return err == nil
	})
	if took := taken.Created().Sub(removed); took > ttl/2 {
		t.Fatalf("the key was taken %v after the removal; a sibling of the deposed copy should take it at once", took)
	}
	evs := rec.waitFor(t, 3*ttl, "a new term", func(evs []event) bool { return wins(evs, "") == 2 })
	if led := evs[len(evs)-1].at.Sub(removed); led < ttl {
		t.Fatalf("a new term began %v after the removal, before a TTL (%v)", led, ttl)
	}
	if deposed.IsLeader() {
		t.Fatal("the deposed copy w1 leads again instead of sitting out")
	}
}

// TestAReleaseToOneCopyLeavesTheKeyToIt: a release that hands the election
// over to one copy of an identity names its instance in a header, so that
// the other copies of that identity sit the window out as every other
// candidate does, and the copy named takes the key at once. The test
// writes the holder's messages as a leader b handing over to a/x would.
func TestAReleaseToOneCopyLeavesTheKeyToIt(t *testing.T) {
	t.Parallel()
	const within = 2 * time.Second
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	js := jsFor(kv)
	// takenAfter has copy instance of a stand by in election key, held by
	// b, then writes b's release handing it over to a/x, and returns how
	// long after the release a took the key and led.
	takenAfter := func(key, instance string) time.Duration {
		t.Helper()
		subject := "$KV." + bucketName + "." + key
		held := nats.NewMsg(subject)
		held.Data = []byte("b")
		keymsg.Stamp{Instance: "i-b", Term: keymsg.TermBegins}.Set(held.Header)
		ack, err := js.PublishMsg(context.Background(), held, jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		runElection(t, mustElection(t, "a", key, openBucket(t, connect(t, ts.url())), append(rec.options("a"), WithInstance(instance))...))
		eventually(t, 5*time.Second, "a/"+instance+" to stand by", func() bool {
			cs, _ := standing.Standing(context.Background(), connect(t, ts.url()), bucketName, key, 100*time.Millisecond)
			return len(cs) == 1
		})
		release := nats.NewMsg(subject)
		release.Data = handOverPayload("b", "a", within)
		release.Header.Set(keymsg.OperationHeader, "DEL")
		keymsg.Stamp{Instance: "i-b", HandOverInstance: "x"}.Set(release.Header)
		ack, err = js.PublishMsg(context.Background(), release, jetstream.WithExpectLastSequencePerSubject(ack.Sequence))
		if err != nil {
			t.Fatal(err)
		}
		// When the broker stored the release; once a copy has taken the
		// key (at once, for the copy named) the stream no longer has it,
		// and the ack's arrival, on the in-process broker's clock, stands
		// in for it.
		released := time.Now()
		if stream, err := js.Stream(context.Background(), "KV_"+bucketName); err == nil {
			if msg, err := stream.GetMsg(context.Background(), ack.Sequence); err == nil {
				released = msg.Time
			}
		}
		rec.waitFor(t, 3*within, "a/"+instance+" to lead", func(evs []event) bool { return wins(evs, "a") == 1 })
		e, err := kv.Get(context.Background(), key)
		if err != nil || e.Revision() <= ack.Sequence || string(e.Value()) != "a" {
			t.Fatalf("a/%s leads, but the key reads %v (%v)", instance, e, err)
		}
		return e.Created().Sub(released)
	}
	if d := takenAfter("other", "y"); d < within*3/4 {
		t.Errorf("a/y took the key %v after a release handing it to a/x within %v", d, within)
	}
	if d := takenAfter("named", "x"); d > within*3/4 {
		t.Errorf("a/x took the key handed over to it only %v after the release", d)
	}
}

// TestAReleaseToOneCopyNamesItsInstance: the driver's release handing the
// election over to one copy of an identity carries that copy's instance
// on the wire, where candidates read it (Entry.HandOverInstance).
func TestAReleaseToOneCopyNamesItsInstance(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	kv := createBucket(t, connect(t, ts.url()), bucketConfig(3*time.Second))
	st := realStore(kv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := st.Write(ctx, "named", []byte("a"), 0, keymsg.Stamp{Instance: "y", Term: keymsg.TermBegins})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{key: "named", identity: "a", instance: "y", store: st, clock: clock.System{}, tm: timings{request: 5 * time.Second}}
	to := handOver{to: "a", instance: "x", within: time.Second}
	if in := d.perform(action{kind: doRelease, expect: rev, marked: true, handOver: to, timeout: 5 * time.Second}); in.err != nil || !in.marked {
		t.Fatalf("release: marked %v, %v", in.marked, in.err)
	}
	ent, err := st.Latest(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	if e := ReadEntry(ent); e.State != KeyReleased || e.HandOverTo != "a" || e.HandOverInstance != "x" || e.Instance != "y" {
		t.Fatalf("the release reads %+v, want released by a/y to a/x", e)
	}
}
