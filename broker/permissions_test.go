package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/testpki"
)

// TestUserPermissions: each kind of user logs in and gets the permissions
// acl.Compile makes of its grant; a publish outside them is refused.
func TestUserPermissions(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	dashCert := ca.Issue(t, "dash", testpki.DNSNames("dash-host"))
	opsCert := ca.Issue(t, "ops-client", testpki.DNSNames("ops.example.net"))
	log, _ := hookedLogger(logrus.InfoLevel)
	url := startBroker(t, usersConfig(t, ca, dashCert), log).ClientURL()

	ctx := testContext(t, 30*time.Second)
	t.Run("password user", func(t *testing.T) {
		nc, errs := login(t, url, "app-a", append(certOpts(ca.File, nil), nats.UserInfo("app-a", "app-a-password"))...)
		kv := openBucket(t, ctx, nc)
		if _, err := kv.Create(ctx, "app-a.worker", []byte("me")); err != nil {
			t.Fatalf("Create in its own election: %v", err)
		}
		if err := nc.Publish("$KV."+bucket.Name+".billing", []byte("me")); err != nil {
			t.Fatal(err)
		}
		waitAsyncError(t, errs, `nats: permissions violation: Permissions Violation for Publish to "$KV.CHORIA_LEADER_ELECTION.billing"`)
	})
	t.Run("certificate user by SAN", func(t *testing.T) {
		nc, _ := login(t, url, "ops", certOpts(ca.File, opsCert)...)
		kv := openBucket(t, ctx, nc)
		if _, err := kv.Create(ctx, "billing", []byte("ops")); err != nil {
			t.Fatalf("admin Create: %v", err)
		}
	})
	t.Run("certificate user by subject DN, naming itself", func(t *testing.T) {
		nc, errs := login(t, url, "dash", append(certOpts(ca.File, dashCert), nats.UserInfo("dash", ""))...)
		if err := nc.Publish("$KV."+bucket.Name+".billing", []byte("dash")); err != nil {
			t.Fatal(err)
		}
		waitAsyncError(t, errs, `nats: permissions violation: Permissions Violation for Publish to "$KV.CHORIA_LEADER_ELECTION.billing"`)
	})
}
