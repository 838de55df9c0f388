package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSecurityRulesBetweenKeys(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"certificate without key and CA", "plugin.security.file.certificate = /c.pem", "set plugin.security.file.key and plugin.security.file.ca"},
		{"provider without files", "plugin.security.provider = file", "plugin.security.provider is file but no files are named"},
		{"curves without TLS", "plugin.security.ecc_curves = X25519", "ecc_curves is set but TLS is not"},
		{"password without user", "plugin.nats.pass = x", "plugin.nats.pass is set without plugin.nats.user"},
		{"credentials and password", "plugin.nats.user = a\nplugin.nats.pass = x\nplugin.nats.credentials = /a.creds", "log in with one of them"},
		{"peer user alone", "plugin.choria.network.peer_user = r", "peer_user and peer_password go together"},
		{"user without login", UserKeyPrefix + "ops.admin = true", UserKeyPrefix + "ops has no way to log in: set " + UserKeyPrefix + "ops.password to a bcrypt hash (`conclave hash-password`)"},
		{"user allowed nothing", UserKeyPrefix + "ops.password = " + testHash, UserKeyPrefix + "ops may do nothing"},
		{"certificate user without TLS", UserKeyPrefix + "ops.certificate = CN=ops\n" + UserKeyPrefix + "ops.admin = true", UserKeyPrefix + "ops.certificate needs TLS"},
		{"two users, one certificate", tlsLines + UserKeyPrefix + "a.certificate = CN=x\n" + UserKeyPrefix + "a.admin = true\n" + UserKeyPrefix + "b.certificate = CN=x\n" + UserKeyPrefix + "b.admin = true", `a certificate identity maps to one user`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWithEnv(strings.NewReader(tc.text), "b.conf", nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestUsersParse(t *testing.T) {
	text := tlsLines + strings.Join([]string{
		UserKeyPrefix + "app-a.password = " + testHash,
		UserKeyPrefix + "app-a.campaign = app-a.>",
		UserKeyPrefix + "dash.certificate = CN=dash,O=Example",
		UserKeyPrefix + "dash.observe = >",
		UserKeyPrefix + "ops.password = " + testHash,
		UserKeyPrefix + "ops.admin = yes",
	}, "\n")
	c, err := ParseWithEnv(strings.NewReader(text), "b.conf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.UserNames(), ","); got != "app-a,dash,ops" {
		t.Fatalf("users %s", got)
	}
	if u := c.Users["app-a"]; u.Name != "app-a" || u.PasswordHash != testHash || len(u.Campaign) != 1 || u.Campaign[0] != "app-a.>" || u.Admin {
		t.Errorf("app-a = %+v", u)
	}
	if u := c.Users["dash"]; u.Certificate != "CN=dash,O=Example" || u.Observe[0] != ">" || u.PasswordHash != "" {
		t.Errorf("dash = %+v", u)
	}
	if !c.Users["ops"].Admin {
		t.Errorf("ops is not an admin")
	}
}

// TestSecretsStayOutOfErrors: a plain password typed where a hash belongs,
// and the values of secret keys, never appear in error messages.
func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "hunter2-Very-Secret"
	text := UserKeyPrefix + "ops.password = " + secret + "\nplugin.nats.pass = " + secret + "\n" + UserKeyPrefix + "ops.admn = " + secret
	_, err := ParseWithEnv(strings.NewReader(text), "b.conf", nil)
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error shows the secret: %v", err)
	}
	for _, k := range Keys() {
		if strings.Contains(k.Name, "pass") && !k.Secret() {
			t.Errorf("%s is not marked secret", k.Name)
		}
	}
}

// TestPrintingAConfigShowsNoSecret: a Config or User logged with %v or %+v
// shows no password, hash or peer password.
func TestPrintingAConfigShowsNoSecret(t *testing.T) {
	c := Default()
	c.NATSUser, c.NATSPass = "app-a", "pass-Secret-1"
	c.PeerUser, c.PeerPassword = "route", "peer-Secret-2"
	c.Users = map[string]*User{"ops": {Name: "ops", PasswordHash: testHash, Admin: true}}
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%v", *c), fmt.Sprintf("%+v", *c.Users["ops"]), c.String()} {
		for _, secret := range []string{"pass-Secret-1", "peer-Secret-2", testHash} {
			if strings.Contains(s, secret) {
				t.Errorf("%q shows a secret", s)
			}
		}
		if !strings.Contains(s, "app-a") && !strings.Contains(s, "ops") {
			t.Errorf("%q lost the names", s)
		}
	}
}
