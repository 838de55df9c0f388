package broker

import (
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
)

// userPermissions compiles a user's grant into NATS allow lists (see package
// acl). The lists are never nil: an empty allow list allows nothing, a nil
// one everything.
func userPermissions(u *config.User) *server.Permissions {
	p := acl.Compile(bucket.Name, u.Name, acl.Grant{Campaign: u.Campaign, Observe: u.Observe, Admin: u.Admin})
	return ServerPermissions(p)
}

// ServerPermissions converts allow lists of package acl into nats-server's
// permissions: the lists never nil, and with AllowResponses up to
// acl.AnswersPerRequest answers to each request received, within a minute
// (nats-server's allow_responses).
func ServerPermissions(p acl.Permissions) *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string{}, p.Publish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string{}, p.Subscribe...)},
	}
	if p.AllowResponses {
		sp.Response = &server.ResponsePermission{MaxMsgs: acl.AnswersPerRequest, Expires: time.Minute}
	}
	return sp
}
