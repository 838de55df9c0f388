package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"
)

func TestIssuedCertificatesVerifyAgainstTheirCAOnly(t *testing.T) {
	ca, other := NewCA(t, "ca"), NewCA(t, "other")
	leaf := ca.Issue(t, "n1")
	if _, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile); err != nil {
		t.Fatal(err)
	}
	pool := func(c *CA) *x509.CertPool {
		raw, err := os.ReadFile(c.File)
		if err != nil {
			t.Fatal(err)
		}
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(raw)
		return p
	}
	opts := x509.VerifyOptions{Roots: pool(ca), DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := leaf.Cert.Verify(opts); err != nil {
		t.Errorf("own CA: %v", err)
	}
	opts.Roots = pool(other)
	if _, err := leaf.Cert.Verify(opts); err == nil {
		t.Error("verified against another CA")
	}
	if !strings.HasPrefix(leaf.Subject, "CN=n1") {
		t.Errorf("subject %s", leaf.Subject)
	}
	if exp := ca.Issue(t, "old", Expired()); !exp.Cert.NotAfter.Before(time.Now()) {
		t.Error("Expired certificate is still valid")
	}
}
