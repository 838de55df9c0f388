package cli_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/conclave-io/conclave/internal/testpki"
)

// brokerConfig is a broker configuration for `conclave broker run`.
func brokerConfig(t *testing.T, port int) string {
	t.Helper()
	return writeFile(t, "broker.conf", fmt.Sprintf(`# a test broker
identity = test-broker
loglevel = info
plugin.choria.broker_network = true
plugin.choria.network.listen_address = 127.0.0.1
plugin.choria.network.client_port = %d
plugin.choria.network.stream.store = %s
plugin.choria.network.stream.leader_election_ttl = 2s
`, port, filepath.Join(t.TempDir(), "store")))
}

// TestBrokerRunRandomPort runs the broker as users do, on a random port read
// from its log, lists its elections, and stops it with SIGINT.
func TestBrokerRunRandomPort(t *testing.T) {
	t.Parallel()
	cfg := brokerConfig(t, -1)
	b := startConclave(t, nil, "broker", "run", "--config", cfg)
	_, m := b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker test-broker ready: election bucket created.*client_url="?(nats://[^" ]+)`))
	url := m[1]

	r := conclave(t, "--server", url, "election", "list")
	mustSucceed(t, r)
	mustContain(t, "list", r.stdout, "No elections in CHORIA_LEADER_ELECTION (TTL 2s).")

	// The broker's own configuration cannot tell a random port.
	r = conclave(t, "--config", cfg, "election", "list")
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "random client port", "pass --server")

	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}
	mustContain(t, "broker log", b.stderr.String(), "Broker test-broker stopped")
}

// TestBrokerRunConfig runs the broker on a fixed port and connects to it
// through its own configuration file (--config), as an operator on the
// broker's host does.
func TestBrokerRunConfig(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	cfg := brokerConfig(t, port)
	b := startConclave(t, nil, "broker", "run", "--config", cfg)
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker test-broker ready`))

	r := conclave(t, "--config", cfg, "election", "info")
	mustSucceed(t, r)
	mustContain(t, "info", r.stdout, "TTL:", "2s", "No problems found")

	// A Choria client configuration: keys conclave does not know are
	// skipped, plugin.choria.middleware_hosts says where.
	choria := writeFile(t, "client.conf", "collectives = mcollective\nplugin.choria.middleware_hosts = 127.0.0.1:"+strconv.Itoa(port)+"\n")
	r = conclave(t, "--config", choria, "election", "list")
	mustSucceed(t, r)
	mustContain(t, "list", r.stdout, "No elections")

	// A security provider other than file cannot be honoured: refused by
	// name rather than ignored (which would connect without its TLS).
	puppet := writeFile(t, "puppet.conf", "plugin.security.provider = puppet\nplugin.choria.middleware_hosts = 127.0.0.1:"+strconv.Itoa(port)+"\n")
	r = conclave(t, "--config", puppet, "election", "list")
	if r.code == 0 {
		t.Errorf("a configuration with plugin.security.provider = puppet was used")
	}
	mustContain(t, "stderr", r.stderr, `"puppet" is not supported: Conclave supports only "file"`)

	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}
}

// TestBrokerRunRefusesInsecure: a broker told to listen beyond loopback
// without TLS or users does not start, and says which keys to set.
func TestBrokerRunRefusesInsecure(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "broker.conf", fmt.Sprintf(`identity = exposed
plugin.choria.network.listen_address = 0.0.0.0
plugin.choria.network.client_port = -1
plugin.choria.network.stream.store = %s
`, filepath.Join(t.TempDir(), "store")))
	r := conclave(t, "broker", "run", "--config", cfg)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, cfg+": ", "plain-text", "plugin.security.file.certificate", "plugin.conclave.user.NAME.password", "plugin.conclave.insecure = true")
}

// TestBrokerRunWithUsers runs a broker with TLS and a password user from a
// configuration file, as an operator does; a client logs in with the
// user's password and certificate, a wrong password is refused, and no
// password or hash reaches the broker's log.
func TestBrokerRunWithUsers(t *testing.T) {
	t.Parallel()
	const password, wrong = "ops-pass-4d1f9e", "wrong-pass-c02a7b"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t, "ca")
	server, client := ca.Issue(t, "broker"), ca.Issue(t, "ops-client")
	port := natstest.FreePort(t)
	cfg := writeFile(t, "broker.conf", fmt.Sprintf(`identity = secure-broker
loglevel = debug
plugin.choria.network.listen_address = 127.0.0.1
plugin.choria.network.client_port = %d
plugin.choria.network.stream.store = %s
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
plugin.conclave.user.ops.password = %s
plugin.conclave.user.ops.admin = true
`, port, filepath.Join(t.TempDir(), "store"), server.CertFile, server.KeyFile, server.CAFile, hash))
	b := startConclave(t, nil, "broker", "run", "--config", cfg)
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker secure-broker ready`))

	clientConf := func(pass string) string {
		return writeFile(t, "client.conf", fmt.Sprintf(`plugin.choria.middleware_hosts = tls://127.0.0.1:%d
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
plugin.nats.user = ops
plugin.nats.pass = %s
`, port, client.CertFile, client.KeyFile, client.CAFile, pass))
	}
	r := conclave(t, "--config", clientConf(password), "election", "list")
	mustSucceed(t, r)
	mustContain(t, "list", r.stdout, "No elections")

	r = conclave(t, "--config", clientConf(wrong), "election", "list")
	if r.code == 0 {
		t.Error("a wrong password was accepted")
	}
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Refused a client login: wrong password for user \\"ops\\"`))

	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}
	log := b.stderr.String()
	mustContain(t, "broker log", log, "user ops logs in with a password", "client certificates required")
	for _, secret := range []string{password, wrong, string(hash)} {
		if regexp.MustCompile(regexp.QuoteMeta(secret)).MatchString(log) {
			t.Errorf("the broker log holds the secret %q", secret)
		}
	}
}

// TestBrokerRunNetworkOff: a file that says plugin.choria.broker_network =
// false (a client's, in Choria) is refused, naming the line, instead of
// running a broker anyway; leaving the key out runs the broker.
func TestBrokerRunNetworkOff(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "client.conf", fmt.Sprintf(`identity = not-a-broker
plugin.choria.broker_network = false
plugin.choria.network.client_port = -1
plugin.choria.network.stream.store = %s
`, filepath.Join(t.TempDir(), "store")))
	r := conclave(t, "broker", "run", "--config", cfg)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, cfg+":2 sets plugin.choria.broker_network = false: that configuration runs no broker")
	if strings.Contains(r.stderr, "ready") {
		t.Errorf("a broker started:\n%s", r.stderr)
	}
}

// TestBrokerRunTwice: a second `conclave broker run` on the port or the
// store of a running one stops at once with status 1, saying what is taken
// and by whom, before it opens the store; the first keeps running.
func TestBrokerRunTwice(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	store := filepath.Join(t.TempDir(), "store")
	conf := func(name string, port int) string {
		return writeFile(t, name, fmt.Sprintf("identity = %s\nplugin.choria.network.client_port = %d\nplugin.choria.network.stream.store = %s\n",
			strings.TrimSuffix(name, ".conf"), port, store))
	}
	first := conf("first.conf", port)
	b := startConclave(t, nil, "broker", "run", "--config", first)
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker first ready`))

	for _, tc := range []struct {
		name, cfg string
		says      []string
	}{
		{"same port", conf("second.conf", port), []string{"port in use", "plugin.choria.network.client_port", strconv.Itoa(port)}},
		{"same store", conf("third.conf", natstest.FreePort(t)), []string{"store directory in use", store, "broker first, pid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclave(t, "broker", "run", "--config", tc.cfg)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.says...)
			for _, never := range []string{"Starting JetStream", "Server is ready"} {
				if strings.Contains(r.stderr, never) {
					t.Errorf("the refused broker logged %q:\n%s", never, r.stderr)
				}
			}
		})
	}

	r := conclave(t, "--server", "nats://127.0.0.1:"+strconv.Itoa(port), "election", "info")
	mustSucceed(t, r)
	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}
}
