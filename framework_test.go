package conclave_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/metrics"
)

func TestNewWithFile(t *testing.T) {
	path := writeFile(t, "conclave.conf", `
# a client configuration
identity = file-node
loglevel = debug
plugin.choria.middleware_hosts = nats1.example.net:4222, tls://nats2.example.net:4223
`)
	t.Setenv("CONCLAVE_LOGLEVEL", "warn") // the environment overrides the file
	logger, _ := bufferLogger()
	fw, err := conclave.New(path, conclave.WithLogger(logger))
	if err != nil {
		t.Fatalf("New(%s): %v", path, err)
	}
	defer fw.Close()

	if got := fw.Identity(); got != "file-node" {
		t.Errorf("Identity = %q, want file-node", got)
	}
	cfg := fw.Config()
	if cfg.Path != path || cfg.LogLevel != "warn" {
		t.Errorf("Config: path %q level %q, want %q and warn", cfg.Path, cfg.LogLevel, path)
	}
	want := []string{"nats://nats1.example.net:4222", "tls://nats2.example.net:4223"}
	if got := fw.Servers(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Servers = %v, want %v", got, want)
	}
}

func TestNewWithoutFileReadsEnvironment(t *testing.T) {
	t.Setenv("CONCLAVE_IDENTITY", "env-node")
	t.Setenv("CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS", "127.0.0.1:4333")
	logger, _ := bufferLogger()
	fw, err := conclave.New("", conclave.WithLogger(logger))
	if err != nil {
		t.Fatalf(`New(""): %v`, err)
	}
	defer fw.Close()
	if got := fw.Identity(); got != "env-node" {
		t.Errorf("Identity = %q, want env-node", got)
	}
	if got := fw.Servers(); len(got) != 1 || got[0] != "nats://127.0.0.1:4333" {
		t.Errorf("Servers = %v, want [nats://127.0.0.1:4333]", got)
	}
}

func TestNewDefaultsToLocalBroker(t *testing.T) {
	fw := newFramework(t, config.Default())
	if got := fw.Servers(); len(got) != 1 || got[0] != conclave.DefaultServer {
		t.Errorf("Servers = %v, want [%s]", got, conclave.DefaultServer)
	}
	if fw.Identity() == "" {
		t.Error("Identity is empty: the default is the host name")
	}
}

func TestNewErrors(t *testing.T) {
	bad := writeFile(t, "bad.conf", "identity = a\nno_such_key = 1\n")
	tests := []struct {
		name string
		new  func() (*conclave.Framework, error)
		is   error
		says string
	}{
		{"missing file", func() (*conclave.Framework, error) { return conclave.New(bad + ".missing") }, nil, "no such file"},
		{"bad file", func() (*conclave.Framework, error) { return conclave.New(bad) }, config.ErrUnknownKey, "bad.conf:2"},
		{"nil config", func() (*conclave.Framework, error) { return conclave.NewWithConfig(nil) }, conclave.ErrInvalidOption, "config.Default()"},
		{"invalid config", func() (*conclave.Framework, error) {
			cfg := config.Default()
			cfg.Identity = "two words"
			return conclave.NewWithConfig(cfg)
		}, config.ErrInvalid, "identity"},
		{"nil logger", func() (*conclave.Framework, error) {
			return conclave.NewWithConfig(config.Default(), conclave.WithLogger(nil))
		}, conclave.ErrInvalidOption, "WithLogger"},
		{"nil default logger", func() (*conclave.Framework, error) {
			return conclave.NewWithConfig(config.Default(), conclave.WithDefaultLogger(nil))
		}, conclave.ErrInvalidOption, "WithDefaultLogger"},
		{"nil registerer", func() (*conclave.Framework, error) {
			return conclave.NewWithConfig(config.Default(), conclave.WithRegisterer(nil))
		}, conclave.ErrInvalidOption, "WithRegisterer"},
		{"nil connection", func() (*conclave.Framework, error) {
			return conclave.NewWithConfig(config.Default(), conclave.WithConnection(nil))
		}, conclave.ErrInvalidOption, "WithConnection"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fw, err := tc.new()
			if err == nil {
				fw.Close()
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not match %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestRegistererTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	newFramework(t, config.Default(), conclave.WithRegisterer(reg))
	fw, err := conclave.NewWithConfig(config.Default(), conclave.WithRegisterer(reg))
	if err == nil {
		fw.Close()
		t.Fatal("a second framework registered the same metrics on the same registry")
	}
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("error %v is not prometheus.AlreadyRegisteredError", err)
	}
}

// TestFailedRegistrationLeavesNothingRegistered: a framework whose metrics
// cannot all be registered (here the shard group metrics, which the
// program registered itself) fails and leaves the registerer as it was, so
// the program can register the election metrics another way or retry.
func TestFailedRegistrationLeavesNothingRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewShards(reg); err != nil {
		t.Fatal(err)
	}
	fw, err := conclave.NewWithConfig(config.Default(), conclave.WithRegisterer(reg))
	if err == nil {
		fw.Close()
		t.Fatal("a framework registered the shard group metrics a second time")
	}
	if _, err := metrics.New(reg); err != nil {
		t.Errorf("the failed framework left its election metrics registered: %v", err)
	}
}

func TestConfigIsACopy(t *testing.T) {
	cfg := testConfig("copy-node", "nats://127.0.0.1:4999")
	fw := newFramework(t, cfg)
	cfg.Identity = "changed"
	cfg.MiddlewareHosts[0] = "nats://changed:1"
	if fw.Identity() != "copy-node" || fw.Servers()[0] != "nats://127.0.0.1:4999" {
		t.Errorf("the caller's later changes reached the framework: %q %v", fw.Identity(), fw.Servers())
	}
}

func TestLoggerFields(t *testing.T) {
	logger, buf := bufferLogger()
	fw := newFramework(t, testConfig("log-node"), conclave.WithLogger(logger))

	log := fw.Logger("worker").WithField("count", 3)
	log.Infof("Doing work as the leader")

	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(buf.String())), &line); err != nil {
		t.Fatalf("log output %q: %v", buf.String(), err)
	}
	want := map[string]any{"component": "worker", "count": float64(3), "msg": "Doing work as the leader", "level": "info"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("field %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
}
