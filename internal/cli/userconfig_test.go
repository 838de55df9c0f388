package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestUserConfigFile: without --config and --context, the commands read the
// configuration file programs and brokers read: $CONCLAVE_CONFIG, else
// ./conclave.conf (then ~/.config/conclave/conclave.conf and
// /etc/conclave/conclave.conf), and connect where it says.
func TestUserConfigFile(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	if _, err := electionBucket(t, url).Create(testCtx(t), "found_me", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	good := writeFile(t, "conclave.conf", "plugin.choria.middleware_hosts = "+url+"\n")
	// Nothing listens on port 1.
	dead := "plugin.choria.middleware_hosts = nats://127.0.0.1:1\n"

	t.Run("CONCLAVE_CONFIG", func(t *testing.T) {
		r := conclaveWith(t, runOpts{env: []string{"CONCLAVE_CONFIG=" + good}}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("working directory", func(t *testing.T) {
		r := conclaveWith(t, runOpts{dir: filepath.Dir(good)}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("CONCLAVE_CONFIG before the working directory's", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "conclave.conf"), []byte(dead), 0o644); err != nil {
			t.Fatal(err)
		}
		r := conclaveWith(t, runOpts{dir: dir, env: []string{"CONCLAVE_CONFIG=" + good}}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("~/.config/conclave", func(t *testing.T) {
		home := t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, "conclave"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, "conclave", "conclave.conf"), []byte("plugin.choria.middleware_hosts = "+url+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := conclaveWith(t, runOpts{env: []string{"XDG_CONFIG_HOME=" + home}}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("--server wins", func(t *testing.T) {
		r := conclaveWith(t, runOpts{env: []string{"CONCLAVE_CONFIG=" + writeFile(t, "conclave.conf", dead)}}, "--server", url, "election", "list")
		mustSucceed(t, r)
	})
	t.Run("the file says where it came from", func(t *testing.T) {
		r := conclaveWith(t, runOpts{env: []string{"CONCLAVE_CONFIG=" + writeFile(t, "conclave.conf", dead)}}, "--timeout", "2s", "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "(from $CONCLAVE_CONFIG ")
	})
	t.Run("a found file that names no broker", func(t *testing.T) {
		// Its identity and TLS settings apply; where to connect comes
		// from the later steps, here $NATS_URL.
		only := writeFile(t, "conclave.conf", "identity = me.example.net\n")
		r := conclaveWith(t, runOpts{env: []string{"CONCLAVE_CONFIG=" + only, "NATS_URL=" + url}}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("missing", func(t *testing.T) {
		r := conclaveWith(t, runOpts{env: []string{"CONCLAVE_CONFIG=/nonexistent/conclave.conf"}}, "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "$CONCLAVE_CONFIG: open /nonexistent/conclave.conf")
	})
}

// TestEnvironmentWithoutAConfigFile: with no configuration file, the
// commands run on the defaults and the CONCLAVE_* variables, as a program
// does (conclave.New("")): they connect where
// $CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS says, and refuse a bad value.
func TestEnvironmentWithoutAConfigFile(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	if _, err := electionBucket(t, url).Create(testCtx(t), "found_me", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // no conclave.conf
	t.Run("middleware hosts", func(t *testing.T) {
		r := conclaveWith(t, runOpts{dir: dir, env: []string{"CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS=" + url}}, "election", "list")
		mustSucceed(t, r)
		mustContain(t, "stdout", r.stdout, "found_me")
	})
	t.Run("says where it came from", func(t *testing.T) {
		r := conclaveWith(t, runOpts{dir: dir, env: []string{"CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS=nats://127.0.0.1:1"}}, "--timeout", "2s", "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "no broker at nats://127.0.0.1:1 (from $CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS)")
	})
	t.Run("--server wins", func(t *testing.T) {
		r := conclaveWith(t, runOpts{dir: dir, env: []string{"CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS=nats://127.0.0.1:1"}}, "--server", url, "election", "list")
		mustSucceed(t, r)
	})
	t.Run("a bad value", func(t *testing.T) {
		r := conclaveWith(t, runOpts{dir: dir, env: []string{"CONCLAVE_LOGLEVEL=loud"}}, "--server", url, "election", "list")
		if r.code != 1 {
			t.Errorf("exit status %d, want 1", r.code)
		}
		mustContain(t, "stderr", r.stderr, "$CONCLAVE_LOGLEVEL: loglevel:")
	})
}

// TestBrokerRunUserConfigFile: `broker run` without --config runs the broker
// $CONCLAVE_CONFIG configures, as the framework's programs read it, and says
// where to put a file when there is none.
func TestBrokerRunUserConfigFile(t *testing.T) {
	t.Parallel()
	cfg := brokerConfig(t, -1)
	b := startConclave(t, []string{"CONCLAVE_CONFIG=" + cfg}, "broker", "run")
	b.stderr.waitFor(t, 0, regexp.MustCompile(`Broker test-broker ready`))
	b.signal(syscall.SIGINT)
	if code := b.wait(); code != 0 {
		t.Errorf("broker run exited with status %d after SIGINT, want 0", code)
	}

	r := conclaveWith(t, runOpts{dir: t.TempDir()}, "broker", "run")
	if r.code != 1 {
		t.Errorf("exit status %d without a configuration, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "no configuration: pass --config FILE, or set $CONCLAVE_CONFIG")
}
