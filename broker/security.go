package broker

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/security"
)

// Configuration keys of the security settings, for messages.
const (
	keyTLSCert        = "plugin.security.file.certificate"
	keyTLSKey         = "plugin.security.file.key"
	keyTLSCA          = "plugin.security.file.ca"
	keyForceClientTLS = "plugin.choria.network.client_tls_force_required"
	keyInsecure       = "plugin.conclave.insecure"
	keyPeerUser       = "plugin.choria.network.peer_user"
	keyPeerPassword   = "plugin.choria.network.peer_password"
)

// securitySettings is the resolved security configuration of a broker.
type securitySettings struct {
	tls               *security.Files // nil without TLS
	requireClientCert bool            // clients must present a certificate
	tlsTimeout        time.Duration
	peerUser          string
	peerPassword      string
	users             []*config.User // sorted by name; empty: no per-user logins
	insecure          bool
	// exposures are what plugin.conclave.insecure lets through, warned
	// about at every start.
	exposures []string
	// notices are warnings that need no setting to start, such as the
	// monitoring port beyond loopback, repeated at every start.
	notices []string
}

// authenticated reports whether every network client must prove who it is:
// users are configured, or TLS requires a client certificate.
func (s *securitySettings) authenticated() bool {
	return len(s.users) > 0 || (s.tls != nil && s.requireClientCert)
}

// resolveSecurity loads the TLS files and decides what the configuration
// exposes. It returns ErrInvalidConfig (joined with security.ErrTLSFiles)
// for unusable TLS files and ErrInsecure when the broker would listen beyond
// loopback without the protection that needs and cfg.Insecure is off.
// path, when not empty, is the configuration file, named in errors.
func (s *settings) resolveSecurity(cfg *config.Config, path string) error {
	fail := func(sentinel error, format string, v ...any) error {
		msg := fmt.Sprintf(format, v...)
		if path != "" {
			msg = path + ": " + msg
		}
		return fmt.Errorf("%w: %s", sentinel, msg)
	}
	sec := securitySettings{
		requireClientCert: cfg.ClientTLSForceRequired,
		tlsTimeout:        cfg.TLSTimeout,
		peerUser:          cfg.PeerUser,
		peerPassword:      cfg.PeerPassword,
		insecure:          cfg.Insecure,
	}
	if sec.tlsTimeout <= 0 {
		sec.tlsTimeout = config.DefaultTLSTimeout
	}
	if (sec.peerUser == "") != (sec.peerPassword == "") {
		return fail(ErrInvalidConfig, "%s and %s go together: set both, or neither", keyPeerUser, keyPeerPassword)
	}
	for _, name := range cfg.UserNames() {
		u := cfg.Users[name]
		if u == nil {
			continue
		}
		if u.PasswordHash == "" && u.Certificate == "" {
			return fail(ErrInvalidConfig, "%s%s has neither a password hash nor a certificate identity, so it cannot log in: set %s%s.password or .certificate", config.UserKeyPrefix, name, config.UserKeyPrefix, name)
		}
		c := *u
		c.Name = name
		sec.users = append(sec.users, &c)
	}
	files, err := security.Load(cfg)
	if err != nil {
		if path != "" {
			return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, path, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	sec.tls = files
	if sec.tls == nil {
		for _, u := range sec.users {
			if u.Certificate != "" {
				return fail(ErrInvalidConfig, "%s%s.certificate needs TLS: set %s, %s and %s", config.UserKeyPrefix, u.Name, keyTLSCert, keyTLSKey, keyTLSCA)
			}
		}
	}
	s.sec = sec
	if msg := s.checkExposure(); msg != "" {
		return fail(ErrInsecure, "%s", msg)
	}
	return nil
}

// checkExposure refuses listening beyond loopback without TLS or without
// authentication, unless insecure is set: then it records what is exposed.
// It returns why it refuses, or "".
func (s *settings) checkExposure() string {
	sec := &s.sec
	var problems, fixes []string
	fix := func(f string) {
		if !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	useTLS := fmt.Sprintf("set %s, %s and %s to serve TLS", keyTLSCert, keyTLSKey, keyTLSCA)
	if !isLoopback(s.listenHost) {
		client := fmt.Sprintf("the client port (%s, %s %s)", hostPort(s.listenHost, s.clientPort), keyListenAddress, s.listenHost)
		if sec.tls == nil {
			problems = append(problems, client+" would accept plain-text connections: anyone on the network could read and forge election traffic")
			fix(useTLS)
		}
		if !sec.authenticated() {
			problems = append(problems, client+" would let anyone who reaches it in without logging in: they could make themselves leader of any election or depose any leader")
			fix(fmt.Sprintf("define users (%sNAME.password or .certificate) or keep %s true with TLS", config.UserKeyPrefix, keyForceClientTLS))
		}
		if s.peerPort != 0 && sec.tls == nil {
			problems = append(problems, fmt.Sprintf("the peer port (%s, %s) would accept plain-text routes: anyone on the network could join the cluster and read or change every election", hostPort(s.listenHost, s.peerPort), keyPeerPort))
			fix(useTLS)
		}
	}
	if s.peerPort != 0 && len(sec.users) > 0 && sec.tls == nil && sec.peerUser == "" {
		// Routes carry no per-user permissions: any local process that can
		// open a route would bypass them all.
		problems = append(problems, fmt.Sprintf("the peer port (%s, %s) would accept routes from anyone who reaches it, and a route bypasses every user's permissions", hostPort(s.listenHost, s.peerPort), keyPeerPort))
		fix(useTLS + " (routes then need a broker's certificate)")
		fix("or set plugin.choria.network.peer_user and peer_password")
	}
	if s.statsPort != 0 && !isLoopback(s.statsHost) {
		sec.notices = append(sec.notices, fmt.Sprintf("the monitoring port (%s, %s) is reachable beyond loopback and needs no login: anyone who reaches it sees the server's connections, user names, routes and streams; set %s to 127.0.0.1 unless that is wanted",
			hostPort(s.statsHost, s.statsPort), keyStatsAddress, keyStatsAddress))
	}
	if len(problems) == 0 {
		return ""
	}
	if sec.insecure {
		sec.exposures = problems
		return ""
	}
	return fmt.Sprintf("%s; %s, listen on loopback (%s = 127.0.0.1), or set %s = true to accept the risk",
		strings.Join(problems, "; "), strings.Join(fixes, ", "), keyListenAddress, keyInsecure)
}

// isLoopback reports whether host is a loopback address or localhost. Other
// names count as beyond loopback: they may resolve to any address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func hostPort(host string, port int) string {
	p := strconv.Itoa(port)
	if port == randomPort {
		p = "any free port"
	}
	return net.JoinHostPort(host, p)
}

// applySecurity sets the TLS and route options of opts.
func (s *settings) applySecurity(opts *server.Options, auth server.Authentication) {
	sec := &s.sec
	timeout := sec.tlsTimeout.Seconds()
	if sec.tls != nil {
		// A TLS configuration makes nats-server require TLS of every network
		// client (INFO says tls_required) and verify client certificates as
		// its ClientAuth says; in-process connections skip TLS.
		opts.TLSConfig = sec.tls.Server(sec.requireClientCert)
		opts.TLSTimeout = timeout
	}
	if auth != nil {
		opts.CustomClientAuthentication = auth
	}
	if s.peerPort == 0 {
		return
	}
	if sec.tls != nil {
		opts.Cluster.TLSConfig = sec.tls.Routes()
		opts.Cluster.TLSTimeout = timeout
	}
	if sec.peerUser != "" {
		opts.Cluster.Username = sec.peerUser
		opts.Cluster.Password = sec.peerPassword
	}
	opts.Routes = make([]*url.URL, len(s.routes))
	for i, r := range s.routes {
		u := *r
		if sec.peerUser != "" {
			// nats-server sends a route's credentials from its URL.
			u.User = url.UserPassword(sec.peerUser, sec.peerPassword)
		}
		opts.Routes[i] = &u
	}
}

// describeTLS says how clients and peers connect, for the start-up log.
func (s *settings) describeTLS() string {
	sec := &s.sec
	if sec.tls == nil {
		return "no TLS: clients and peers connect in plain text"
	}
	certs := "client certificates optional (verified when given)"
	if sec.requireClientCert {
		certs = "client certificates required"
	}
	routes := ""
	if s.peerPort != 0 {
		routes = "; routes: TLS with certificates verified both ways"
	}
	return fmt.Sprintf("TLS %s+ only, %s, certificate %s, CA-verified (handshake timeout %v)%s",
		tlsVersionName(security.MinVersion), certs, sec.tls.Leaf.Subject, sec.tlsTimeout, routes)
}

func tlsVersionName(v uint16) string { return strings.TrimPrefix(tls.VersionName(v), "TLS ") }
