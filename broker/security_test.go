package broker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/testpki"
	"github.com/conclave-io/conclave/security"
)

// useTLS makes cfg serve TLS with leaf and its CA.
func useTLS(cfg *config.Config, leaf *testpki.Leaf) {
	cfg.TLSCertificate, cfg.TLSKey, cfg.TLSCA = leaf.CertFile, leaf.KeyFile, leaf.CAFile
	cfg.TLSTimeout = config.DefaultTLSTimeout
}

// hashPassword returns a cheap bcrypt hash of password.
func hashPassword(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// startBroker starts a broker from cfg logging to log, shut down when the
// test ends.
func startBroker(t *testing.T, cfg *config.Config, log *logrus.Entry) *broker.Broker {
	t.Helper()
	b, err := broker.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(testContext(t, 60*time.Second)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Shutdown)
	return b
}

// certOpts are the options of a TLS client trusting caFile and presenting
// leaf (none when nil).
func certOpts(caFile string, leaf *testpki.Leaf) []nats.Option {
	opts := []nats.Option{nats.RootCAs(caFile)}
	if leaf != nil {
		opts = append(opts, nats.ClientCert(leaf.CertFile, leaf.KeyFile))
	}
	return opts
}

// forcedCertOpts are certOpts presenting leaf even when the server asks for
// certificates of another CA (Go's client would otherwise send none).
func forcedCertOpts(t *testing.T, caFile string, leaf *testpki.Leaf) []nats.Option {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return []nats.Option{nats.Secure(&tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &pair, nil
		},
	})}
}

// dial connects once, without retrying or reconnecting. Its asynchronous
// errors go to the returned channel.
func dial(url string, opts ...nats.Option) (*nats.Conn, <-chan error, error) {
	errs := make(chan error, 16)
	opts = append([]nats.Option{
		nats.NoReconnect(),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	return nc, errs, err
}

// login connects as a user, with its own inbox prefix, closed at the end.
func login(t *testing.T, url, user string, opts ...nats.Option) (*nats.Conn, <-chan error) {
	t.Helper()
	opts = append(opts, nats.CustomInboxPrefix(acl.InboxPrefix(user)))
	nc, errs, err := dial(url, opts...)
	if err != nil {
		t.Fatalf("logging in as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// waitAsyncError waits for an asynchronous error containing want.
func waitAsyncError(t *testing.T, errs <-chan error, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-errs:
			if strings.Contains(err.Error(), want) {
				return
			}
			t.Logf("asynchronous error: %v", err)
		case <-timeout:
			t.Fatalf("no asynchronous error saying %q within 10s", want)
		}
	}
}

// checkTLSRefusal checks a client's error for a certificate the server
// refused. With TLS 1.3 the client finishes its side of the handshake
// before the server has checked its certificate, so it sees the server's
// alert (want, such as "remote error: tls: certificate required") when it
// reads first, or a closed connection when its CONNECT is written first.
func checkTLSRefusal(t *testing.T, err error, want string) {
	t.Helper()
	const closed = "nats: tls error: connection closed by remote after TLS handshake"
	if !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), closed) {
		t.Errorf("client error %q says neither %q nor %q", err, want, closed)
	}
}

// waitLog waits until an entry at level holds s.
func waitLog(t *testing.T, hook *test.Hook, level logrus.Level, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(entriesWith(hook, level, s)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %s log entry saying %q within 10s", level, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entriesWith returns the messages of entries at level whose message holds s.
func entriesWith(hook *test.Hook, level logrus.Level, s string) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level == level && strings.Contains(e.Message, s) {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestNewRefusesUnsafeDefaults(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	leaf := ca.Issue(t, "broker")
	pwUser := func(c *config.Config) {
		c.Users = map[string]*config.User{"app-a": {Name: "app-a", PasswordHash: hashPassword(t, "pw"), Campaign: []string{"app-a.>"}}}
	}
	cases := []struct {
		name   string
		mutate func(*config.Config)
		says   []string // empty: New succeeds
	}{
		{"all addresses without TLS or users", func(c *config.Config) { c.ListenAddress = "0.0.0.0" },
			[]string{"0.0.0.0", "plain-text", "without logging in", "plugin.security.file.certificate", "plugin.conclave.user.NAME.password", "plugin.conclave.insecure = true"}},
		{"IPv6 any without TLS", func(c *config.Config) { c.ListenAddress = "::" },
			[]string{"[::]", "plain-text"}},
		{"a host name without TLS", func(c *config.Config) { c.ListenAddress = "broker.example.net" },
			[]string{"broker.example.net", "plain-text"}},
		{"users without TLS", func(c *config.Config) { c.ListenAddress = "10.1.2.3"; pwUser(c) },
			[]string{"plain-text", "plugin.security.file.certificate"}},
		{"TLS without client certificates or users", func(c *config.Config) {
			c.ListenAddress = "0.0.0.0"
			useTLS(c, leaf)
			c.ClientTLSForceRequired = false
		}, []string{"without logging in", "plugin.choria.network.client_tls_force_required"}},
		{"peer port without TLS", func(c *config.Config) {
			c.ListenAddress = "0.0.0.0"
			c.PeerPort = 5222
			c.Peers = []string{"nats://10.1.0.2:5222"}
		}, []string{"peer port (0.0.0.0:5222, plugin.choria.network.peer_port) would accept plain-text routes"}},
		{"mutual TLS", func(c *config.Config) {
			c.ListenAddress = "0.0.0.0"
			useTLS(c, leaf)
			c.ClientTLSForceRequired = true
		}, nil},
		{"TLS with users", func(c *config.Config) {
			c.ListenAddress = "0.0.0.0"
			useTLS(c, leaf)
			pwUser(c)
		}, nil},
		{"loopback cluster with users, routes without TLS or peer credentials", func(c *config.Config) {
			c.ListenAddress = "127.0.0.1"
			c.PeerPort = 5222
			c.Peers = []string{"nats://127.0.0.2:5222"}
			pwUser(c)
		}, []string{"a route bypasses every user's permissions", "peer_user and peer_password"}},
		{"loopback cluster with users and peer credentials", func(c *config.Config) {
			c.ListenAddress = "127.0.0.1"
			c.PeerPort = 5222
			c.Peers = []string{"nats://127.0.0.2:5222"}
			c.PeerUser, c.PeerPassword = "route", "s3cret"
			pwUser(c)
		}, nil},
		{"loopback without anything", func(c *config.Config) { c.ListenAddress = "127.0.0.1" }, nil},
		{"localhost without anything", func(c *config.Config) { c.ListenAddress = "localhost" }, nil},
		{"insecure", func(c *config.Config) { c.ListenAddress = "0.0.0.0"; c.Insecure = true }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := brokertest.Config(t, "node-a")
			cfg.Path = "/etc/conclave/broker.conf"
			tc.mutate(cfg)
			_, err := broker.New(cfg, nil)
			if len(tc.says) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, broker.ErrInsecure) {
				t.Fatalf("New: %v, want ErrInsecure", err)
			}
			for _, s := range append(tc.says, "/etc/conclave/broker.conf: ") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

func TestNewRefusesUnusableTLSFiles(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cases := []struct {
		name   string
		mutate func(*config.Config)
		says   string
	}{
		{"missing certificate", func(c *config.Config) {
			useTLS(c, ca.Issue(t, "broker"))
			c.TLSCertificate += ".missing"
		}, "does not exist"},
		{"expired certificate", func(c *config.Config) { useTLS(c, ca.Issue(t, "old", testpki.Expired())) }, "expired"},
		{"certificate of another CA", func(c *config.Config) {
			useTLS(c, testpki.NewCA(t, "other").Issue(t, "broker"))
			c.TLSCA = ca.File
		}, "does not chain to the CA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := brokertest.Config(t, "node-a")
			tc.mutate(cfg)
			_, err := broker.New(cfg, nil)
			if !errors.Is(err, broker.ErrInvalidConfig) || !errors.Is(err, security.ErrTLSFiles) {
				t.Fatalf("New: %v, want ErrInvalidConfig and security.ErrTLSFiles", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestInsecureStartsWithWarnings(t *testing.T) {
	cfg := brokertest.Config(t, "exposed")
	cfg.ListenAddress = "0.0.0.0"
	cfg.Insecure = true
	cfg.StatsAddress, cfg.StatsPort = "0.0.0.0", -1
	log, hook := hookedLogger(logrus.InfoLevel)
	startBroker(t, cfg, log)

	for _, want := range []string{
		"INSECURE (plugin.conclave.insecure = true): the client port (0.0.0.0:any free port, plugin.choria.network.listen_address 0.0.0.0) would accept plain-text connections",
		"INSECURE (plugin.conclave.insecure = true): the client port (0.0.0.0:any free port, plugin.choria.network.listen_address 0.0.0.0) would let anyone who reaches it in without logging in",
		"Exposed: the monitoring port (0.0.0.0:any free port, plugin.choria.stats_address) is reachable beyond loopback and needs no login",
	} {
		if len(entriesWith(hook, logrus.WarnLevel, want)) != 1 {
			t.Errorf("no single warning %q", want)
		}
	}

	// A loopback broker with monitoring on loopback warns about nothing.
	log, hook = hookedLogger(logrus.InfoLevel)
	quiet := brokertest.Config(t, "quiet")
	quiet.StatsPort = -1
	startBroker(t, quiet, log)
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("loopback broker warned: %s", e.Message)
		}
	}
}

// usersConfig is a broker with TLS (client certificates optional) and three
// users: app-a logs in with a password, ops (admin) and dash (observer) with
// certificates, one by DNS SAN, one by subject DN.
func usersConfig(t *testing.T, ca *testpki.CA, dash *testpki.Leaf) *config.Config {
	cfg := brokertest.Config(t, "guarded")
	useTLS(cfg, ca.Issue(t, "guarded"))
	cfg.ClientTLSForceRequired = false
	cfg.Users = map[string]*config.User{
		"app-a": {Name: "app-a", PasswordHash: hashPassword(t, "app-a-password"), Campaign: []string{"app-a.>"}},
		"ops":   {Name: "ops", Certificate: "ops.example.net", Admin: true},
		"dash":  {Name: "dash", Certificate: dash.Subject, Observe: []string{">"}},
	}
	return cfg
}

func TestClientLogins(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	dashCert := ca.Issue(t, "dash", testpki.DNSNames("dash-host"))
	opsCert := ca.Issue(t, "ops-client", testpki.DNSNames("ops.example.net"))
	nobodyCert := ca.Issue(t, "nobody")
	cfg := usersConfig(t, ca, dashCert)
	log, hook := hookedLogger(logrus.InfoLevel)
	b := startBroker(t, cfg, log)
	url := b.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("ClientURL %q, want tls://", url)
	}
	if spec := b.BucketSpec(); !spec.DenyRollup {
		t.Error("rollups allowed with users configured")
	}

	refusals := []struct {
		name   string
		opts   []nats.Option
		client string // what nats.go returns
		log    string // the broker's warning, "" for none
	}{
		{"no TLS at all", nil,
			"x509: certificate signed by unknown authority", ""},
		{"no credentials", certOpts(ca.File, nil),
			"nats: Authorization Violation", "Refused a client login: no credentials: give plugin.nats.user and plugin.nats.pass, or a client certificate of a configured user"},
		{"wrong password", append(certOpts(ca.File, nil), nats.UserInfo("app-a", "not-the-password")),
			"nats: Authorization Violation", `Refused a client login: wrong password for user "app-a"`},
		{"unknown user", append(certOpts(ca.File, nil), nats.UserInfo("mallory", "x")),
			"nats: Authorization Violation", `Refused a client login: unknown user "mallory"`},
		{"password for a certificate user", append(certOpts(ca.File, nil), nats.UserInfo("ops", "x")),
			"nats: Authorization Violation", `Refused a client login: user "ops" logs in with its certificate, not a password`},
		{"certificate of no user", certOpts(ca.File, nobodyCert),
			"nats: Authorization Violation", `Refused a client login: certificate "CN=nobody,O=Conclave Test" (SANs nobody, localhost) is no user's certificate identity`},
		{"certificate of another user than named", append(certOpts(ca.File, opsCert), nats.UserInfo("dash", "")),
			"nats: Authorization Violation", `Refused a client login: certificate "CN=ops-client,O=Conclave Test" belongs to user "ops", not "dash"`},
		{"certificate from another CA", forcedCertOpts(t, ca.File, testpki.NewCA(t, "other").Issue(t, "ops-client", testpki.DNSNames("ops.example.net"))),
			"remote error: tls: unknown certificate authority", ""},
		{"expired certificate", certOpts(ca.File, ca.Issue(t, "old-ops", testpki.DNSNames("ops.example.net"), testpki.Expired())),
			"remote error: tls: expired certificate", ""},
		{"the in-process credential over the network", append(certOpts(ca.File, nil), nats.UserInfo(broker.InternalUser, b.InternalPassword())),
			"nats: Authorization Violation", "Refused a client login: the broker's in-process login was used on a network connection"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			hook.Reset()
			nc, _, err := dial(url, tc.opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			t.Logf("nats.go: %v", err)
			if strings.Contains(tc.client, "tls:") {
				checkTLSRefusal(t, err, tc.client)
			} else if !strings.Contains(err.Error(), tc.client) {
				t.Errorf("client error %q does not say %q", err, tc.client)
			}
			if tc.log != "" && len(entriesWith(hook, logrus.WarnLevel, tc.log)) != 1 {
				t.Errorf("no warning %q; got %v", tc.log, entriesWith(hook, logrus.WarnLevel, "Refused"))
			}
		})
	}
}

// openBucket opens the election bucket on nc.
func openBucket(t *testing.T, ctx context.Context, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	return kv
}

func TestStartLogsUsersWithoutSecrets(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cfg := usersConfig(t, ca, ca.Issue(t, "dash"))
	log, hook := hookedLogger(logrus.InfoLevel)
	startBroker(t, cfg, log)
	for _, want := range []string{
		`Broker user app-a logs in with a password; may campaign in app-a.>`,
		`Broker user dash logs in with certificate "CN=dash,O=Conclave Test"; may observe >`,
		`Broker user ops logs in with certificate "ops.example.net"; may administer every election`,
		`Security: TLS 1.2+ only, client certificates optional (verified when given), certificate CN=guarded,O=Conclave Test, CA-verified (handshake timeout 2s)`,
	} {
		if !hasMessage(hook, logrus.InfoLevel, want) {
			t.Errorf("no log line %q", want)
		}
	}
	// The test's hashes are made at bcrypt's lowest cost, for speed: the
	// broker warns about such a hash.
	if want := "Conclave "; !hasMessagePrefix(hook, want) {
		t.Errorf("the broker does not log its version at start (%q…)", want)
	}
	if want := "User app-a's password hash has bcrypt cost 4: below 10 it is cheap to crack"; !hasMessagePrefix(hook, want) {
		t.Errorf("no warning %q", want)
	}
}

func TestMutualTLSWithoutUsers(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cfg := brokertest.Config(t, "mtls")
	useTLS(cfg, ca.Issue(t, "mtls"))
	cfg.ClientTLSForceRequired = true
	log, hook := hookedLogger(logrus.InfoLevel)
	b := startBroker(t, cfg, log)
	url := b.ClientURL()

	refusals := []struct {
		name   string
		opts   []nats.Option
		client string
	}{
		{"no certificate", certOpts(ca.File, nil), "remote error: tls: certificate required"},
		{"certificate from another CA", forcedCertOpts(t, ca.File, testpki.NewCA(t, "other").Issue(t, "client")), "remote error: tls: unknown certificate authority"},
		{"expired certificate", certOpts(ca.File, ca.Issue(t, "old", testpki.Expired())), "remote error: tls: expired certificate"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			nc, _, err := dial(url, tc.opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			t.Logf("nats.go: %v", err)
			checkTLSRefusal(t, err, tc.client)
		})
	}
	// nats-server logs each failed handshake itself, naming the certificate.
	waitLog(t, hook, logrus.ErrorLevel, "TLS handshake error: tls: failed to verify certificate: x509: certificate has expired or is not yet valid")

	// Any certificate the CA signed has full access.
	nc, _ := login(t, url, "anyone", certOpts(ca.File, ca.Issue(t, "client"))...)
	ctx := testContext(t, 30*time.Second)
	if _, err := openBucket(t, ctx, nc).Create(ctx, "anything", []byte("client")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if b.BucketSpec().DenyRollup {
		t.Error("rollups denied without users")
	}
}

func TestInProcessOptions(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cfg := usersConfig(t, ca, ca.Issue(t, "dash"))
	cfg.ClientTLSForceRequired = true
	b, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect("", b.InProcessOptions()...); !errors.Is(err, broker.ErrNotRunning) {
		t.Fatalf("connecting before Start: %v, want ErrNotRunning", err)
	}
	if err := b.Start(testContext(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)

	// No certificate, no secret from any file, and full access.
	nc, _ := natstest.Connect(t, "", b.InProcessOptions()...)
	ctx := testContext(t, 30*time.Second)
	if _, err := openBucket(t, ctx, nc).Create(ctx, "any.election", []byte("framework")); err != nil {
		t.Fatalf("Create: %v", err)
	}

	b.Shutdown()
	if _, err := nats.Connect("", b.InProcessOptions()...); !errors.Is(err, broker.ErrNotRunning) {
		t.Fatalf("connecting after Shutdown: %v, want ErrNotRunning", err)
	}
}

func TestRollupRefusedWhenUsersConfigured(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cfg := usersConfig(t, ca, ca.Issue(t, "dash"))
	// The bucket exists with rollups on, as a broker without users left it.
	first := brokertest.Config(t, "guarded")
	first.StreamStore = cfg.StreamStore
	b := startBroker(t, first, nil)
	if !b.ProvisionReport().Config.AllowRollup {
		t.Fatal("a broker without users turned rollups off")
	}
	b.Shutdown()

	b = startBroker(t, cfg, nil)
	if r := b.ProvisionReport(); !strings.Contains(r.String(), "rollup on → off") || r.Config.AllowRollup {
		t.Fatalf("provisioning with users: %q, AllowRollup %v", r, r.Config.AllowRollup)
	}
	nc, js := natstest.Connect(t, "", b.InProcessOptions()...)
	ctx := testContext(t, 30*time.Second)
	kv := openBucket(t, ctx, nc)
	for _, k := range []string{"app-a.one", "billing"} {
		if _, err := kv.Create(ctx, k, []byte("leader")); err != nil {
			t.Fatalf("Create %s: %v", k, err)
		}
	}
	msg := nats.NewMsg("$KV." + bucket.Name + ".app-a.one")
	msg.Header.Set("Nats-Rollup", "all")
	_, err := js.PublishMsg(ctx, msg)
	t.Logf("rollup publish: %v", err)
	if err == nil || !strings.Contains(err.Error(), "rollup") {
		t.Fatalf("rollup publish: %v, want a refusal", err)
	}
	if e, err := kv.Get(ctx, "billing"); err != nil || string(e.Value()) != "leader" {
		t.Fatalf("billing after the rollup: %v, %v", e, err)
	}
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
