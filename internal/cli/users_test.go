package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/testpki"
)

// UsersBroker is a broker with TLS and users whose permissions differ, for
// the tests of what a user with narrow permissions can do. It is exported
// for the cli_test package's tests (this file is compiled only for tests).
//
// Its users: admin (plugin.conclave.user.admin.admin = true), dash (observes
// every election: observe = >, but no admin) and app-a (campaigns in app-a.>
// only).
type UsersBroker struct {
	// URL is the broker's client URL.
	URL string
	// Conf holds each user's client configuration file, for --config.
	Conf map[string]string

	leaves map[string]*testpki.Leaf
}

// StartUsersBroker starts a UsersBroker, which stops when the test ends.
func StartUsersBroker(t *testing.T) *UsersBroker {
	t.Helper()
	ca := testpki.NewCA(t, "ca")
	node := ca.Issue(t, "broker")
	u := &UsersBroker{Conf: map[string]string{}, leaves: map[string]*testpki.Leaf{}}
	users := map[string]*config.User{
		"admin": {Admin: true},
		"dash":  {Observe: []string{">"}},
		"app-a": {Campaign: []string{"app-a.>"}},
	}
	for name, user := range users {
		leaf := ca.Issue(t, name)
		user.Name, user.Certificate = name, leaf.Subject
		u.leaves[name] = leaf
	}
	b := brokertest.StartSingle(t, func(c *config.Config) {
		c.LeaderElectionTTL = 10 * time.Second
		c.TLSCertificate, c.TLSKey, c.TLSCA = node.CertFile, node.KeyFile, node.CAFile
		c.ClientTLSForceRequired = true
		c.Users = users
	})
	u.URL = b.ClientURL()
	dir := t.TempDir()
	for name, leaf := range u.leaves {
		path := filepath.Join(dir, name+".conf")
		body := strings.Join([]string{
			"identity = " + name + "-1",
			"plugin.choria.middleware_hosts = " + u.URL,
			"plugin.security.file.certificate = " + leaf.CertFile,
			"plugin.security.file.key = " + leaf.KeyFile,
			"plugin.security.file.ca = " + leaf.CAFile,
			"plugin.nats.user = " + name,
		}, "\n") + "\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		u.Conf[name] = path
	}
	return u
}

// JetStream connects as user and returns the connection's JetStream context,
// once the election bucket can be opened through it; the connection is
// closed when the test ends.
func (u *UsersBroker) JetStream(t *testing.T, user string) jetstream.JetStream {
	t.Helper()
	leaf := u.leaves[user]
	// The broker's refusals reach the connection as asynchronous errors:
	// kept, and shown if the test fails, where they are the likely cause.
	var mu sync.Mutex
	var refusals []string
	keep := func(_ *nats.Conn, sub *nats.Subscription, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(refusals) < 20 {
			on := ""
			if sub != nil {
				on = fmt.Sprintf(" (subscription to %s)", sub.Subject)
			}
			refusals = append(refusals, err.Error()+on)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range refusals {
			t.Logf("%s's connection was told asynchronously: %s", user, r)
		}
	})
	// Its cleanup, registered after the report's, closes the connection
	// first: every error is in before the report.
	_, js := natstest.Connect(t, u.URL, nats.ClientCert(leaf.CertFile, leaf.KeyFile), nats.RootCAs(leaf.CAFile),
		nats.CustomInboxPrefix(acl.InboxPrefix(user)), nats.ErrorHandler(keep))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.KeyValue(ctx, bucket.Name); err != nil {
		t.Fatalf("election bucket as %s: %v", user, err)
	}
	return js
}

// TestReadRefusedIsPermissionDenied: reading an election the user may not
// read (through a watch, as every read of the CLI's goes) fails with
// denied.ErrPermissionDenied naming the refused watch, not with the
// deadline that the broker's silence runs into; one it may read succeeds.
func TestReadRefusedIsPermissionDenied(t *testing.T) {
	t.Parallel()
	u := StartUsersBroker(t)
	e := &elections{bucket: bucket.Name, a: &app{stdout: new(strings.Builder), stderr: new(strings.Builder),
		conn: connFlags{config: u.Conf["app-a"], timeout: 2 * time.Second, lookupEnv: envFrom(nil)}}}
	ctx := t.Context()
	s, err := e.open(ctx, connectOptions{name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.readRecords(ctx, "app-a.cron"); err != nil {
		t.Fatalf("reading an election app-a may read: %v", err)
	}
	_, err = s.readRecords(ctx, "app-b.cron")
	if !errors.Is(err, denied.ErrPermissionDenied) {
		t.Fatalf("reading app-b.cron as app-a: %v; want denied.ErrPermissionDenied", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline") {
		t.Errorf("the error still reports the deadline: %v", err)
	}
	for _, want := range []string{"reading election app-b.cron", "$JS.API.CONSUMER.CREATE.KV_" + bucket.Name + ".", ".$KV." + bucket.Name + ".app-b.cron"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the connection's callbacks to write
// while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAsyncErrorsGoToTheCLIsLog: a permissions violation on a CLI
// connection is not printed raw on stderr, as nats.go does without an
// error handler; it stays the connection's last error (the refused read is
// still explained as denied.ErrPermissionDenied), and is a debug line of
// the event log of a --verbose command. Other asynchronous errors are one
// warning line.
func TestAsyncErrorsGoToTheCLIsLog(t *testing.T) {
	t.Parallel()
	u := StartUsersBroker(t)
	for _, verbose := range []bool{false, true} {
		stderr, logged := new(syncBuffer), new(syncBuffer)
		e := &elections{bucket: bucket.Name, a: &app{stdout: new(strings.Builder), stderr: stderr,
			conn: connFlags{config: u.Conf["app-a"], timeout: 2 * time.Second, lookupEnv: envFrom(nil)}}}
		s, err := e.open(t.Context(), connectOptions{name: "test", log: newEventLog(logged, false), verbose: verbose})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.readRecords(t.Context(), "app-b.cron"); !errors.Is(err, denied.ErrPermissionDenied) {
			t.Errorf("verbose %v: reading app-b.cron as app-a: %v; want denied.ErrPermissionDenied", verbose, err)
		}
		// nats.go runs its callbacks in order: once the closed handler
		// has run, so has the error handler for the refusal before it.
		closed := make(chan struct{})
		s.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		s.Close()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection's closed handler did not run")
		}
		if stderr.String() != "" {
			t.Errorf("verbose %v: stderr has %q, want nothing", verbose, stderr)
		}
		const debug = "debug: the broker refused a request of this connection's user: nats: permissions violation"
		if got := strings.Contains(logged.String(), debug); got != verbose {
			t.Errorf("verbose %v: the log has %q; want the debug line %v", verbose, logged, verbose)
		}
	}

	var stderr syncBuffer
	asyncErrorHandler(connectOptions{}, &stderr)(nil, nil, nats.ErrSlowConsumer)
	if got, want := stderr.String(), "conclave: warning: the NATS connection reported an error: "+nats.ErrSlowConsumer.Error()+"\n"; got != want {
		t.Errorf("a slow consumer without an event log: stderr %q, want %q", got, want)
	}
	var logged syncBuffer
	asyncErrorHandler(connectOptions{log: newEventLog(&logged, false)}, &stderr)(nil, nil, nats.ErrSlowConsumer)
	if !strings.HasSuffix(logged.String(), " conclave: warning: the NATS connection reported an error: "+nats.ErrSlowConsumer.Error()+"\n") {
		t.Errorf("a slow consumer with an event log: log %q, want one warning line", logged.String())
	}
}
