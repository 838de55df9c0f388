// Package testpki makes certificate authorities, certificates and keys for
// tests, written as PEM files in the test's temporary directory.
//
// Every certificate is ECDSA P-256, valid for both server and client
// authentication, and by default names localhost, 127.0.0.1 and ::1 besides
// its own name, so one certificate serves a broker's clients, its routes and
// a client's login.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	// Name is the CA's common name.
	Name string
	// File is its certificate's PEM file: the value for plugin.security.file.ca.
	File string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Leaf is a certificate the CA issued, with its key.
type Leaf struct {
	// CertFile and KeyFile are the PEM files of the certificate and its key.
	CertFile, KeyFile string
	// CAFile is the issuing CA's certificate file.
	CAFile string
	// Subject is the certificate's subject DN as Go prints it, e.g.
	// CN=app-a,O=Conclave Test.
	Subject string
	// Cert is the parsed certificate.
	Cert *x509.Certificate
}

// NewCA makes a CA named name, its files in a new temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Conclave Test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{Name: name, cert: cert, key: key, dir: dir, File: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Option changes a certificate Issue makes.
type Option func(*x509.Certificate)

// Expired makes the certificate's validity end an hour ago.
func Expired() Option {
	return func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}
}

// DNSNames replaces the certificate's DNS SANs (by default its name and localhost).
func DNSNames(names ...string) Option {
	return func(c *x509.Certificate) { c.DNSNames = names }
}

// Emails sets the certificate's e-mail SANs.
func Emails(addrs ...string) Option {
	return func(c *x509.Certificate) { c.EmailAddresses = addrs }
}

// IPs replaces the certificate's IP SANs (by default 127.0.0.1 and ::1).
func IPs(ips ...net.IP) Option {
	return func(c *x509.Certificate) { c.IPAddresses = ips }
}

// ClientOnly limits the certificate to client authentication.
func ClientOnly() Option {
	return func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }
}

// Issue makes a certificate named name (its CN and a DNS SAN) signed by ca.
func (ca *CA) Issue(t testing.TB, name string, opts ...Option) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Conclave Test"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testpki: certificate %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{
		CertFile: filepath.Join(ca.dir, name+".pem"),
		KeyFile:  filepath.Join(ca.dir, name+"-key.pem"),
		CAFile:   ca.File,
		Subject:  cert.Subject.String(),
		Cert:     cert,
	}
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	writePEM(t, l.KeyFile, "PRIVATE KEY", keyDER)
	return l
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
