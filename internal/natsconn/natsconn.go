// Package natsconn turns a configuration's client settings (TLS files,
// plugin.nats.* logins) into NATS connection options, and explains failed
// connections by their cause. The framework and the CLI both use it, so
// that they connect the same way.
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/security"
)

// ErrLogin is a broker refusing a connection's login or certificate, or a
// connection that cannot use its TLS settings. The message says which and
// what to change.
var ErrLogin = errors.New("conclave: cannot log in to the broker")

// PingInterval is how often an idle long-lived connection checks that its
// broker is still there, so that a silent network partition is noticed
// (nats.go's default is two minutes).
const PingInterval = 10 * time.Second

// ReconnectDelay paces reconnection: quick at first, so that elections with
// short TTLs survive a broker restart, then every few seconds.
var ReconnectDelay = backoff.Linear(100*time.Millisecond, 2*time.Second, 10)

// ClientOptions returns the settings of every long-lived connection of the
// framework and the CLI (elections, observers, election run, watch), so
// that they cannot drift apart: reconnect forever, paced by ReconnectDelay;
// ping every PingInterval; and fail writes made while disconnected instead
// of buffering them (ReconnectBufSize -1): an election write that reaches
// the broker long after its request timed out could take a key that nobody
// then renews. Name, timeout, login and handlers are the caller's.
func ClientOptions() []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return ReconnectDelay.Duration(attempts - 1) }),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(PingInterval),
	}
}

// Options returns the options that make a connection log in as cfg says:
// TLS with cfg's certificate, key and CA (checked first, so a wrong path or
// an expired certificate is named as such), plugin.nats.user and
// plugin.nats.pass, or plugin.nats.credentials, and the inbox prefix of
// plugin.nats.user (a broker with users lets each read only its own
// inboxes).
func Options(cfg *config.Config) ([]nats.Option, error) {
	var opts []nats.Option
	files, err := security.Load(cfg)
	if err != nil {
		return nil, err
	}
	if files != nil {
		opts = append(opts, nats.Secure(files.Client()))
	}
	switch {
	case cfg.NATSCredentials != "":
		if _, err := os.Stat(cfg.NATSCredentials); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("plugin.nats.credentials %s does not exist: check the path", cfg.NATSCredentials)
			}
			return nil, fmt.Errorf("plugin.nats.credentials %s: %w", cfg.NATSCredentials, err)
		}
		opts = append(opts, nats.UserCredentials(cfg.NATSCredentials))
	case cfg.NATSUser != "":
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPass))
	}
	if cfg.NATSUser != "" {
		opts = append(opts, nats.CustomInboxPrefix(acl.InboxPrefix(cfg.NATSUser)))
	}
	return opts, nil
}

// Explain says why a connection to where failed when the cause is the
// login or TLS, returning an error wrapping ErrLogin and err; it returns nil
// for any other cause (no broker answering, for one).
func Explain(err error, cfg *config.Config, where string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	who := "of a client without a login (no plugin.nats.user or plugin.nats.credentials)"
	switch {
	case cfg.NATSCredentials != "":
		who = "with the credentials in plugin.nats.credentials " + cfg.NATSCredentials
	case cfg.NATSUser != "" && cfg.NATSPass != "":
		who = "of user " + cfg.NATSUser + " with plugin.nats.pass"
	case cfg.NATSUser != "":
		who = "of user " + cfg.NATSUser
	}
	if cfg.TLSCertificate != "" {
		who += " and the certificate " + cfg.TLSCertificate
	}
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), strings.Contains(strings.ToLower(msg), "authorization violation"):
		return fmt.Errorf("%w: %s refused the login %s: check plugin.nats.user and plugin.nats.pass (or the certificate's identity) against the broker's plugin.conclave.user.NAME keys: %w", ErrLogin, where, who, err)
	case errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("%w: %s refused the credentials (%v): renew them: %w", ErrLogin, where, err, err)
	case (errors.As(err, &unknownCA) || errors.As(err, &certErr)) && cfg.TLSCA == "":
		return fmt.Errorf("%w: the certificate %s presents is not signed by a CA this machine trusts: set plugin.security.file.ca to the broker's CA (with plugin.security.file.certificate and .key if it wants client certificates): %w", ErrLogin, where, err)
	case errors.As(err, &unknownCA), errors.As(err, &certErr):
		return fmt.Errorf("%w: the certificate %s presents is not signed by the CA in plugin.security.file.ca %s: use that broker's CA, or a broker certificate this CA signed: %w", ErrLogin, where, cfg.TLSCA, err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w: the certificate %s presents is not for that name (%v): connect by a name the certificate lists, or reissue it with that name: %w", ErrLogin, where, hostErr, err)
	case strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: bad certificate"):
		return fmt.Errorf("%w: %s refused this client's certificate %s: it is not signed by the CA the broker trusts: use a certificate from the broker's CA: %w", ErrLogin, where, cfg.TLSCertificate, err)
	case strings.Contains(msg, "tls: expired certificate"):
		return fmt.Errorf("%w: %s refused this client's certificate %s as expired (check this machine's clock, or issue a new certificate): %w", ErrLogin, where, cfg.TLSCertificate, err)
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "client didn't provide a certificate"):
		return fmt.Errorf("%w: %s requires a client certificate: set plugin.security.file.certificate, .key and .ca: %w", ErrLogin, where, err)
	case errors.Is(err, nats.ErrSecureConnRequired):
		return fmt.Errorf("%w: %s requires TLS: set plugin.security.file.certificate, .key and .ca (and use tls:// in plugin.choria.middleware_hosts): %w", ErrLogin, where, err)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("%w: %s does not offer TLS but this client requires it: drop the TLS settings for that broker, or turn TLS on there: %w", ErrLogin, where, err)
	case strings.Contains(msg, "connection closed by remote after TLS handshake") && cfg.TLSCertificate == "":
		return fmt.Errorf("%w: %s closed the connection after the TLS handshake: it requires a client certificate: set plugin.security.file.certificate, .key and .ca: %w", ErrLogin, where, err)
	case strings.Contains(msg, "connection closed by remote after TLS handshake"):
		return fmt.Errorf("%w: %s closed the connection after the TLS handshake: it refused this client's certificate %s (not signed by the CA it trusts, or expired by its clock): %w", ErrLogin, where, cfg.TLSCertificate, err)
	case strings.Contains(msg, "tls:"), strings.Contains(msg, "tls error"), strings.Contains(msg, "x509:"):
		return fmt.Errorf("%w: TLS with %s failed: %w", ErrLogin, where, err)
	}
	return nil
}
