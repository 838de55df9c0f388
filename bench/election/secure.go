package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	conclaveconfig "github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/security"
)

// benchUser is the user the candidates log in as in secure mode: it may
// campaign in every election and do nothing else.
const benchUser = "bench"

// secureBroker configures opts as Conclave's broker configures a secure
// one: mutual TLS on the client port, with the files loaded and checked by
// package security, and users: the candidates' user with the allow lists
// acl.Compile makes of a campaign grant (as broker/permissions.go converts
// them), and an admin with every permission, which provisions the bucket
// and reads the measurements. It returns the options of both logins.
func secureBroker(dir string, opts *server.Options) (admin, candidates []nats.Option, err error) {
	cfg := &conclaveconfig.Config{
		TLSCertificate: filepath.Join(dir, "cert.pem"),
		TLSKey:         filepath.Join(dir, "key.pem"),
		TLSCA:          filepath.Join(dir, "ca.pem"),
	}
	if err := makeCerts(cfg.TLSCertificate, cfg.TLSKey, cfg.TLSCA); err != nil {
		return nil, nil, fmt.Errorf("certificates: %w", err)
	}
	files, err := security.Load(cfg)
	if err != nil {
		return nil, nil, err
	}
	opts.TLS, opts.TLSVerify, opts.TLSConfig, opts.TLSTimeout = true, true, files.Server(true), 2
	p := acl.Compile(bucket.Name, benchUser, acl.Grant{Campaign: []string{">"}})
	pw := rand.Text()
	opts.Users = []*server.User{
		{Username: "admin", Password: pw},
		{Username: benchUser, Password: pw, Permissions: broker.ServerPermissions(p)},
	}
	tls := nats.Secure(files.Client())
	return []nats.Option{tls, nats.UserInfo("admin", pw)},
		[]nats.Option{tls, nats.UserInfo(benchUser, pw), nats.CustomInboxPrefix(acl.InboxPrefix(benchUser))}, nil
}

// makeCerts writes an ECDSA P-256 CA and one certificate it signs for
// localhost and 127.0.0.1, for servers and clients alike, as PEM files.
func makeCerts(certPath, keyPath, caPath string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conclave bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{{caPath, "CERTIFICATE", caDER}, {certPath, "CERTIFICATE", der}, {keyPath, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), 0o600); err != nil {
			return err
		}
	}
	return nil
}
