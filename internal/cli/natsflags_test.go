package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/testpki"
	"github.com/conclave-io/conclave/security"
)

// TestNATSCLILoginFlags: the NATS CLI's --user/--password, their NATS_*
// variables, --tlscert/--tlskey/--tlsca and --no-context connect as they
// do in the NATS CLI, flags winning over variables.
func TestNATSCLILoginFlags(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "ca")
	node, client := ca.Issue(t, "broker"), ca.Issue(t, "client")
	cfg := config.Default()
	cfg.TLSCertificate, cfg.TLSKey, cfg.TLSCA = node.CertFile, node.KeyFile, node.CAFile
	files, err := security.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := plainServer(t, true, func(o *server.Options) {
		o.TLSConfig, o.TLSTimeout = files.Server(true), 2
		o.Users = []*server.User{{Username: "u", Password: "p"}}
	})
	nc, err := nats.Connect(url, nats.UserInfo("u", "p"), nats.ClientCert(client.CertFile, client.KeyFile), nats.RootCAs(ca.File))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, History: 1}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	tlsFlags := []string{"--tlscert", client.CertFile, "--tlskey", client.KeyFile, "--tlsca", ca.File}

	mustSucceed(t, conclave(t, append(append([]string{"--server", url, "--user", "u", "--password", "p"}, tlsFlags...), "election", "list")...))
	r := conclave(t, append(append([]string{"--server", url, "--user", "u", "--password", "wrong"}, tlsFlags...), "election", "list")...)
	if r.code == 0 {
		t.Error("a wrong --password connected")
	}
	mustSucceed(t, conclaveWith(t, runOpts{env: []string{"NATS_USER=u", "NATS_PASSWORD=p", "NATS_CERT=" + client.CertFile, "NATS_KEY=" + client.KeyFile, "NATS_CA=" + ca.File}},
		"--server", url, "election", "list"))
	// The flag wins over the variable.
	r = conclaveWith(t, runOpts{env: []string{"NATS_USER=u", "NATS_PASSWORD=p"}}, append(append([]string{"--server", url, "--password", "wrong"}, tlsFlags...), "election", "list")...)
	if r.code == 0 {
		t.Error("$NATS_PASSWORD won over --password")
	}
	r = conclave(t, "--server", url, "--password", "p", "election", "list")
	if r.code == 0 {
		t.Error("a password without a user was accepted")
	}
	mustContain(t, "stderr", r.stderr, "without a user: pass --user too")

	// --no-context ignores the NATS CLI's selected context, here a broken one.
	home := t.TempDir()
	dir := filepath.Join(home, ".config", "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"creds": "/nonexistent/bad.creds"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "nats", "context.txt"), []byte("bad"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "NATS_URL=" + url}
	if r := conclaveWith(t, runOpts{env: env}, append(append([]string{"--user", "u", "--password", "p"}, tlsFlags...), "election", "list")...); r.code == 0 {
		t.Fatal("the selected context's missing credentials file was not used: the test shows nothing")
	}
	mustSucceed(t, conclaveWith(t, runOpts{env: env}, append(append([]string{"--no-context", "--user", "u", "--password", "p"}, tlsFlags...), "election", "list")...))
}

// TestRefusedLoginNamesTheLogin: a login the broker refuses is named in
// the error, with the flags or variables that gave it and what to check,
// as --config's plugin.nats.* login is: not as "no credentials".
func TestRefusedLoginNamesTheLogin(t *testing.T) {
	t.Parallel()
	users := plainServer(t, true, func(o *server.Options) {
		o.Users = []*server.User{{Username: "app", Password: "p"}}
	})
	token := plainServer(t, true, func(o *server.Options) { o.Authorization = "s3cret" })
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	pub, _ := other.PublicKey()
	nkeyURL := plainServer(t, true, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	seedFile := writeFile(t, "user.nk", string(seed))
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"--user", nil, []string{"--server", users, "--user", "app", "--password", "wrong"},
			[]string{`refused the login of user "app" (--user and --password, or $NATS_USER and $NATS_PASSWORD): check the user name and password`}},
		{"$NATS_USER", []string{"NATS_USER=app", "NATS_PASSWORD=wrong"}, []string{"--server", users},
			[]string{`refused the login of user "app"`, "check the user name and password"}},
		{"$NATS_USER with a CONCLAVE_* variable", []string{"NATS_USER=app", "NATS_PASSWORD=wrong", "CONCLAVE_IDENTITY=me"}, []string{"--server", users},
			[]string{`refused the login of user "app"`, "check the user name and password"}},
		{"--token", nil, []string{"--server", token, "--token", "wrong"},
			[]string{"refused the token given with --token: check the token"}},
		{"--nkey", nil, []string{"--server", nkeyURL, "--nkey", seedFile},
			[]string{"refused the NKey in " + seedFile + " (--nkey or $NATS_NKEY): check that the seed's public key"}},
		{"none", nil, []string{"--server", users},
			[]string{"refused a client without a login: log in with --user and --password"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclaveWith(t, runOpts{env: tc.env}, append(tc.args, "election", "list")...)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want...)
			if strings.Contains(r.stderr, "no credentials") {
				t.Errorf("the refused login is reported as none:\n%s", r.stderr)
			}
		})
	}
}

// TestMissingLoginFilesAreNamed: a credentials, NKey or TLS file that does
// not exist is reported as that file's problem, with where it was given,
// not as a broker that does not answer.
func TestMissingLoginFilesAreNamed(t *testing.T) {
	t.Parallel()
	url := plainServer(t, true)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"--creds", nil, []string{"--creds", "/nonexistent/app.creds"}, "the credentials file /nonexistent/app.creds (from --creds) does not exist: check the path"},
		{"$NATS_CREDS", []string{"NATS_CREDS=/nonexistent/app.creds"}, nil, "the credentials file /nonexistent/app.creds (from $NATS_CREDS) does not exist"},
		{"--nkey", nil, []string{"--nkey", "/nonexistent/user.nk"}, "the NKey seed file /nonexistent/user.nk (--nkey or $NATS_NKEY) does not exist"},
		{"--tlscert", nil, []string{"--tlscert", "/nonexistent/c.pem", "--tlskey", "/nonexistent/k.pem"}, "the client certificate /nonexistent/c.pem (--tlscert or $NATS_CERT) does not exist"},
		{"--tlsca", nil, []string{"--tlsca", "/nonexistent/ca.pem"}, "the CA certificate /nonexistent/ca.pem (--tlsca or $NATS_CA) does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := conclaveWith(t, runOpts{env: tc.env}, append(append([]string{"--server", url}, tc.args...), "election", "list")...)
			if r.code != 1 {
				t.Errorf("exit status %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, tc.want)
			if strings.Contains(r.stderr, "no broker at") {
				t.Errorf("a missing file is reported as no broker:\n%s", r.stderr)
			}
		})
	}
	// run waits for a broker that is not up yet, but not for a file.
	r := conclave(t, "--server", url, "--creds", "/nonexistent/app.creds", "election", "run", "job", "true")
	if r.code != 1 || strings.Contains(r.stderr, "waiting for the broker") {
		t.Errorf("run with a missing --creds: exit status %d, want 1 at once; stderr:\n%s", r.code, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "the credentials file /nonexistent/app.creds (from --creds) does not exist")
}
