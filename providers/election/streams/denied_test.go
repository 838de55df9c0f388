package streams

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/natstest"
)

// appPermissions lets a user campaign in the elections under app. and
// nothing else, over its own inbox prefix, as a broker with users compiles it.
func appPermissions(writeKeys bool) *server.Permissions {
	stream := "KV_" + bucketName
	allow := []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream + ".$KV." + bucketName + ".app.>",
		"$JS.API.CONSUMER.CREATE." + stream + ".*.$KV." + bucketName + ".app.>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*", "$JS.API.CONSUMER.INFO." + stream + ".*",
	}
	sub := []string{"_INBOX.app.>"}
	if writeKeys {
		// Campaigning, and who is standing, as a Conclave broker grants them.
		standing := []string{"conclave.candidates." + bucketName + ".app.>", "conclave.announce." + bucketName + ".app.>", "conclave.handover." + bucketName + ".app.>"}
		allow = append(append(allow, "$KV."+bucketName+".app.>"), standing...)
		sub = append(sub, standing...)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// permissionServer starts a server with the admin, who may do anything,
// and the user app, whose permissions are perms, and the bucket made by the
// admin. It returns the server, its options (to reload them changed) and
// the admin's connection.
func permissionServer(t *testing.T, perms *server.Permissions) (*server.Server, *server.Options, *nats.Conn) {
	t.Helper()
	opts := &server.Options{
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "app", Password: "app", Permissions: perms},
		},
	}
	srv := natstest.Start(t, opts)
	adminNC, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adminNC.Close)
	createBucket(t, adminNC, bucketConfig(3*time.Second))
	return srv, opts, adminNC
}

// appConn connects as the user app, with its inbox prefix, ignoring the
// connection's asynchronous errors (the refusals the tests cause).
func appConn(t *testing.T, srv *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("app", "app"), nats.CustomInboxPrefix("_INBOX.app"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startAsync runs e.Start and returns its result channel.
func startAsync(e *Election) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	return done
}

// TestStartReturnsPermissionDeniedForAnElectionTheUserMayNotTouch: a
// campaign in an election the user has no permission for ends with
// ErrPermissionDenied naming what was refused, instead of retrying forever,
// and the user's own election on the same connection keeps its leader.
func TestStartReturnsPermissionDeniedForAnElectionTheUserMayNotTouch(t *testing.T) {
	t.Parallel()
	srv, _, _ := permissionServer(t, appPermissions(true))
	kv := openBucket(t, appConn(t, srv))
	rec := newRecorder()
	mine := mustElection(t, "a", "app.mine", kv, append(rec.options("a"), WithRequestTimeout(time.Second))...)
	runElection(t, mine)
	rec.waitFor(t, 10*time.Second, "a leads app.mine", func(evs []event) bool { return leader(evs) == "a" })

	other := mustElection(t, "a", "billing", kv, WithRequestTimeout(time.Second))
	select {
	case err := <-startAsync(other):
		if !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("Start in billing returned %v, want ErrPermissionDenied", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "billing") || !strings.Contains(msg, "the broker refused") {
			t.Errorf("the error does not say what was refused: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start in a forbidden election did not return")
	}
	renewed := mine.Term()
	eventually(t, 5*time.Second, "app.mine still led and renewed", func() bool {
		return mine.IsLeader() && mine.Term() == renewed && mine.Healthy(2*time.Second) == nil
	})
	if evs := rec.snapshot(); len(evs) != 1 {
		t.Errorf("app.mine was disturbed: %s", describe(evs))
	}
}

// TestLeaderWhoseWritesAreRevokedStandsDown: when the broker's operator
// takes a user's permission away, its leader's next renewal is refused and
// it stands down at once with CauseDenied, and Start says why.
func TestLeaderWhoseWritesAreRevokedStandsDown(t *testing.T) {
	t.Parallel()
	srv, opts, _ := permissionServer(t, appPermissions(true))
	kv := openBucket(t, appConn(t, srv))
	rec := newRecorder()
	e := mustElection(t, "a", "app.mine", kv, append(rec.options("a"), WithRequestTimeout(time.Second))...)
	done := startAsync(e)
	rec.waitFor(t, 10*time.Second, "a leads", func(evs []event) bool { return leader(evs) == "a" })

	revoked := opts.Clone()
	revoked.Users[1].Permissions = appPermissions(false)
	if err := srv.ReloadOptions(revoked); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitFor(t, 10*time.Second, "a stands down", func(evs []event) bool { return len(evs) == 2 })
	if evs[1].cause != CauseDenied {
		t.Errorf("term ended with %v, want %v", evs[1].cause, CauseDenied)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "$KV."+bucketName+".app.mine") {
			t.Errorf("Start returned %v, want ErrPermissionDenied naming the key's subject", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return")
	}
}

// TestStartFailsAtOnceWhenRefused: the broker answers a refused request
// with silence and reports the refusal on the connection at once; Start
// returns ErrPermissionDenied then, not after the request timeouts of the
// watch and the read (issue 20: 10 s with the default timeout).
func TestStartFailsAtOnceWhenRefused(t *testing.T) {
	srv, _, _ := permissionServer(t, appPermissions(true))
	kv := openBucket(t, appConn(t, srv))
	e := mustElection(t, "a", "billing", kv, WithRequestTimeout(2500*time.Millisecond))
	began := time.Now()
	select {
	case err := <-startAsync(e):
		if !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("Start returned %v, want ErrPermissionDenied", err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("Start took %v to return ErrPermissionDenied (the request timeout is 2.5s); the refusal was reported at once", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start in a forbidden election did not return")
	}
}

// TestStopDoesNotWaitForASilentBroker: a campaign whose requests go
// unanswered (here a JetStream API prefix whose requests are dropped, but
// for the bucket's settings) stops as soon as it is told to, not after the
// request in flight times out.
func TestStopDoesNotWaitForASilentBroker(t *testing.T) {
	srv, _, adminNC := permissionServer(t, appPermissions(true))
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	dropped := make(chan string, 100)
	// "silent.X" forwards the bucket's settings to "$JS.API.X" and drops
	// every other request: reads, watches and writes are never answered.
	_, err = adminNC.Subscribe("silent.>", func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, "silent.")
		if !strings.HasPrefix(rest, "STREAM.INFO.") {
			select {
			case dropped <- m.Subject:
			default:
			}
			return
		}
		reply, err := adminNC.Request("$JS.API."+rest, m.Data, 5*time.Second)
		if err == nil {
			_ = m.Respond(reply.Data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := adminNC.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, "silent")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewElection("a", "app.mine", js, InBucket(bucketName), WithRequestTimeout(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := startAsync(e)
	select {
	case subj := <-dropped:
		t.Logf("in flight, never to be answered: %s", subj)
	case <-time.After(10 * time.Second):
		t.Fatal("the campaign made no request")
	}
	stopped := time.Now()
	e.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v after Stop, want nil", err)
		}
		if took := time.Since(stopped); took > time.Second {
			t.Errorf("Start returned %v after Stop: it waited for a request the broker never answers", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return after Stop")
	}
}

// TestObserverOfAForbiddenElectionEndsAtOnce: an observer of an election its
// user may not read ends with ErrPermissionDenied naming what was refused as
// soon as the broker reports the refusal, not after its requests time out
// (5 s each), and an observer of the user's own election follows it.
func TestObserverOfAForbiddenElectionEndsAtOnce(t *testing.T) {
	srv, _, adminNC := permissionServer(t, appPermissions(false))
	kv := openBucket(t, appConn(t, srv))
	_, seen := newObserver(t, "app.mine", kv)
	mustCreate(t, openBucket(t, adminNC), "app.mine", "a")
	seen.waitFor(t, "a elected in app.mine", func(l Leadership) bool { return l.Leader == "a" })

	o, err := NewObserver("billing", jsFor(kv), bucketOptions(kv, WithLogger(testLogger{t: t}))...)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- o.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "billing") {
			t.Fatalf("Run returned %v, want ErrPermissionDenied naming billing", err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("Run took %v to return ErrPermissionDenied; the refusal was reported at once", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an observer of a forbidden election did not end")
	}
}
