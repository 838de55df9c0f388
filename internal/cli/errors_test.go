package cli_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestErrorsSayWhatToDo runs every read-only command against brokers that
// cannot serve it and checks that the message says what is wrong and what
// to do.
func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	nothing := "nats://127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	noBucket := plainServer(t, true)
	noJetStream := plainServer(t, false)
	url := startBroker(t, time.Minute)
	kv := electionBucket(t, url)
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Create(testCtx(t), k, []byte("n1")); err != nil {
			t.Fatal(err)
		}
	}
	// (run waits for a broker instead: TestRunWaitsForBroker.)
	commands := [][]string{{"list"}, {"info", "a"}, {"watch", "a"}, {"stand-down", "a", "--force"}}
	for _, tc := range []struct {
		name   string
		server string
		want   []string
	}{
		{"missing broker", nothing, []string{"no broker at " + nothing, "(from --server): check the address, or start one with `conclave broker run --config FILE`"}},
		{"missing bucket", noBucket, []string{"bucket CHORIA_LEADER_ELECTION not found on " + noBucket + ": brokers with plugin.choria.broker_network = true create it"}},
		{"no JetStream", noJetStream, []string{"JetStream is not enabled on " + noJetStream, "nats-server -js"}},
	} {
		for _, args := range commands {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				r := conclave(t, append([]string{"--server", tc.server, "--timeout", "2s", "election"}, args...)...)
				if r.code != 1 {
					t.Errorf("exit status %d, want 1", r.code)
				}
				mustContain(t, "stderr", r.stderr, tc.want...)
			})
		}
	}

	t.Run("unknown election", func(t *testing.T) {
		r := conclave(t, "--server", url, "election", "info", "foo")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, `no election "foo" in CHORIA_LEADER_ELECTION (elections: a, b)`)
	})

	t.Run("a port that does not speak NATS", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close() // held open, silent, until the listener closes
			}
		}()
		r := conclave(t, "--server", "nats://"+ln.Addr().String(), "--timeout", "500ms", "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "did not answer as a NATS broker", "client port (4222 by default)")
	})

	t.Run("tls to a broker without it", func(t *testing.T) {
		r := conclave(t, "--server", strings.Replace(url, "nats://", "tls://", 1), "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "does not offer TLS", "connect with nats://")
	})

	t.Run("other bucket missing", func(t *testing.T) {
		r := conclave(t, "--server", url, "election", "list", "--bucket", "ELSEWHERE")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "bucket ELSEWHERE not found on "+url, "check --bucket")
		if !strings.HasPrefix(r.stderr, "conclave: bucket ELSEWHERE not found") {
			t.Errorf("stderr %q: want the error itself first, no marker of the command's own waiting", r.stderr)
		}
	})

	t.Run("default server", func(t *testing.T) {
		// Nothing says where to connect: the message names the default and
		// how to start a broker there. A broker may really listen on 4222
		// on a shared machine, so only a refused connection is checked.
		r := conclave(t, "election", "list")
		if r.code == 0 {
			t.Skip("something answers on nats://127.0.0.1:4222")
		}
		mustContain(t, "stderr", r.stderr, "no broker at nats://127.0.0.1:4222 (from the default): start one with `conclave broker run --config FILE`, or pass --server")
	})
}

// TestNATSContext connects through a NATS CLI context with a user and
// password, as `nats context save` writes it, selected and by name.
func TestNATSContext(t *testing.T) {
	t.Parallel()
	url := plainServer(t, true, func(o *server.Options) {
		o.Username, o.Password = "elector", "s3cret"
	})
	js := jetStream(t, url, nats.UserInfo("elector", "s3cret"))
	kv, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "CHORIA_LEADER_ELECTION", TTL: time.Minute, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(testCtx(t), "my_app", []byte("c1.example.net")); err != nil {
		t.Fatal(err)
	}

	xdg := t.TempDir()
	dir := filepath.Join(xdg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, password string) {
		ctx := fmt.Sprintf(`{"description":"test","url":%q,"user":"elector","password":%q,"socks_proxy":"","color_scheme":""}`, url, password)
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(ctx), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("good", "s3cret")
	write("bad", "wrong")
	env := []string{"XDG_CONFIG_HOME=" + xdg}

	r := conclaveWith(t, runOpts{env: env}, "--context", "good", "election", "list")
	mustSucceed(t, r)
	mustContain(t, "list", r.stdout, "my_app", "c1.example.net")

	r = conclaveWith(t, runOpts{env: env}, "--context", "bad", "election", "list")
	if r.code != 1 {
		t.Errorf("exit status %d with a wrong password, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "refused the credentials of NATS context \"bad\"")

	r = conclaveWith(t, runOpts{env: env}, "--context", "missing", "election", "list")
	mustContain(t, "stderr", r.stderr, `--context "missing": no such context`, "nats context ls")

	// The NATS CLI's selected context is used when nothing else says where.
	if err := os.WriteFile(filepath.Join(xdg, "nats", "context.txt"), []byte("good\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = conclaveWith(t, runOpts{env: env}, "election", "info", "my_app")
	mustSucceed(t, r)
	mustContain(t, "info", r.stdout, "Leader:", "c1.example.net")

	// $NATS_CONTEXT wins over the selected context.
	r = conclaveWith(t, runOpts{env: append(env, "NATS_CONTEXT=bad")}, "election", "list")
	if r.code != 1 || !strings.Contains(r.stderr, `NATS context "bad" (from $NATS_CONTEXT)`) {
		t.Errorf("$NATS_CONTEXT=bad: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestTimeoutMustBePositive: --timeout 0 or a negative one is refused, not
// taken for the default.
func TestTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "-1s"} {
		r := conclave(t, "--server", "nats://127.0.0.1:1", "--timeout", v, "election", "list")
		if r.code != 1 {
			t.Errorf("--timeout %s: exit status %d, want 1", v, r.code)
		}
		mustContain(t, "stderr", r.stderr, "--timeout", "give a positive duration")
	}
}
