package conclave_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	conclave "github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/testpki"
	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/security"
)

// secureServer is a NATS server with mutual TLS and two users: admin, and
// app, which may campaign in the elections under app. only.
type secureServer struct {
	srv   *server.Server
	ca    *testpki.CA
	admin *testpki.Leaf
}

func startSecureServer(t *testing.T) *secureServer {
	t.Helper()
	ca := testpki.NewCA(t, "ca")
	node := ca.Issue(t, "broker")
	files, err := security.Load(tlsConfig(node))
	if err != nil {
		t.Fatal(err)
	}
	b, stream := bucket.Name, "KV_"+bucket.Name
	allow := []string{
		"$JS.API.STREAM.INFO." + stream,
		"$KV." + b + ".app.>",
		"$JS.API.DIRECT.GET." + stream + ".$KV." + b + ".app.>",
		"$JS.API.CONSUMER.CREATE." + stream + ".*.$KV." + b + ".app.>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*", "$JS.API.CONSUMER.INFO." + stream + ".*",
	}
	srv := natstest.Start(t, &server.Options{
		JetStream: true,
		TLS:       true, TLSVerify: true, TLSConfig: files.Server(true), TLSTimeout: 2,
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "app", Password: "app-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: allow},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.app.>"}},
			}},
			{Username: "nobody", Password: "nobody", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"nothing"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.nobody.>"}},
			}},
		},
	})
	s := &secureServer{srv: srv, ca: ca, admin: ca.Issue(t, "admin")}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin"), nats.Secure(files.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, TTL: testTTL, History: 1}); err != nil {
		t.Fatal(err)
	}
	return s
}

func tlsConfig(l *testpki.Leaf) *config.Config {
	c := config.Default()
	c.TLSCertificate, c.TLSKey, c.TLSCA = l.CertFile, l.KeyFile, l.CAFile
	return c
}

// clientConfig is a client of s logging in as user with password pass and
// certificate l.
func (s *secureServer) clientConfig(l *testpki.Leaf, user, pass string) *config.Config {
	c := tlsConfig(l)
	c.Identity = "c1"
	c.MiddlewareHosts = []string{strings.Replace(s.srv.ClientURL(), "nats://", "tls://", 1)}
	c.NATSUser, c.NATSPass = user, pass
	return c
}

// TestFrameworkCampaignsOverMutualTLSAsAPermittedUser: the framework logs in
// with the configured certificate, user and password, uses the user's own
// inbox prefix, and campaigns.
func TestFrameworkCampaignsOverMutualTLSAsAPermittedUser(t *testing.T) {
	s := startSecureServer(t)
	fw := newFramework(t, s.clientConfig(s.ca.Issue(t, "c1"), "app", "app-pw"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := newCandidate()
	e, err := fw.NewCampaign(ctx, nil, "app.scheduler", c.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	await(t, c.won, "the permitted user wins")
}

// TestFrameworkRefusedLoginsSayWhy: each way a login can fail gives an error
// that matches ErrLogin and names the cause, at once rather than after
// retries.
func TestFrameworkRefusedLoginsSayWhy(t *testing.T) {
	s := startSecureServer(t)
	other := testpki.NewCA(t, "other")
	for _, tc := range []struct {
		name string
		cfg  func() *config.Config
		want string
	}{
		{"wrong password", func() *config.Config { return s.clientConfig(s.ca.Issue(t, "c1"), "app", "wrong") }, "refused the login of user app with plugin.nats.pass"},
		{"no credentials", func() *config.Config { return s.clientConfig(s.ca.Issue(t, "c1"), "", "") }, "refused the login of a client without a login"},
		{"certificate of another CA", func() *config.Config {
			c := s.clientConfig(other.Issue(t, "c1"), "app", "app-pw")
			c.TLSCA = s.ca.File // trusts the broker, presents a stranger's certificate
			return c
		}, "does not chain to the CA in plugin.security.file.ca"},
		{"broker of another CA", func() *config.Config { return s.clientConfig(other.Issue(t, "c1"), "app", "app-pw") }, "is not signed by the CA in plugin.security.file.ca"},
		{"expired certificate", func() *config.Config { return s.clientConfig(s.ca.Issue(t, "old", testpki.Expired()), "app", "app-pw") }, "expired on"},
		{"no certificate", func() *config.Config {
			c := s.clientConfig(s.ca.Issue(t, "c1"), "app", "app-pw")
			c.TLSCertificate, c.TLSKey, c.TLSCA = "", "", ""
			return c
		}, "not signed by a CA this machine trusts: set plugin.security.file.ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFramework(t, tc.cfg())
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			start := time.Now()
			_, err := fw.Connection(ctx)
			if !errors.Is(err, conclave.ErrLogin) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrLogin with %q", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v to fail", d)
			}
			t.Log(err)
		})
	}
}

// TestFrameworkSaysWhenTheUserMayNotOpenTheBucket: a user without
// permission to read the bucket gets ErrPermissionDenied naming the subject,
// not a timeout.
func TestFrameworkSaysWhenTheUserMayNotOpenTheBucket(t *testing.T) {
	s := startSecureServer(t)
	fw := newFramework(t, s.clientConfig(s.ca.Issue(t, "c1"), "nobody", "nobody"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := fw.NewElection(ctx, nil, "app.x")
	if !errors.Is(err, conclave.ErrPermissionDenied) || !strings.Contains(err.Error(), "$JS.API.STREAM.INFO.KV_"+bucket.Name) {
		t.Fatalf("got %v, want ErrPermissionDenied naming the stream info subject", err)
	}
}

// TestFrameworkCampaignInAForbiddenElectionEndsWithPermissionDenied: Start
// returns ErrPermissionDenied instead of retrying forever.
func TestFrameworkCampaignInAForbiddenElectionEndsWithPermissionDenied(t *testing.T) {
	s := startSecureServer(t)
	fw := newFramework(t, s.clientConfig(s.ca.Issue(t, "c1"), "app", "app-pw"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e, err := fw.NewCampaign(ctx, nil, "billing", streams.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); !errors.Is(err, conclave.ErrPermissionDenied) {
		t.Fatalf("Start returned %v, want ErrPermissionDenied", err)
	}
}

// TestEmbeddedBrokerWithUsersNeedsNoSecretOnDisk: a program that runs the
// broker itself, with users configured, campaigns over the in-process
// connection the broker logs in with a credential held only in memory;
// a network client without a login is refused.
func TestEmbeddedBrokerWithUsersNeedsNoSecretOnDisk(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("ops-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("embedded-node")
	cfg.BrokerNetwork = true
	cfg.ClientPort = config.RandomPort
	cfg.StreamStore = t.TempDir()
	cfg.LeaderElectionTTL = testTTL
	cfg.Users = map[string]*config.User{"ops": {Name: "ops", PasswordHash: string(hash), Admin: true}}
	fw := newFramework(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	b, err := embedded.StartBroker(ctx, fw)
	if err != nil {
		t.Fatal(err)
	}
	c := newCandidate()
	e, err := fw.NewCampaign(ctx, nil, "app.embedded", c.callbacks()...)
	if err != nil {
		t.Fatal(err)
	}
	c.start(t, e)
	await(t, c.won, "the embedded broker's own program wins")

	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Error("a client without a login connected to a broker with users")
	}
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("ops", "ops-pw"))
	if err != nil {
		t.Fatalf("the ops user cannot log in: %v", err)
	}
	nc.Close()
}
