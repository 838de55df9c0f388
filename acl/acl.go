// Package acl compiles Conclave's per-election permissions (the broker's
// plugin.conclave.user.NAME.* keys) into NATS allow lists over the election
// bucket's subjects and the JetStream API subjects a key-value client uses.
//
// Only allow lists are produced: NATS matches a wildcard in a published
// subject as a literal token, so a deny list can be bypassed.
package acl

import "strings"

// InboxPrefix is the inbox prefix of user: its clients must use it
// (nats.CustomInboxPrefix), and only it may subscribe under it, so that no
// user can read another's replies.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Grant is what one user may do.
type Grant struct {
	// Campaign lists the elections (names or patterns) the user may
	// campaign in, stand down and watch.
	Campaign []string
	// Observe lists the elections the user may only watch.
	Observe []string
	// Admin lets the user watch every election and stand any down.
	Admin bool
}

// Permissions are NATS allow lists.
type Permissions struct {
	// Publish lists the subjects the user may publish to.
	Publish []string `json:"publish"`
	// Subscribe lists the subjects the user may subscribe to.
	Subscribe []string `json:"subscribe"`
}

// streamName is the JetStream stream behind a KV bucket.
func streamName(bucket string) string { return "KV_" + bucket }

var _ = strings.TrimSpace
