package readmetest

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	conclave "github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// natsCLI returns the path of the NATS CLI: $NATS_CLI (.ci/run builds it
// and sets it), else `nats` on the PATH; without one the test is skipped.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NATS_CLI"); p != "" {
		return p
	}
	p, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("no NATS CLI: set NATS_CLI to its path (.ci/run builds it)")
	}
	return p
}

// secureSetup returns the secure three-node setup of docs/security.md, the
// document the README sends a newcomer to for it.
func secureSetup(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, setup, ok := strings.Cut(string(raw), "\n## A secure three-node cluster\n")
	if !ok {
		t.Fatal(`docs/security.md has no section "A secure three-node cluster"`)
	}
	setup, _, _ = strings.Cut(setup, "\n## ")
	return setup
}

// between returns the text between two markers of the setup.
func between(t *testing.T, text, begin, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, begin)
	inner, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("the secure setup has no %q … %q", begin, end)
	}
	return inner
}

// iniBlock returns the setup's ```ini block whose first line is "# name…".
func iniBlock(t *testing.T, text, name string) string {
	t.Helper()
	for _, m := range regexp.MustCompile("(?s)```ini\n(.*?)```").FindAllStringSubmatch(text, -1) {
		if strings.HasPrefix(m[1], "# "+name) {
			return m[1]
		}
	}
	t.Fatalf("the secure setup has no ini block starting with # %s", name)
	return ""
}

// freePortOnAll returns a port free on 127.0.0.1, .2 and .3.
func freePortOnAll(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		var held []net.Listener
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			o, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, o)
		}
		l.Close()
		for _, o := range held {
			o.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on 127.0.0.1-3")
	return 0
}

// TestSecureThreeNodeSetup runs the secure three-node setup of
// docs/security.md, which the README links to: its OpenSSL commands make
// the certificates, its broker file (with
// 10.0.0.N as 127.0.0.N and free ports) starts three brokers that cluster
// over TLS, and its program file campaigns as app-a: it wins an app-a.*
// election and is refused billing with ErrPermissionDenied. Its operator's
// block then runs as written, with ops.conf: the CLI as ops, and the NATS
// CLI as ops with its inbox prefix.
func TestSecureThreeNodeSetup(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("the secure setup needs openssl: install it (apt-get install openssl); .ci/run does")
	}
	text := secureSetup(t)
	tlsDir := t.TempDir()
	script := between(t, text, "<!-- BEGIN secure-setup certificates -->\n```sh\n", "```\n<!-- END secure-setup certificates -->")
	clientPort, peerPort := freePortOnAll(t), freePortOnAll(t)
	local := func(s string) string {
		s = strings.ReplaceAll(s, "10.0.0.", "127.0.0.")
		s = strings.ReplaceAll(s, "/etc/conclave/tls", tlsDir)
		s = strings.ReplaceAll(s, ":4222", ":"+strconv.Itoa(clientPort))
		s = strings.ReplaceAll(s, "= 4222", "= "+strconv.Itoa(clientPort))
		s = strings.ReplaceAll(s, ":5222", ":"+strconv.Itoa(peerPort))
		s = strings.ReplaceAll(s, "= 5222", "= "+strconv.Itoa(peerPort))
		return s
	}
	cmd := exec.Command("bash", "-euc", local(script))
	cmd.Dir = tlsDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the setup's certificate commands failed: %v\n%s", err, out)
	}

	hash, err := bcrypt.GenerateFromPassword([]byte("ops-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	brokerFile := iniBlock(t, text, "broker1.conf")
	brokerFile = regexp.MustCompile(`(?m)^plugin\.conclave\.user\.ops\.password = .*$`).ReplaceAllLiteralString(brokerFile, "plugin.conclave.user.ops.password = "+string(hash))
	brokerFile = strings.ReplaceAll(brokerFile, "stats_port = 8222", "stats_port = 0")
	brokerFile = strings.ReplaceAll(brokerFile, "leader_election_ttl = 1m", "leader_election_ttl = 3s")

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		brokers []*broker.Broker
		errs    []error
	)
	for n := 1; n <= 3; n++ {
		file := strings.ReplaceAll(brokerFile, "broker1", "broker"+strconv.Itoa(n))
		file = strings.Replace(file, "listen_address = 10.0.0.1", "listen_address = 10.0.0."+strconv.Itoa(n), 1)
		file = strings.ReplaceAll(file, "/var/lib/conclave", t.TempDir())
		cfg, err := config.ParseWithEnv(strings.NewReader(local(file)), "broker"+strconv.Itoa(n)+".conf", nil)
		if err != nil {
			t.Fatalf("the setup's broker file: %v", err)
		}
		b, err := broker.New(cfg, brokertest.Logger(t).WithField("broker", n))
		if err != nil {
			t.Fatalf("broker %d refuses the setup's file: %v", n, err)
		}
		t.Cleanup(b.Shutdown)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), brokertest.StartTimeout)
			defer cancel()
			err := b.Start(ctx)
			mu.Lock()
			defer mu.Unlock()
			brokers = append(brokers, b)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("the setup's cluster did not start: %v", err)
	}
	if spec := brokers[0].BucketSpec(); spec.Replicas != 3 {
		t.Errorf("bucket replicas %d, want 3", spec.Replicas)
	}

	clientFile := local(iniBlock(t, text, "conclave.conf, for app-a"))
	cfg, err := config.ParseWithEnv(strings.NewReader(clientFile), "conclave.conf", nil)
	if err != nil {
		t.Fatalf("the setup's program file: %v", err)
	}
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(brokertest.Logger(t).Logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	won := make(chan struct{}, 1)
	e, err := fw.NewCampaign(ctx, nil, "app-a.cron", streams.OnWon(func() { won <- struct{}{} }))
	if err != nil {
		t.Fatalf("app-a cannot join app-a.cron: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(ctx) }()
	select {
	case <-won:
	case <-time.After(30 * time.Second):
		t.Fatal("app-a did not win app-a.cron")
	}

	billing, err := fw.NewCampaign(ctx, nil, "billing", streams.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := billing.Start(ctx); !errors.Is(err, conclave.ErrPermissionDenied) {
		t.Errorf("campaign in billing returned %v, want ErrPermissionDenied", err)
	}
	if !e.IsLeader() {
		t.Error("app-a.cron lost its leader when billing was refused")
	}

	t.Run("operator", func(t *testing.T) {
		// The operator's block, as written: the CLI with ops.conf and the
		// NATS CLI as ops, its password typed at the prompt.
		nats := natsCLI(t)
		bin := t.TempDir()
		build := exec.Command("go", "build", "-o", bin+"/conclave", "github.com/conclave-io/conclave/cmd/conclave")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building conclave: %v\n%s", err, out)
		}
		if err := os.Symlink(nats, bin+"/nats"); err != nil {
			t.Fatal(err)
		}
		work := t.TempDir()
		if err := os.WriteFile(work+"/ops.conf", []byte(local(iniBlock(t, text, "ops.conf"))), 0o600); err != nil {
			t.Fatal(err)
		}
		script := between(t, text, "<!-- BEGIN secure-setup operator -->\n```sh\n", "```\n<!-- END secure-setup operator -->")
		sh := exec.CommandContext(ctx, "bash", "-euc", local(script))
		sh.Dir = work
		sh.Stdin = strings.NewReader("ops-secret\n")
		sh.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "HOME="+work, "XDG_CONFIG_HOME="+work,
			"NATS_CONTEXT=", "NATS_URL=", "CONCLAVE_CONFIG=")
		out, err := sh.CombinedOutput()
		t.Logf("the operator's block:\n%s", out)
		if err != nil {
			t.Fatalf("the setup's operator block failed: %v", err)
		}
		for _, want := range []string{"app-a.cron", "app-a-1.example.net", "CHORIA_LEADER_ELECTION"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("the operator's block does not show %q", want)
			}
		}

		// Without --inbox-prefix the NATS CLI fails as docs/security.md says.
		plain := exec.CommandContext(ctx, nats, "--server", "tls://127.0.0.1:"+strconv.Itoa(clientPort), "--tlscert", tlsDir+"/ops.pem",
			"--tlskey", tlsDir+"/ops-key.pem", "--tlsca", tlsDir+"/ca.pem", "--user", "ops", "--password", "ops-secret", "--timeout", "2s",
			"kv", "info", "CHORIA_LEADER_ELECTION")
		plain.Env = sh.Env
		out, err = plain.CombinedOutput()
		if err == nil || !strings.Contains(string(out), `Permissions Violation for Subscription to "_INBOX.`) {
			t.Errorf("the NATS CLI as ops without --inbox-prefix: %v\n%s\ndocs/security.md says it fails with a permissions violation on its inbox", err, out)
		}
	})
	e.Stop()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v", err)
	}
}
