package acl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

const (
	bucket = "CHORIA_LEADER_ELECTION"
	stream = "KV_" + bucket
	// refusal bounds each request the server is expected to refuse: it
	// answers with silence, so the request times out.
	refusal = 750 * time.Millisecond
)

// users are the example users of docs/security.md, and wide, whose
// campaign pattern ends in * (for the pin of what * allows).
var users = map[string]acl.Grant{
	"app-a":   {Campaign: []string{"app-a.>"}},
	"billing": {Campaign: []string{"billing"}},
	"ops":     {Admin: true},
	"dash":    {Observe: []string{">"}},
	"wide":    {Campaign: []string{"wide.*"}},
}

// fixture is a server whose users have the compiled permissions, with the
// bucket made as a broker with users makes it (rollups off).
type fixture struct {
	srv *server.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	opts := &server.Options{JetStream: true, Users: []*server.User{{Username: "root", Password: "root"}}}
	for name, g := range users {
		p := acl.Compile(bucket, name, g)
		opts.Users = append(opts.Users, &server.User{Username: name, Password: name, Permissions: broker.ServerPermissions(p)})
	}
	srv := natstest.Start(t, opts)
	f := &fixture{srv: srv}
	js := f.js(t, "root")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The bucket as a broker with users provisions it (broker/settings.go):
	// per-message TTLs on, so candidates renew by raw publishes with the
	// Nats-TTL header, and rollups off.
	spec := broker.BucketSpec{TTL: 3 * time.Second, Replicas: 1, MaxValueSize: broker.DefaultMaxValueSize,
		MaxConsumers: broker.DefaultMaxConsumers, PerKeyTTL: true, DenyRollup: true}
	if _, err := broker.ProvisionElectionBucket(ctx, js, spec, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// conn logs in as user (password = name) with its own inbox prefix, and
// returns the connection with its JetStream context.
func (f *fixture) conn(t *testing.T, user string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.UserInfo(user, user), nats.CustomInboxPrefix(acl.InboxPrefix(user)),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)
	return natstest.Connect(t, f.srv.ClientURL(), opts...)
}

func (f *fixture) js(t *testing.T, user string) jetstream.JetStream {
	t.Helper()
	_, js := f.conn(t, user)
	return js
}

func (f *fixture) kv(t *testing.T, user string) (jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	js := f.js(t, user)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("%s cannot open the bucket: %v", user, err)
	}
	return kv, js
}

// seed has user create election key with value, as a candidate winning
// it would, and returns the revision.
func (f *fixture) seed(t *testing.T, user, key, value string) uint64 {
	t.Helper()
	kv, _ := f.kv(t, user)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := kv.Create(ctx, key, []byte(value))
	if err != nil {
		t.Fatalf("%s creating %s: %v", user, key, err)
	}
	return rev
}

func short() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), refusal)
}

// refused checks that err is a refusal, not a success nor an answer, and
// that nc's asynchronous error names subject.
func refused(t *testing.T, what string, nc *nats.Conn, err error, subject string) {
	t.Helper()
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		t.Errorf("%s: allowed", what)
	case errors.As(err, &apiErr):
		t.Errorf("%s: answered by JetStream (%v), not refused", what, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		last := nc.LastError()
		if last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the connection's error is %v, want a permissions violation on %s", what, last, subject)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPermittedUserCampaignsAndObserverFollows: app-a campaigns with the
// election provider, wins, renews and releases; dash, who may only observe,
// follows the election through the same steps.
func TestPermittedUserCampaignsAndObserverFollows(t *testing.T) {
	f := newFixture(t)
	kvA, jsA := f.kv(t, "app-a")
	_, jsD := f.kv(t, "dash")

	var mu sync.Mutex
	var seen []streams.Leadership
	obs, err := streams.NewObserver("app-a.cron", jsD, streams.OnChange(func(l streams.Leadership) {
		mu.Lock()
		seen = append(seen, l)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	odone := make(chan error, 1)
	go func() { odone <- obs.Run(octx) }()
	defer func() {
		ocancel()
		if err := <-odone; err != nil {
			t.Errorf("observer: %v", err)
		}
	}()

	won := make(chan struct{}, 1)
	e, err := streams.NewElection("a1", "app-a.cron", jsA, streams.OnWon(func() { won <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("app-a did not win")
	}
	first := e.Term().Token()
	waitFor(t, "a renewal", func() bool {
		ent, err := kvA.Get(context.Background(), "app-a.cron")
		return err == nil && ent.Revision() > first
	})
	// The renewal went the way a broker's bucket makes candidates write: a
	// raw publish carrying its own TTL (Nats-TTL) and the expected last
	// sequence of its subject.
	jsRoot := f.js(t, "root")
	rst, err := jsRoot.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := rst.GetLastMsgForSubject(context.Background(), "$KV."+bucket+".app-a.cron"); err != nil || m.Header.Get("Nats-TTL") == "" {
		t.Errorf("the renewal is %v (%v), want one with a Nats-TTL header", m, err)
	}
	waitFor(t, "dash sees a1 lead", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1].Leader == "a1"
	})
	e.Stop()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitFor(t, "dash sees the release", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1].State == streams.KeyReleased
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUserCannotTouchAnotherUsersElection: billing can neither campaign in,
// overwrite, nor delete app-a's election, nor read app-a's inbox, and each
// attempt is refused as such; billing's own election keeps working.
func TestUserCannotTouchAnotherUsersElection(t *testing.T) {
	f := newFixture(t)
	kvA, _ := f.kv(t, "app-a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvA.Create(ctx, "app-a.cron", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	kvB, _ := f.kv(t, "billing")
	ncB, jsB := f.conn(t, "billing")
	kvB2, err := jsB.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	subject := "$KV." + bucket + ".app-a.cron"

	c, cc := short()
	_, err = kvB2.Create(c, "app-a.other", []byte("b1"))
	cc()
	refused(t, "campaign in app-a.other", ncB, err, "$KV."+bucket+".app-a.other")
	c, cc = short()
	_, err = kvB2.Put(c, "app-a.cron", []byte("b1"))
	cc()
	refused(t, "overwrite app-a.cron", ncB, err, subject)
	c, cc = short()
	err = kvB2.Delete(c, "app-a.cron")
	cc()
	refused(t, "delete app-a.cron", ncB, err, subject)
	c, cc = short()
	_, err = kvB2.Get(c, "app-a.cron")
	cc()
	refused(t, "read app-a.cron", ncB, err, "$JS.API.DIRECT.GET."+stream+"."+subject)

	// app-a's inbox: billing may not subscribe to it.
	spy, _ := f.conn(t, "billing", nats.PermissionErrOnSubscribe(true))
	sub, err := spy.SubscribeSync(acl.InboxPrefix("app-a") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(2 * time.Second); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("subscribing to app-a's inbox: %v, want a permissions violation", err)
	}

	// Nothing changed app-a's election, and billing's own works.
	if ent, err := kvA.Get(ctx, "app-a.cron"); err != nil || string(ent.Value()) != "a1" {
		t.Errorf("app-a.cron is %v, %v after billing's attempts", ent, err)
	}
	if _, err := kvB.Create(ctx, "billing", []byte("b1")); err != nil {
		t.Errorf("billing cannot campaign in its own election: %v", err)
	}
}

// TestObserverListsAndWatchesButCannotStandDown: dash lists and watches
// every election, and is refused a stand-down.
func TestObserverListsAndWatchesButCannotStandDown(t *testing.T) {
	f := newFixture(t)
	kvA, _ := f.kv(t, "app-a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvA.Create(ctx, "app-a.cron", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	ncD, jsD := f.conn(t, "dash")
	kvD, err := jsD.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kvD.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "app-a.cron" {
		t.Fatalf("dash lists %v, %v", keys, err)
	}
	w, err := kvD.Watch(ctx, "app-a.cron")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ent := <-w.Updates(); ent == nil || string(ent.Value()) != "a1" {
		t.Fatalf("dash's watch got %v", ent)
	}
	c, cc := short()
	err = kvD.Delete(c, "app-a.cron")
	cc()
	refused(t, "dash stands app-a.cron down", ncD, err, "$KV."+bucket+".app-a.cron")
}

// TestRollupIsRefused: with rollups off, a writer cannot wipe the bucket
// with a Nats-Rollup header on a key it may write; other keys survive.
func TestRollupIsRefused(t *testing.T) {
	f := newFixture(t)
	kvA, jsA := f.kv(t, "app-a")
	kvB, _ := f.kv(t, "billing")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvB.Create(ctx, "billing", []byte("b1")); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"all", "sub"} {
		m := nats.NewMsg("$KV." + bucket + ".app-a.x")
		m.Header.Set("Nats-Rollup", how)
		var apiErr *jetstream.APIError
		if _, err := jsA.PublishMsg(ctx, m); !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "rollup") {
			t.Errorf("rollup %s: %v, want JetStream's refusal", how, err)
		}
	}
	c, cc := short()
	_, err := kvA.Get(c, "billing")
	cc()
	if err == nil {
		t.Error("app-a may read billing")
	}
	if ent, err := kvB.Get(ctx, "billing"); err != nil || string(ent.Value()) != "b1" {
		t.Errorf("billing is %v, %v after the rollups", ent, err)
	}
}

// The tests below pin what NATS cannot enforce, as docs/security.md says.
// If one fails, NATS changed: update the documentation with the test.

// TestPinStreamInfoNamesEveryElection: a user that may open the bucket
// (STREAM.INFO) can ask for the stream's subjects and learn the name of
// every election, including those it may not read.
func TestPinStreamInfoNamesEveryElection(t *testing.T) {
	f := newFixture(t)
	f.seed(t, "billing", "billing", "b1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jsA := f.js(t, "app-a")
	st, err := jsA.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".>"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.State.Subjects["$KV."+bucket+".billing"]; !ok {
		t.Errorf("stream info no longer shows app-a the billing election (subjects %v): update docs/security.md", info.State.Subjects)
	}
}

// TestPinExpectedSequenceRevealsAnyElectionsRevision: a writer that
// publishes to its own key, expecting a last sequence of another subject
// (the Nats-Expected-Last-Subject-Sequence-Subject header), learns from the
// error that election's revision, its fencing token, or that it does not
// exist; with a stream-wide expected sequence, the bucket's latest revision.
func TestPinExpectedSequenceRevealsAnyElectionsRevision(t *testing.T) {
	f := newFixture(t)
	kvB, _ := f.kv(t, "billing")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := kvB.Create(ctx, "billing", []byte("b1"))
	if err != nil {
		t.Fatal(err)
	}
	_, jsA := f.kv(t, "app-a")
	probe := func(subject string) error {
		m := nats.NewMsg("$KV." + bucket + ".app-a.probe")
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", "999999999")
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", subject)
		_, err := jsA.PublishMsg(ctx, m)
		return err
	}
	if err := probe("$KV." + bucket + ".billing"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("wrong last sequence: %d", rev)) {
		t.Errorf("probing billing gave %v, no longer its revision %d: update docs/security.md", err, rev)
	}
	if err := probe("$KV." + bucket + ".nonexistent"); err == nil || !strings.Contains(err.Error(), "wrong last sequence: 0") {
		t.Errorf("probing a missing election gave %v: update docs/security.md", err)
	}
	m := nats.NewMsg("$KV." + bucket + ".app-a.probe")
	_, err = jsA.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(1<<40))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(rev)) {
		t.Errorf("a stream-wide expected sequence gave %v, no longer the latest revision %d: update docs/security.md", err, rev)
	}
}

// TestPinAnyUserCanMakeDurableConsumers: the consumer-create subject a
// watch needs cannot stop the request's body from asking for a durable
// consumer that never expires, so any user that may watch can fill the
// stream's consumer limit.
func TestPinAnyUserCanMakeDurableConsumers(t *testing.T) {
	f := newFixture(t)
	jsD := f.js(t, "dash")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := jsD.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "squatter", FilterSubject: "$KV." + bucket + ".billing", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatalf("dash cannot make a durable consumer (the pin no longer holds: update docs/security.md): %v", err)
	}
	if info := c.CachedInfo(); info.Config.InactiveThreshold != 0 {
		t.Errorf("the durable consumer expires after %v: update docs/security.md", info.Config.InactiveThreshold)
	}
}

// TestPinStarPatternAllowsWatchingDeeperKeys: a user allowed wide.* may
// make a consumer filtered on wide.> (NATS matches the > in the request's
// subject as a literal token), and so sees wide.x.y, which it may not
// read or write.
func TestPinStarPatternAllowsWatchingDeeperKeys(t *testing.T) {
	f := newFixture(t)
	kvR, _ := f.kv(t, "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvR.Create(ctx, "wide.x.y", []byte("deep")); err != nil {
		t.Fatal(err)
	}
	ncW, jsW := f.conn(t, "wide")
	c, err := jsW.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"$KV." + bucket + ".wide.>"}})
	if err != nil {
		t.Fatalf("wide cannot watch wide.> (the pin no longer holds: update docs/security.md): %v", err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(3 * time.Second))
	if err != nil || string(msg.Data()) != "deep" {
		t.Errorf("wide's watch of wide.> got %v, %v", msg, err)
	}
	kvW, err := jsW.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	c2, cc := short()
	_, err = kvW.Get(c2, "wide.x.y")
	cc()
	refused(t, "wide reads wide.x.y", ncW, err, "$JS.API.DIRECT.GET."+stream+".$KV."+bucket+".wide.x.y")
}

// TestPinConsumerOfAnotherUserCanBePulledByName: the consumer subjects
// cannot be scoped by user (names are random), so a user who learns the
// name of another user's consumer can pull from it.
func TestPinConsumerOfAnotherUserCanBePulledByName(t *testing.T) {
	f := newFixture(t)
	kvA, jsA := f.kv(t, "app-a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvA.Create(ctx, "app-a.secret", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	cons, err := jsA.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{FilterSubject: "$KV." + bucket + ".app-a.secret", AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	jsB := f.js(t, "billing")
	stolen, err := jsB.Consumer(ctx, stream, cons.CachedInfo().Name)
	if err != nil {
		t.Fatalf("billing cannot look the consumer up (the pin no longer holds: update docs/security.md): %v", err)
	}
	msg, err := stolen.Next(jetstream.FetchMaxWait(3 * time.Second))
	if err != nil || string(msg.Data()) != "a1" {
		t.Errorf("billing pulled %v, %v from app-a's consumer (the pin no longer holds: update docs/security.md)", msg, err)
	}
}

// TestWatchOfManyMegabytesKeepsDelivering: a push watch (nats.go's
// kv.Watch, as the CLI's list of all elections uses) needs its flow-control
// replies allowed, or the server stops delivering after about 2 MB.
func TestWatchOfManyMegabytesKeepsDelivering(t *testing.T) {
	f := newFixture(t)
	kvR, _ := f.kv(t, "ops")
	kvD, _ := f.kv(t, "dash")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := kvD.Watch(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The key has no value yet: the watch's first entry is the nil that
	// marks it current. Write only after it, so no write comes too early.
	select {
	case ent := <-w.Updates():
		if ent != nil {
			t.Fatalf("the watch began with %v", ent)
		}
	case <-ctx.Done():
		t.Fatal("the watch never became current")
	}
	// 3,000 values of 900 bytes (the bucket's largest, as a broker
	// provisions it, is 1 KB with headers): about 3 MB delivered.
	const n = 3000
	lastRev := make(chan uint64, 1)
	go func() {
		var rev uint64
		value := make([]byte, 900)
		for range n {
			var err error
			if rev, err = kvR.Put(ctx, "billing", value); err != nil {
				t.Errorf("put: %v", err)
				break
			}
		}
		lastRev <- rev
	}()
	// The last value must arrive: a watch stalled by refused flow control
	// never gets past the first ~2 MB.
	got, want := 0, uint64(0)
	for seen := uint64(0); want == 0 || seen < want; {
		select {
		case ent := <-w.Updates():
			if ent != nil {
				got++
				seen = ent.Revision()
			}
		case want = <-lastRev:
			if want == 0 {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the watch stalled after %d of %d updates of 900 bytes: flow control refused?", got, n)
		}
	}
}

// TestPinExpectedSubjectSequenceRevealsOnlyTheOwnKey: the header the
// election writes with (Nats-Expected-Last-Subject-Sequence) on a writer's
// own key makes the error name that key's latest revision, not another's.
func TestPinExpectedSubjectSequenceRevealsOnlyTheOwnKey(t *testing.T) {
	f := newFixture(t)
	kvB, _ := f.kv(t, "billing")
	kvA, jsA := f.kv(t, "app-a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	own, err := kvA.Create(ctx, "app-a.cron", []byte("a1"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := kvB.Create(ctx, "billing", []byte("b1"))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("$KV." + bucket + ".app-a.cron")
	_, err = jsA.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(1<<40))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("wrong last sequence: %d", own)) || strings.Contains(err.Error(), fmt.Sprint(other)) {
		t.Errorf("the error %v should name app-a.cron's revision %d and not billing's %d: update docs/security.md", err, own, other)
	}
}

// TestPinStarPatternAllowsReadingDeeperKeysByDirectGet: a user allowed
// wide.* may direct-get the last message of wide.> (the > in the request's
// subject is matched as a literal token; the server reads it as a
// wildcard), and so reads wide.x.y, which kv.Get refuses it.
func TestPinStarPatternAllowsReadingDeeperKeysByDirectGet(t *testing.T) {
	f := newFixture(t)
	kvR, _ := f.kv(t, "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvR.Create(ctx, "wide.x.y", []byte("deep")); err != nil {
		t.Fatal(err)
	}
	ncW, _ := f.conn(t, "wide")
	msg, err := ncW.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+".$KV."+bucket+".wide.>", nil)
	if err != nil || string(msg.Data) != "deep" || msg.Header.Get("Nats-Subject") != "$KV."+bucket+".wide.x.y" {
		t.Errorf("wide's direct get of wide.> got %v, %v (the pin no longer holds: update docs/security.md)", msg, err)
	}
}

// TestPinDeliverSubjectEscapesPublishPermissions: a user that may make a
// consumer on its own key may give it any deliver subject: the server then
// publishes that key's messages, whose value and headers the user wrote,
// to a subject the user may not publish to. Only the bucket's own subjects
// are refused as deliver subjects (a cycle), so it cannot write another
// election this way.
func TestPinDeliverSubjectEscapesPublishPermissions(t *testing.T) {
	f := newFixture(t)
	f.seed(t, "billing", "billing", "restart everything")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	listener, _ := f.conn(t, "root")
	sub, err := listener.SubscribeSync("orders.commands")
	if err != nil {
		t.Fatal(err)
	}
	if err := listener.Flush(); err != nil {
		t.Fatal(err)
	}
	ncB, _ := f.conn(t, "billing")
	create := func(name, deliver string) (*nats.Msg, error) {
		body := fmt.Sprintf(`{"stream_name":%q,"config":{"name":%q,"deliver_subject":%q,"filter_subject":%q,"ack_policy":"none","deliver_policy":"last_per_subject","inactive_threshold":60000000000}}`,
			stream, name, deliver, "$KV."+bucket+".billing")
		return ncB.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+stream+"."+name+".$KV."+bucket+".billing", []byte(body))
	}
	resp, err := create("spoof", "orders.commands")
	if err != nil || strings.Contains(string(resp.Data), `"error"`) {
		t.Fatalf("billing cannot make a push consumer (the pin no longer holds: update docs/security.md): %v %s", err, respData(resp))
	}
	got, err := sub.NextMsg(3 * time.Second)
	if err != nil || string(got.Data) != "restart everything" {
		t.Errorf("orders.commands got %v, %v from billing's consumer (the pin no longer holds: update docs/security.md)", got, err)
	}

	resp, err = create("cycle", "$KV."+bucket+".app-a.cron")
	if err != nil || !strings.Contains(string(resp.Data), "cycle") {
		t.Errorf("a consumer delivering into the bucket: %v %s, want JetStream's refusal of a cycle", err, respData(resp))
	}
}

func respData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
