package broker

import (
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/config"
)

// authenticator is nats-server's CustomClientAuthentication when users are
// configured. It lets password users and certificate users coexist, which
// nats-server's own TLS map cannot (with it on, passwords are ignored), and
// gives each user the permissions acl.Compile makes of its grant.
type authenticator struct {
	log      *logrus.Entry
	internal internalCredential
	users    map[string]*login   // by name
	byCert   map[string][]*login // by certificate identity
	// decoy is a configured password hash that a login of an unknown user
	// is checked against anyway, so that the time a refusal takes does not
	// tell which user names exist; nil when no user has a password.
	decoy []byte
}

var _ server.Authentication = (*authenticator)(nil)

// login is a configured user and what it may do.
type login struct {
	name         string
	passwordHash []byte // nil: no password login
	certificate  string // "": no certificate login
	perms        *server.Permissions
}

func newAuthenticator(users []*config.User, internal internalCredential, log *logrus.Entry) *authenticator {
	a := &authenticator{log: log, internal: internal, users: map[string]*login{}, byCert: map[string][]*login{}}
	for _, u := range users {
		l := &login{name: u.Name, certificate: u.Certificate, perms: userPermissions(u)}
		if u.PasswordHash != "" {
			l.passwordHash = []byte(u.PasswordHash)
			if a.decoy == nil {
				a.decoy = l.passwordHash
			}
		}
		a.users[u.Name] = l
		if u.Certificate != "" {
			a.byCert[u.Certificate] = append(a.byCert[u.Certificate], l)
		}
	}
	return a
}

// Check authenticates a client connection and registers its user with the
// user's permissions; it logs every refusal at warning level with the reason.
// nats-server calls it for every client that sends CONNECT.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	user, perms, reason := a.authenticate(c)
	if reason != "" {
		a.refuse(c, reason)
		return false
	}
	c.RegisterUser(&server.User{Username: user, Permissions: perms})
	return true
}

// authenticate returns the user c logs in as and its permissions (nil: all),
// or why it is refused.
func (a *authenticator) authenticate(c server.ClientAuthentication) (user string, perms *server.Permissions, reason string) {
	o := c.GetOpts()
	if o.Username == a.internal.user {
		switch {
		case !inProcess(c):
			return "", nil, "the broker's in-process login was used on a network connection"
		case subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.internal.password)) != 1:
			return "", nil, "wrong in-process credential"
		}
		return a.internal.user, nil, ""
	}
	switch {
	case o.JWT != "" || o.Nkey != "":
		return "", nil, "nkey or credentials-file (JWT) logins are not supported by this broker: log in with plugin.nats.user and plugin.nats.pass, or a client certificate"
	case o.Token != "":
		return "", nil, "token logins are not supported by this broker: log in with plugin.nats.user and plugin.nats.pass, or a client certificate"
	case o.Password != "":
		return a.byPassword(o.Username, o.Password)
	}
	return a.byCertificate(o.Username, peerCertificate(c))
}

func (a *authenticator) byPassword(name, password string) (string, *server.Permissions, string) {
	if name == "" {
		return "", nil, "a password without a user name: set plugin.nats.user"
	}
	l := a.users[name]
	if (l == nil || l.passwordHash == nil) && a.decoy != nil {
		_ = bcrypt.CompareHashAndPassword(a.decoy, []byte(password)) // as long as a real check
	}
	switch {
	case l == nil:
		return "", nil, fmt.Sprintf("unknown user %q", name)
	case l.passwordHash == nil:
		return "", nil, fmt.Sprintf("user %q logs in with its certificate, not a password", name)
	case bcrypt.CompareHashAndPassword(l.passwordHash, []byte(password)) != nil:
		return "", nil, fmt.Sprintf("wrong password for user %q", name)
	}
	return l.name, l.perms, ""
}

func (a *authenticator) byCertificate(name string, cert *x509.Certificate) (string, *server.Permissions, string) {
	if cert == nil {
		if l := a.users[name]; l != nil {
			return "", nil, fmt.Sprintf("user %q gave no password and no client certificate", name)
		}
		if name != "" {
			return "", nil, fmt.Sprintf("unknown user %q, and no password", name)
		}
		return "", nil, "no credentials: give plugin.nats.user and plugin.nats.pass, or a client certificate of a configured user"
	}
	var found []*login
	for _, id := range certificateIdentities(cert) {
		for _, l := range a.byCert[id] {
			if !slices.Contains(found, l) {
				found = append(found, l)
			}
		}
	}
	switch {
	case len(found) == 0:
		return "", nil, fmt.Sprintf("certificate %q (SANs %s) is no user's certificate identity", cert.Subject, strings.Join(sans(cert), ", "))
	case name != "":
		for _, l := range found {
			if l.name == name {
				return l.name, l.perms, ""
			}
		}
		return "", nil, fmt.Sprintf("certificate %q belongs to user %s, not %q", cert.Subject, names(found), name)
	case len(found) > 1:
		return "", nil, fmt.Sprintf("certificate %q is the identity of users %s: set plugin.nats.user to choose one", cert.Subject, names(found))
	}
	return found[0].name, found[0].perms, ""
}

// refuse logs a refused login, without its password.
func (a *authenticator) refuse(c server.ClientAuthentication, reason string) {
	o := c.GetOpts()
	f := logrus.Fields{"user": o.Username, "client_name": o.Name}
	if addr := c.RemoteAddress(); addr != nil {
		f["remote"] = addr.String()
	}
	if cert := peerCertificate(c); cert != nil {
		f["certificate"] = cert.Subject.String()
	}
	a.log.WithFields(f).Warnf("Refused a client login: %s", reason)
}

// inProcess reports whether c came through Server.InProcessConn, which
// connects over a net.Pipe.
func inProcess(c server.ClientAuthentication) bool {
	addr := c.RemoteAddress()
	return addr != nil && addr.Network() == "pipe"
}

// peerCertificate returns the client's certificate once TLS verified it
// against the CA, or nil.
func peerCertificate(c server.ClientAuthentication) *x509.Certificate {
	st := c.GetTLSConnectionState()
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return st.VerifiedChains[0][0]
}

// certificateIdentities are what a user's certificate setting may name:
// the DNS and e-mail SANs and the subject DN as Go prints it.
func certificateIdentities(cert *x509.Certificate) []string {
	return append(sans(cert), cert.Subject.String())
}

func sans(cert *x509.Certificate) []string {
	return append(slices.Clone(cert.DNSNames), cert.EmailAddresses...)
}

func names(ls []*login) string {
	var n []string
	for _, l := range ls {
		n = append(n, fmt.Sprintf("%q", l.name))
	}
	return strings.Join(n, " and ")
}

// describeUser says how a user logs in and what it may do, for the start-up
// log; it holds no secret.
func describeUser(u *config.User) string {
	var how []string
	if u.PasswordHash != "" {
		how = append(how, "a password")
	}
	if u.Certificate != "" {
		how = append(how, fmt.Sprintf("certificate %q", u.Certificate))
	}
	var may []string
	if len(u.Campaign) > 0 {
		may = append(may, "campaign in "+strings.Join(u.Campaign, ","))
	}
	if len(u.Observe) > 0 {
		may = append(may, "observe "+strings.Join(u.Observe, ","))
	}
	if u.Admin {
		may = append(may, "administer every election")
	}
	return fmt.Sprintf("user %s logs in with %s; may %s", u.Name, strings.Join(how, " or "), strings.Join(may, ", "))
}
