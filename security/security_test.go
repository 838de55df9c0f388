package security

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/testpki"
)

func files(l *testpki.Leaf) *config.Config {
	c := config.Default()
	c.TLSCertificate, c.TLSKey, c.TLSCA = l.CertFile, l.KeyFile, l.CAFile
	return c
}

func TestLoadAcceptsACertificateItsCASigned(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	f, err := Load(files(ca.Issue(t, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	if f.Server(true).MinVersion != MinVersion || f.Client().RootCAs == nil || f.Routes().RootCAs == nil {
		t.Error("TLS settings lack the minimum version or the CA")
	}
	if got, _ := Load(config.Default()); got != nil {
		t.Error("Load without TLS files returned settings")
	}
}

func TestLoadExplainsUnusableFiles(t *testing.T) {
	ca, other := testpki.NewCA(t, "ca"), testpki.NewCA(t, "other")
	good := ca.Issue(t, "n1")
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		want   string
	}{
		{"missing certificate", func(c *config.Config) { c.TLSCertificate = "/nonexistent/n1.pem" }, "plugin.security.file.certificate /nonexistent/n1.pem does not exist: check the path"},
		{"missing CA", func(c *config.Config) { c.TLSCA = "/nonexistent/ca.pem" }, "plugin.security.file.ca /nonexistent/ca.pem does not exist"},
		{"CA not PEM", func(c *config.Config) {
			p := filepath.Join(t.TempDir(), "ca.pem")
			os.WriteFile(p, []byte("nope"), 0o600)
			c.TLSCA = p
		}, "holds no PEM certificate"},
		{"key of another certificate", func(c *config.Config) { c.TLSKey = ca.Issue(t, "n2").KeyFile }, "check both are PEM and that the key is the certificate's"},
		{"expired", func(c *config.Config) {
			l := ca.Issue(t, "old", testpki.Expired())
			c.TLSCertificate, c.TLSKey = l.CertFile, l.KeyFile
		}, "expired on"},
		{"another CA", func(c *config.Config) {
			l := other.Issue(t, "n1")
			c.TLSCertificate, c.TLSKey = l.CertFile, l.KeyFile
		}, "does not chain to the CA in plugin.security.file.ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := files(good)
			tc.change(c)
			_, err := Load(c)
			if !errors.Is(err, ErrTLSFiles) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrTLSFiles with %q", err, tc.want)
			}
		})
	}
}

func TestCipherSuitesAndCurvesApply(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	c := files(ca.Issue(t, "n1"))
	c.CipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
	c.ECCCurves = []string{"CurveP384"}
	f, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	tc := f.Client()
	if len(tc.CipherSuites) != 1 || len(tc.CurvePreferences) != 1 || tc.CurvePreferences[0].String() != "CurveP384" {
		t.Errorf("suites %v curves %v", tc.CipherSuites, tc.CurvePreferences)
	}
}
