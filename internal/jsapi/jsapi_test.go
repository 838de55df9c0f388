package jsapi_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/jsapi"
	"github.com/conclave-io/conclave/internal/natstest"
)

func TestPrefix(t *testing.T) {
	nc, err := nats.Connect(natstest.Start(t, &server.Options{}).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, tc := range []struct {
		name string
		make func() (jetstream.JetStream, error)
		want string
	}{
		{"default", func() (jetstream.JetStream, error) { return jetstream.New(nc) }, "$JS.API."},
		{"domain", func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub") }, "$JS.hub.API."},
		{"prefix", func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.other.API") }, "$JS.other.API."},
		{"prefix with its dot", func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.other.API.") }, "$JS.other.API."},
	} {
		js, err := tc.make()
		if err != nil {
			t.Fatal(err)
		}
		if got := jsapi.Prefix(js); got != tc.want {
			t.Errorf("%s: Prefix = %q, want %q", tc.name, got, tc.want)
		}
	}
}
