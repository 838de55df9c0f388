package streams

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/natstest"
)

// TestCampaignThroughAJetStreamDomain: a candidate on a leaf node that
// campaigns in the hub's bucket through a domain-qualified JetStream
// context (as in Choria's leafnode setups, where each domain has its own
// election bucket) writes, renews and releases in the hub's bucket, and
// never touches the leaf's bucket of the same name.
func TestCampaignThroughAJetStreamDomain(t *testing.T) {
	leafPort := natstest.FreePort(t)
	hub := natstest.Start(t, &server.Options{ServerName: "hub", JetStream: true, JetStreamDomain: "hub",
		StoreDir: t.TempDir(), LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	hubURL, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
	if err != nil {
		t.Fatal(err)
	}
	leaf := natstest.Start(t, &server.Options{ServerName: "leaf", JetStream: true, JetStreamDomain: "leaf",
		StoreDir: t.TempDir(), LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{hubURL}}}}})
	eventually(t, 10*time.Second, "the leaf node to connect", func() bool { return hub.NumLeafNodes() == 1 && leaf.NumLeafNodes() == 1 })

	nc := connect(t, leaf.ClientURL())
	local := createBucket(t, nc, bucketConfig(2*time.Second)) // the leaf's own bucket
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var kv jetstream.KeyValue
	eventually(t, 10*time.Second, "the hub's bucket to be made through the domain", func() bool {
		kv, err = js.CreateKeyValue(ctx, bucketConfig(2*time.Second))
		return err == nil
	})
	allowMsgTTL(t, js, bucketName)

	rec := newRecorder()
	e, err := NewElection("a", "app.domain", kv, append(rec.options("a"), WithJetStream(js), RequestTimeout(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	stop := runElection(t, e)
	rec.waitFor(t, 10*time.Second, "a leads through the domain", func(evs []event) bool { return leader(evs) == "a" })
	first := e.Term().Token()
	eventually(t, 10*time.Second, "a renewal in the hub's bucket", func() bool {
		ent, err := kv.Get(ctx, "app.domain")
		return err == nil && ent.Revision() > first && string(ent.Value()) == "a"
	})
	stop()
	eventually(t, 10*time.Second, "the release in the hub's bucket", func() bool {
		_, err := kv.Get(ctx, "app.domain")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if ent, err := local.Get(ctx, "app.domain"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the leaf's own bucket got the key (entry %v, error %v): writes went to the local domain", ent, err)
	}
	if evs := rec.snapshot(); len(evs) != 2 {
		t.Fatalf("want one term, got %s", describe(evs))
	}
}
