package broker

import (
	"github.com/nats-io/nats-server/v2/server"

	"github.com/conclave-io/conclave/config"
)

// userPermissions compiles a user's grant into NATS allow lists.
//
// Until acl.Compile is committed, every user is allowed nothing: logins
// work, permissions follow with acl.
func userPermissions(u *config.User) *server.Permissions {
	_ = u
	// Non-nil lists: an empty allow list allows nothing, a nil one all.
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{}},
		Subscribe: &server.SubjectPermission{Allow: []string{}},
	}
}
