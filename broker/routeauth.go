package broker

import (
	"crypto/subtle"
	"net"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
)

// routeAuthenticator decides which servers may join the cluster. Routes
// carry no per-user permissions, so a route accepted from the wrong party
// would bypass every one of them: with TLS, a route must present a
// certificate the CA signed that names one of the configured peers' hosts
// (an IP or DNS SAN), so a client's certificate from the same CA cannot
// join; with peer credentials, it must give them too.
type routeAuthenticator struct {
	peerHosts      []string // the configured peers' host names and IPs, lower case
	tls            bool
	user, password string
	log            *logrus.Entry
}

func newRouteAuthenticator(s *settings, log *logrus.Entry) *routeAuthenticator {
	a := &routeAuthenticator{tls: s.sec.tls != nil, user: s.sec.peerUser, password: s.sec.peerPassword, log: log}
	for _, r := range s.routes {
		h := strings.ToLower(r.Hostname())
		if !slices.Contains(a.peerHosts, h) {
			a.peerHosts = append(a.peerHosts, h)
		}
	}
	return a
}

// Check accepts a route that proves it is one of the configured peers.
func (a *routeAuthenticator) Check(c server.ClientAuthentication) bool {
	if reason := a.refusal(c); reason != "" {
		remote := ""
		if addr := c.RemoteAddress(); addr != nil {
			remote = addr.String()
		}
		a.log.WithField("remote", remote).Warnf("Refused a route: %s", reason)
		return false
	}
	return true
}

// refusal says why c may not join, or "".
func (a *routeAuthenticator) refusal(c server.ClientAuthentication) string {
	if a.user != "" {
		o := c.GetOpts()
		userOK := subtle.ConstantTimeCompare([]byte(o.Username), []byte(a.user)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.password)) == 1
		if !userOK || !passOK {
			return "wrong or missing peer credentials (plugin.choria.network.peer_user and peer_password must be the same on every broker)"
		}
	}
	if !a.tls {
		return ""
	}
	st := c.GetTLSConnectionState()
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return "no verified certificate"
	}
	cert := st.VerifiedChains[0][0]
	for _, ip := range cert.IPAddresses {
		if a.isPeer(ip.String()) {
			return ""
		}
	}
	for _, name := range cert.DNSNames {
		if a.isPeer(strings.ToLower(name)) {
			return ""
		}
	}
	return "certificate " + cert.Subject.String() + " names none of the peers in plugin.choria.network.peers (" +
		strings.Join(a.peerHosts, ", ") + "): a broker's certificate needs a SAN for the address its peers dial, and a client's certificate cannot join the cluster"
}

func (a *routeAuthenticator) isPeer(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(a.peerHosts, func(p string) bool {
			pip := net.ParseIP(p)
			return pip != nil && pip.Equal(ip)
		})
	}
	return slices.Contains(a.peerHosts, host)
}
