package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/natsconn"
)

// contextDir writes NATS CLI contexts under a fresh XDG_CONFIG_HOME and
// returns it. selected, when not empty, is written to context.txt.
func contextDir(t *testing.T, selected string, contexts map[string]string) string {
	t.Helper()
	xdg := t.TempDir()
	dir := filepath.Join(xdg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range contexts {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if selected != "" {
		if err := os.WriteFile(filepath.Join(xdg, "nats", "context.txt"), []byte(selected+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return xdg
}

func envFrom(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	xdg := contextDir(t, "sel", map[string]string{
		"sel":  `{"url":"nats://selected:4222","creds":"~/sel.creds"}`,
		"prod": `{"url":"nats://prod:4222","creds":"/prod.creds","user_jwt":"","nsc":"nsc://op/acct/user"}`,
		"env":  `{"url":"nats://envctx:4222"}`,
	})
	brokerConf := writeTestFile(t, "broker.conf", "plugin.choria.broker_network = true\nplugin.choria.network.listen_address = 0.0.0.0\nplugin.choria.network.client_port = 4333\nplugin.choria.network.stream.store = /tmp/x\n")
	choriaConf := writeTestFile(t, "client.conf", "collectives = mcollective\nplugin.choria.middleware_hosts = b1.example.net:4222, tls://b2.example.net:4223\n")
	noHosts := writeTestFile(t, "empty.conf", "loglevel = debug\n")
	badConf := writeTestFile(t, "bad.conf", "plugin.choria.middleware_hosts = nats://b1.example.net\n")

	for _, tc := range []struct {
		name      string
		flags     connFlags
		env       map[string]string
		noXDG     bool
		urls      string
		source    string
		creds     string
		err       string
		warning   string
		contextIs string
	}{
		{name: "nothing: the default", noXDG: true, urls: "nats://127.0.0.1:4222", source: "the default"},
		{name: "selected context", urls: "nats://selected:4222", source: `the selected NATS context "sel"`, creds: "/home/u/sel.creds", contextIs: "sel"},
		{name: "NATS_URL over the selected context, its creds kept", env: map[string]string{"NATS_URL": "nats://env:4222"},
			urls: "nats://env:4222", source: "$NATS_URL", creds: "/home/u/sel.creds", contextIs: "sel"},
		{name: "NATS_CREDS over the selected context's", env: map[string]string{"NATS_CREDS": "/env.creds"},
			urls: "nats://selected:4222", creds: "/env.creds"},
		{name: "NATS_CONTEXT over the selected context", env: map[string]string{"NATS_CONTEXT": "env"},
			urls: "nats://envctx:4222", source: `NATS context "env" (from $NATS_CONTEXT)`, contextIs: "env"},
		{name: "--context over NATS_URL and NATS_CREDS", flags: connFlags{context: "prod"}, env: map[string]string{"NATS_URL": "nats://env:4222", "NATS_CREDS": "/env.creds"},
			urls: "nats://prod:4222", source: `NATS context "prod"`, creds: "/prod.creds", warning: `context "prod" sets nsc`, contextIs: "prod"},
		{name: "--server over --context, its creds kept", flags: connFlags{server: "nats://a:1,nats://b:2", context: "prod"},
			urls: "nats://a:1,nats://b:2", source: "--server", creds: "/prod.creds", warning: "sets nsc", contextIs: "prod"},
		{name: "--creds over everything", flags: connFlags{creds: "/flag.creds", context: "prod"}, env: map[string]string{"NATS_CREDS": "/env.creds"},
			urls: "nats://prod:4222", creds: "/flag.creds", warning: "sets nsc", contextIs: "prod"},
		{name: "--config: middleware hosts, no context", flags: connFlags{config: choriaConf}, env: map[string]string{"NATS_URL": "nats://env:4222"},
			urls: "nats://b1.example.net:4222,tls://b2.example.net:4223", source: "--config " + choriaConf},
		{name: "--config of a broker: its client address", flags: connFlags{config: brokerConf},
			urls: "nats://127.0.0.1:4333", source: "--config " + brokerConf},
		{name: "--server over --config", flags: connFlags{server: "nats://s:1", config: brokerConf}, urls: "nats://s:1", source: "--server"},
		{name: "--config without hosts", flags: connFlags{config: noHosts}, err: "sets no plugin.choria.middleware_hosts"},
		{name: "--config with a bad host", flags: connFlags{config: badConf}, err: "bad.conf:1: plugin.choria.middleware_hosts"},
		{name: "--config missing", flags: connFlags{config: "/no/such.conf"}, err: "--config: open /no/such.conf"},
		{name: "--context and --config", flags: connFlags{context: "prod", config: brokerConf}, err: "pass only one of them"},
		{name: "unknown context", flags: connFlags{context: "nope"}, err: `--context "nope": no such context`},
		{name: "context name with a path", flags: connFlags{context: "../x"}, err: "is not a context name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"HOME": "/home/u", "XDG_CONFIG_HOME": xdg}
			if tc.noXDG {
				vars["XDG_CONFIG_HOME"] = t.TempDir()
			}
			for k, v := range tc.env {
				vars[k] = v
			}
			f := tc.flags
			f.lookupEnv = envFrom(vars)
			got, err := f.resolve()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.urls != tc.urls {
				t.Errorf("urls %q, want %q", got.urls, tc.urls)
			}
			if tc.source != "" && got.source != tc.source {
				t.Errorf("source %q, want %q", got.source, tc.source)
			}
			if got.creds != tc.creds {
				t.Errorf("creds %q, want %q", got.creds, tc.creds)
			}
			switch {
			case tc.contextIs == "" && got.ctx != nil && tc.creds == "":
				t.Errorf("context %q in use, want none", got.ctx.name)
			case tc.contextIs != "" && (got.ctx == nil || got.ctx.name != tc.contextIs):
				t.Errorf("context %+v in use, want %q", got.ctx, tc.contextIs)
			}
			joined := strings.Join(got.warnings, "\n")
			if (tc.warning == "") != (joined == "") || !strings.Contains(joined, tc.warning) {
				t.Errorf("warnings %q, want %q", got.warnings, tc.warning)
			}
		})
	}
}

func writeTestFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://u:p@h:4222": "nats://u:xxxxx@h:4222",
		"nats://tok@h:4222": "nats://tok@h:4222",
		"nats://h:4222":     "nats://h:4222",
		"h:4222":            "h:4222",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBucketWarnings(t *testing.T) {
	t.Parallel()
	good := jetstream.StreamConfig{MaxAge: time.Minute, MaxMsgsPerSubject: 1, Replicas: 3, Storage: jetstream.FileStorage}
	for _, tc := range []struct {
		name      string
		change    func(*jetstream.StreamConfig)
		clustered bool
		want      string
	}{
		{name: "good", change: func(*jetstream.StreamConfig) {}, clustered: true},
		{name: "one replica alone", change: func(c *jetstream.StreamConfig) { c.Replicas = 1 }},
		{name: "one replica on a cluster", change: func(c *jetstream.StreamConfig) { c.Replicas = 1 }, clustered: true, want: "1 replica on a cluster"},
		{name: "no TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = 0 }, want: "no TTL"},
		{name: "small TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = 999 * time.Millisecond }, want: "below 1s"},
		{name: "the smallest TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = time.Second }},
		{name: "an hour", change: func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }},
		{name: "over an hour", change: func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour + time.Second }, want: "over 1h0m0s"},
		{name: "history", change: func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 }, want: "history is 5"},
		{name: "unlimited history", change: func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = -1 }, want: "history is -1"},
		{name: "limit markers", change: func(c *jetstream.StreamConfig) { c.SubjectDeleteMarkerTTL = time.Second }, want: "limit markers are on"},
		{name: "memory", change: func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, want: "memory storage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.change(&cfg)
			got := bucketWarnings("CHORIA_LEADER_ELECTION", cfg, tc.clustered)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("warnings %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("warnings %q, want one about %q", got, tc.want)
			}
		})
	}
}

// TestDialOptions: election run and watch connect with the framework's
// settings (natsconn.ClientOptions): no write is buffered while
// disconnected, to be sent late; the framework's ping interval and
// reconnect pacing; reconnecting forever. The short commands buffer no
// writes either.
func TestDialOptions(t *testing.T) {
	t.Parallel()
	apply := func(t *testing.T, long bool) nats.Options {
		t.Helper()
		tg := &target{urls: "nats://127.0.0.1:4222"}
		opts, err := tg.dialOptions(connectOptions{name: "test", longLived: long}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		o := nats.GetDefaultOptions()
		for _, opt := range opts {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	long := apply(t, true)
	if long.ReconnectBufSize != -1 {
		t.Errorf("long-lived: ReconnectBufSize %d, want -1", long.ReconnectBufSize)
	}
	if long.PingInterval != natsconn.PingInterval {
		t.Errorf("long-lived: PingInterval %v, want %v", long.PingInterval, natsconn.PingInterval)
	}
	if long.MaxReconnect != -1 {
		t.Errorf("long-lived: MaxReconnect %d, want -1", long.MaxReconnect)
	}
	if long.CustomReconnectDelayCB == nil {
		t.Error("long-lived: no reconnect pacing (natsconn.ReconnectDelay)")
	} else if d := long.CustomReconnectDelayCB(1); d > time.Second {
		t.Errorf("long-lived: first reconnect after %v, want natsconn.ReconnectDelay's quick first step", d)
	}
	if short := apply(t, false); short.ReconnectBufSize != -1 {
		t.Errorf("short: ReconnectBufSize %d, want -1", short.ReconnectBufSize)
	}
}

// TestConfigTypoSuggested: in a Choria client file, keys conclave does not
// know are skipped, but one within two edits of a key it knows is a typo:
// reported with its line and "did you mean".
func TestConfigTypoSuggested(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "client.conf")
	body := "collectives = mcollective\nmain_collective = mcollective\nplugin.choria.middlware_hosts = nats://b1:4222\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadClientConfig(path, "--config "+path, envFrom(nil))
	if err == nil || !strings.Contains(err.Error(), path+":3: plugin.choria.middlware_hosts: unknown key: did you mean plugin.choria.middleware_hosts?") {
		t.Errorf("error %v, want line 3's typo with a suggestion", err)
	}
}

// TestTimeoutBareSeconds: --timeout (and the other duration flags) take
// whole seconds as the configuration files do, or a Go duration.
func TestTimeoutBareSeconds(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond} {
		var d durationValue
		if err := d.Set(in); err != nil || time.Duration(d) != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	var d durationValue
	if err := d.Set("5 minutes"); err == nil || !strings.Contains(err.Error(), "whole seconds such as 5") {
		t.Errorf("Set(\"5 minutes\") error %v, want one saying what to write", err)
	}
}
