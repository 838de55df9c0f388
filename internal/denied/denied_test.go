package denied_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/natstest"
)

// userConn connects as user u, on its own inbox prefix, to a server that
// lets u publish and subscribe only to the subjects given.
func userConn(t *testing.T, publish, subscribe []string) *nats.Conn {
	t.Helper()
	srv := natstest.Start(t, &server.Options{Users: []*server.User{{Username: "u", Password: "u", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: publish},
		Subscribe: &server.SubjectPermission{Allow: subscribe},
	}}}})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("u", "u"), nats.CustomInboxPrefix("_INBOX.u"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestExplainTellsARefusalFromATimeout: a request the server refuses is
// explained as ErrPermissionDenied naming the subject; a later request that
// times out for another reason is not, though the connection's last error
// is still the old refusal (misreading it would end a campaign that should
// have retried).
func TestExplainTellsARefusalFromATimeout(t *testing.T) {
	nc := userConn(t, []string{"slow"}, []string{"slow", "_INBOX.u.>"})
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

	err := request("forbidden")
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

// TestExplainMatchesWildcards: a refused request whose subject holds a part
// the caller cannot know (a consumer's random name) is explained when the
// caller gives that part as * (or the rest as >), and not when the rest of
// the subject differs.
func TestExplainMatchesWildcards(t *testing.T) {
	nc := userConn(t, []string{"allowed"}, []string{"_INBOX.u.>"})
	const subject = "$JS.API.CONSUMER.CREATE.KV_B.Xy12.$KV.B.>"
	before := denied.Last(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, reqErr := nc.RequestWithContext(ctx, subject, nil)
	if reqErr == nil {
		t.Fatal("the forbidden request was answered")
	}
	for pattern, want := range map[string]bool{
		"$JS.API.CONSUMER.CREATE.KV_B.*.$KV.B.>":     true, // the name unknown; the filter > itself
		"$JS.API.CONSUMER.CREATE.KV_B.>":             true,
		"$JS.API.CONSUMER.CREATE.KV_B.*.$KV.B.app.>": false, // another filter
		"$JS.API.CONSUMER.CREATE.KV_C.*.$KV.B.>":     false, // another stream
		"$JS.API.CONSUMER.CREATE.KV_B.*":             false, // too short
		"$JS.API.CONSUMER.CREATE.KV_B.*.$KV.B.>.x":   false, // too long
		subject: true,
	} {
		err := denied.Explain(nc, reqErr, before, "watching", pattern)
		if got := errors.Is(err, denied.ErrPermissionDenied); got != want {
			t.Errorf("Explain with %q: %v; want permission denied %v", pattern, err, want)
		}
		if want && err != nil && !strings.Contains(err.Error(), "refused "+subject+" ") {
			t.Errorf("Explain with %q: %v; want it to name the refused subject %s", pattern, err, subject)
		}
	}
}

// TestInboxRefusalNamesThePrefixToUse: a client of a broker with users that
// keeps nats.go's default inbox has every request refused; the error says
// which prefix its user must use, in Go and with the NATS CLI, and Abort
// ends the request as soon as the refusal is reported.
func TestInboxRefusalNamesThePrefixToUse(t *testing.T) {
	srv := natstest.Start(t, &server.Options{Users: []*server.User{{Username: "u", Password: "u", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"svc"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.u.>"}},
	}}}})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("u", "u"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	before := denied.Last(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	actx, stop := denied.Abort(ctx, nc, before, "asking svc", denied.Naming("svc"))
	defer stop()
	began := time.Now()
	_, reqErr := nc.RequestWithContext(actx, "svc", nil)
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the refused request took %v: Abort did not end it when the refusal was reported", took)
	}
	if cause := context.Cause(actx); !errors.Is(cause, denied.ErrRefused) || errors.Is(cause, denied.ErrPermissionDenied) {
		t.Errorf("the request's context ended with %v, want the refusal", context.Cause(actx))
	}
	err = denied.Explain(nc, reqErr, before, "asking svc", "svc")
	if !errors.Is(err, denied.ErrPermissionDenied) {
		t.Fatalf("request on the default inbox: %v, want ErrPermissionDenied", err)
	}
	for _, want := range []string{`nats.CustomInboxPrefix("_INBOX.u")`, "--inbox-prefix _INBOX.u"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %s: %v", want, err)
		}
	}
}
