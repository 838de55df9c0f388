// Package security builds the TLS settings of brokers and clients from a
// configuration's plugin.security.* keys, and checks the files before any
// connection is tried, so that a wrong path, an expired certificate or one
// the CA did not sign is reported as such instead of as a failed handshake.
package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/conclave-io/conclave/config"
)

// MinVersion is the oldest TLS version brokers and clients accept.
const MinVersion = tls.VersionTLS12

// ErrTLSFiles is a certificate, key or CA file that cannot be used: missing,
// unreadable, not PEM, a key that does not match, a certificate that expired,
// is not valid yet or is not signed by the CA.
var ErrTLSFiles = errors.New("security: unusable TLS files")

// Keys of the settings, for messages.
const (
	keyCert = "plugin.security.file.certificate"
	keyKey  = "plugin.security.file.key"
	keyCA   = "plugin.security.file.ca"
)

// Files is a loaded and checked certificate, key and CA.
type Files struct {
	// Cert is the node's certificate with its key.
	Cert tls.Certificate
	// Leaf is the parsed certificate.
	Leaf *x509.Certificate
	// CAs holds the CA certificates.
	CAs *x509.CertPool

	suites []uint16
	curves []tls.CurveID
}

// Load reads and checks cfg's TLS files: each must exist and parse, the key
// must match the certificate, and the certificate must be valid now and
// chain to the CA. It returns nil, nil when cfg names no TLS files.
func Load(cfg *config.Config) (*Files, error) {
	return LoadAt(cfg, time.Now())
}

// LoadAt is Load checking validity at now.
func LoadAt(cfg *config.Config, now time.Time) (*Files, error) {
	if !cfg.TLSConfigured() {
		return nil, nil
	}
	for _, kv := range [][2]string{{keyCert, cfg.TLSCertificate}, {keyKey, cfg.TLSKey}, {keyCA, cfg.TLSCA}} {
		if kv[1] == "" {
			return nil, fmt.Errorf("%w: %s is not set: TLS needs the certificate, its key and the CA", ErrTLSFiles, kv[0])
		}
		if err := readable(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	caPEM, err := os.ReadFile(cfg.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrTLSFiles, keyCA, cfg.TLSCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s %s holds no PEM certificate: give the CA's certificate (-----BEGIN CERTIFICATE-----)", ErrTLSFiles, keyCA, cfg.TLSCA)
	}
	pair, err := tls.LoadX509KeyPair(cfg.TLSCertificate, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s with %s %s: %w: check both are PEM and that the key is the certificate's", ErrTLSFiles, keyCert, cfg.TLSCertificate, keyKey, cfg.TLSKey, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrTLSFiles, keyCert, cfg.TLSCertificate, err)
		}
	}
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("%w: %s %s (%s) expired on %s: issue a new certificate", ErrTLSFiles, keyCert, cfg.TLSCertificate, leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("%w: %s %s (%s) is not valid until %s: check this machine's clock, or issue a certificate valid now", ErrTLSFiles, keyCert, cfg.TLSCertificate, leaf.Subject, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: %s %s (%s) does not chain to the CA in %s %s: %w: use a certificate that CA signed, or that CA", ErrTLSFiles, keyCert, cfg.TLSCertificate, leaf.Subject, keyCA, cfg.TLSCA, err)
	}
	f := &Files{Cert: pair, Leaf: leaf, CAs: pool}
	if f.suites, err = suites(cfg.CipherSuites); err != nil {
		return nil, err
	}
	f.curves = curves(cfg.ECCCurves)
	return f, nil
}

// readable checks that the file a key names can be opened.
func readable(key, path string) error {
	fh, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s %s does not exist: check the path", ErrTLSFiles, key, path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %s %s cannot be read by this user: fix its permissions", ErrTLSFiles, key, path)
	case err != nil:
		return fmt.Errorf("%w: %s %s: %w", ErrTLSFiles, key, path, err)
	}
	return fh.Close()
}

// base is what every TLS configuration shares.
func (f *Files) base() *tls.Config {
	return &tls.Config{
		MinVersion:       MinVersion,
		Certificates:     []tls.Certificate{f.Cert},
		CipherSuites:     f.suites,
		CurvePreferences: f.curves,
	}
}

// Server returns the TLS settings of a broker's client port: clients must
// present a certificate signed by the CA when requireClientCert is true
// (plugin.choria.network.client_tls_force_required), and any certificate a
// client presents must be signed by it.
func (f *Files) Server(requireClientCert bool) *tls.Config {
	c := f.base()
	c.ClientCAs = f.CAs
	c.ClientAuth = tls.VerifyClientCertIfGiven
	if requireClientCert {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// Routes returns the TLS settings of a broker's cluster routes, both ways:
// each end presents its certificate and verifies the other's against the CA.
func (f *Files) Routes() *tls.Config {
	c := f.base()
	c.ClientCAs = f.CAs
	c.RootCAs = f.CAs
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c
}

// Client returns the TLS settings of a client: it verifies the broker
// against the CA and presents its certificate.
func (f *Files) Client() *tls.Config {
	c := f.base()
	c.RootCAs = f.CAs
	return c
}

// suites maps cipher suite names (validated by package config) to IDs.
func suites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	byName := map[string]uint16{}
	for _, s := range tls.CipherSuites() {
		byName[s.Name] = s.ID
	}
	var ids []uint16
	for _, n := range names {
		id, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("%w: plugin.security.cipher_suites: %q is not a secure suite Go supports", ErrTLSFiles, n)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// curves maps curve names (validated by package config) to IDs.
func curves(names []string) []tls.CurveID {
	var ids []tls.CurveID
	for _, n := range names {
		for _, c := range []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521} {
			if c.String() == n {
				ids = append(ids, c)
			}
		}
	}
	return ids
}
