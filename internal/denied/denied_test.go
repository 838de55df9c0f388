package denied_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/denied"
)

// TestExplainTellsARefusalFromATimeout: a request the server refuses is
// explained as ErrPermissionDenied naming the subject; a later request that
// times out for another reason is not, though the connection's last error
// is still the old refusal (misreading it would end a campaign that should
// have retried).
func TestExplainTellsARefusalFromATimeout(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "u", Password: "u", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"slow"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"slow", "_INBOX.u.>"}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("u", "u"), nats.CustomInboxPrefix("_INBOX.u"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Something that hears requests on "slow" and never answers.
	if _, err := nc.SubscribeSync("slow"); err != nil {
		t.Fatal(err)
	}
	request := func(subject string) error {
		before := denied.Last(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := nc.RequestWithContext(ctx, subject, nil)
		return denied.Explain(nc, err, before, "asking "+subject, subject)
	}

	err = request("forbidden")
	if !errors.Is(err, denied.ErrPermissionDenied) {
		t.Fatalf("refused request: %v, want ErrPermissionDenied", err)
	}
	err = request("slow")
	if err == nil || errors.Is(err, denied.ErrPermissionDenied) {
		t.Fatalf("request that timed out: %v, want its timeout, not ErrPermissionDenied", err)
	}
	if !errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
		t.Fatalf("the connection's last error is %v: the test no longer shows a stale refusal", nc.LastError())
	}
	if err := denied.Explain(nc, errors.New("x"), nil, "what", "other"); errors.Is(err, denied.ErrPermissionDenied) {
		t.Errorf("a refusal of another subject explained this request: %v", err)
	}
}
