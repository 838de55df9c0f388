package broker

import (
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
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string{}, p.Publish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string{}, p.Subscribe...)},
	}
}
