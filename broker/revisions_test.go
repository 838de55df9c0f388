package broker_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

// A term's fencing token is the revision of the write that began it. A bucket
// deleted and created again by the broker must hand out revisions above all
// of the earlier bucket's, or tokens repeat.
func TestRecreatedBucketRevisionsExceedEarlierOnes(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	spec := broker.BucketSpec{TTL: time.Minute, Replicas: 1}

	before := uint64(time.Now().UnixMicro())
	if _, err := broker.ProvisionElectionBucket(ctx, js, spec, nil); err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	// A few terms and renewals in the first bucket.
	var r1 uint64
	for i := range 10 {
		rev, err := kv.Create(ctx, "app", []byte("node-1"))
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
		if r1, err = kv.Update(ctx, "app", []byte("node-1"), rev); err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
		if err := kv.Delete(ctx, "app", jetstream.LastRevision(r1)); err != nil {
			t.Fatalf("Delete %d: %v", i, err)
		}
	}
	if r1, err = kv.Create(ctx, "app", []byte("node-1")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if r1 < before {
		t.Errorf("first bucket's revision %d is below the creation time %d µs", r1, before)
	}

	if err := js.DeleteKeyValue(ctx, bucket.Name); err != nil {
		t.Fatalf("DeleteKeyValue: %v", err)
	}
	report, err := provisionAfterDelete(ctx, js, spec)
	if err != nil {
		t.Fatalf("provisioning again: %v", err)
	}
	if !report.Created {
		t.Fatalf("provisioning the deleted bucket: %q, want created", report)
	}
	kv, err = js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue of the new bucket: %v", err)
	}
	r2, err := kv.Create(ctx, "app", []byte("node-2"))
	if err != nil {
		t.Fatalf("Create in the new bucket: %v", err)
	}
	if r2 <= r1 {
		t.Fatalf("recreated bucket's first revision %d is not above the earlier bucket's %d: fencing tokens repeat", r2, r1)
	}
	t.Logf("revisions: earlier bucket up to %d, recreated bucket from %d (+%d)", r1, r2, r2-r1)
}

// A broker restart keeps revisions rising in a bucket with a first sequence,
// even when every key has expired and the stream is empty.
func TestRevisionsRiseAcrossRestartOfEmptyBucket(t *testing.T) {
	dir := t.TempDir()
	srv := storeServer(t, dir)
	ctx := testContext(t, 30*time.Second)
	spec := broker.BucketSpec{TTL: time.Second, Replicas: 1}
	js := connect(t, srv.ClientURL())
	if _, err := broker.ProvisionElectionBucket(ctx, js, spec, nil); err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	last, err := kv.Create(ctx, "app", []byte("node-1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for range 5 {
		if last, err = kv.Update(ctx, "app", []byte("node-1"), last); err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	waitFor(t, 10*time.Second, "the key to expire", func() bool {
		st, err := js.Stream(ctx, bucket.Stream)
		return err == nil && st.CachedInfo().State.Msgs == 0
	})
	srv.Shutdown()
	srv.WaitForShutdown()

	srv = storeServer(t, dir)
	js = connect(t, srv.ClientURL())
	report, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
	if err != nil {
		t.Fatalf("provisioning after the restart: %v", err)
	}
	if report.Changed() {
		t.Errorf("provisioning after the restart: %q, want unchanged", report)
	}
	kv, err = js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	rev, err := kv.Create(ctx, "app", []byte("node-2"))
	if err != nil {
		t.Fatalf("Create after the restart: %v", err)
	}
	if rev <= last {
		t.Fatalf("revision %d after the restart is not above %d from before it", rev, last)
	}
}

// The created stream is exactly what the KV API makes for the same settings
// but for its first sequence, so every KV client sees a normal bucket.
func TestCreatedBucketIsWhatTheKVAPIMakes(t *testing.T) {
	specs := []broker.BucketSpec{
		{TTL: time.Minute, Replicas: 1},
		{TTL: 5 * time.Second, Replicas: 1, MaxValueSize: 200},
		{TTL: 10 * time.Minute, Replicas: 1, PerKeyTTL: true},
	}
	ours, theirs := plainServer(t), plainServer(t)
	ctx := testContext(t, 60*time.Second)
	js, ref := connect(t, ours.ClientURL()), connect(t, theirs.ClientURL())
	for _, spec := range specs {
		for _, j := range []jetstream.JetStream{js, ref} {
			if err := j.DeleteKeyValue(ctx, bucket.Name); err != nil && !isNotFound(err) {
				t.Fatalf("DeleteKeyValue: %v", err)
			}
		}
		before := uint64(time.Now().UnixMicro())
		report, err := provisionAfterDelete(ctx, js, spec)
		if err != nil {
			t.Fatalf("%+v: ProvisionElectionBucket: %v", spec, err)
		}
		size := spec.MaxValueSize
		if size == 0 {
			size = broker.DefaultMaxValueSize
		}
		// What the broker did before: CreateKeyValue, then turn on what
		// the spec wants beyond it.
		kvc := jetstream.KeyValueConfig{
			Bucket:       bucket.Name,
			Description:  "Leader elections: one key per election, the value is the leader's identity",
			History:      1,
			TTL:          spec.TTL,
			MaxValueSize: size,
			Storage:      jetstream.FileStorage,
			Replicas:     spec.Replicas,
		}
		err = retryStoreRace(func() error {
			_, err := ref.CreateKeyValue(ctx, kvc)
			return err
		})
		if err != nil {
			t.Fatalf("%+v: CreateKeyValue: %v", spec, err)
		}
		refReport, err := broker.ProvisionElectionBucket(ctx, ref, spec, nil)
		if err != nil {
			t.Fatalf("%+v: provisioning the reference bucket: %v", spec, err)
		}
		if !reflect.DeepEqual(report.Changes, refReport.Changes) {
			t.Errorf("%+v: provisioning changed %q after creating, %q after CreateKeyValue", spec, report, refReport)
		}

		got := streamConfig(t, ctx, js, bucket.Stream)
		want := streamConfig(t, ctx, ref, bucket.Stream)
		if got.FirstSeq < before || got.FirstSeq > uint64(time.Now().UnixMicro()) {
			t.Errorf("%+v: FirstSeq %d is not the creation time in µs (%d or after)", spec, got.FirstSeq, before)
		}
		if want.FirstSeq != 0 {
			t.Errorf("%+v: CreateKeyValue's FirstSeq %d", spec, want.FirstSeq)
		}
		if !reflect.DeepEqual(got, report.Config) {
			t.Errorf("%+v: report.Config differs from the stream's config", spec)
		}
		got.FirstSeq = 0
		gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
		for i := range gv.NumField() {
			if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
				t.Errorf("%+v: %s = %#v, CreateKeyValue makes %#v", spec, gv.Type().Field(i).Name, g, w)
			}
		}

		checkKVClients(t, ctx, ours.ClientURL(), js, spec)
	}
}

// checkKVClients uses the bucket as our candidates, Choria's (nats.go's
// legacy KV API) and bucket listings do.
func checkKVClients(t *testing.T, ctx context.Context, url string, js jetstream.JetStream, spec broker.BucketSpec) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.Bucket() != bucket.Name || st.History() != 1 || st.TTL() != spec.TTL || st.BackingStore() != "JetStream" {
		t.Errorf("Status: bucket %s, history %d, TTL %v, store %s", st.Bucket(), st.History(), st.TTL(), st.BackingStore())
	}
	var names []string
	lister := js.KeyValueStoreNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if len(names) != 1 || names[0] != bucket.Name {
		t.Errorf("KeyValueStoreNames = %q, want [%s]", names, bucket.Name)
	}

	// Choria's clients use nats.go's legacy KV API.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	legacyJS, err := nc.JetStream()
	if err != nil {
		t.Fatalf("legacy JetStream: %v", err)
	}
	legacy, err := legacyJS.KeyValue(bucket.Name)
	if err != nil {
		t.Fatalf("legacy KeyValue: %v", err)
	}
	w, err := kv.Watch(ctx, "choria")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	rev, err := legacy.Create("choria", []byte("node-1"))
	if err != nil {
		t.Fatalf("legacy Create: %v", err)
	}
	if rev < uint64(1e15) {
		t.Errorf("legacy Create revision %d, want one from the creation time", rev)
	}
	if _, err := legacy.Update("choria", []byte("node-1"), rev); err != nil {
		t.Fatalf("legacy Update: %v", err)
	}
	e, err := kv.Get(ctx, "choria")
	if err != nil || string(e.Value()) != "node-1" || e.Revision() != rev+1 {
		t.Fatalf("Get: %v, %v", e, err)
	}
	if err := kv.Delete(ctx, "choria", jetstream.LastRevision(rev+1)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	rev2, err := legacy.Create("choria", []byte("node-2"))
	if err != nil {
		t.Fatalf("legacy Create after a delete: %v", err)
	}
	// A watch may skip writes the next one replaced (history 1); it ends on
	// the latest.
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-w.Updates():
			if e != nil && e.Revision() == rev2 {
				if e.Operation() != jetstream.KeyValuePut || string(e.Value()) != "node-2" {
					t.Errorf("watch: %v %q at %d", e.Operation(), e.Value(), rev2)
				}
				return
			}
		case <-timeout:
			t.Fatalf("the watch never saw revision %d", rev2)
		}
	}
}

// Provisioning a bucket the broker created changes nothing, its first
// sequence included.
func TestProvisionCreatedBucketTwiceChangesNothing(t *testing.T) {
	for _, spec := range []broker.BucketSpec{
		{TTL: time.Minute, Replicas: 1},
		{TTL: time.Minute, Replicas: 1, PerKeyTTL: true},
	} {
		srv := plainServer(t)
		js := connect(t, srv.ClientURL())
		ctx := testContext(t, 30*time.Second)
		first, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
		if err != nil {
			t.Fatalf("%+v: ProvisionElectionBucket: %v", spec, err)
		}
		if !first.Created {
			t.Fatalf("%+v: first provisioning %q, want created", spec, first)
		}
		again, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
		if err != nil {
			t.Fatalf("%+v: provisioning again: %v", spec, err)
		}
		if again.Changed() || again.String() != "unchanged" {
			t.Errorf("%+v: provisioning again: %q, want unchanged", spec, again)
		}
		if again.Config.FirstSeq != first.Config.FirstSeq || first.Config.FirstSeq == 0 {
			t.Errorf("%+v: FirstSeq %d, then %d", spec, first.Config.FirstSeq, again.Config.FirstSeq)
		}
	}
}

// An existing bucket keeps its revisions: provisioning does not give it a
// first sequence.
func TestProvisionLeavesExistingBucketsFirstSeq(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	rev, err := kv.Create(ctx, "app", []byte("node-1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	report, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil)
	if err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	if report.Created || report.String() != "max value size unlimited → 1024 B, max consumers server default → 1000000" || report.Config.FirstSeq != 0 {
		t.Errorf("report %q, FirstSeq %d", report, report.Config.FirstSeq)
	}
	if next, err := kv.Update(ctx, "app", []byte("node-1"), rev); err != nil || next != rev+1 {
		t.Errorf("Update after provisioning: revision %d, %v; want %d", next, err, rev+1)
	}
}

// storeServer starts a nats-server with JetStream on the store dir, shut
// down when the test ends unless the test shuts it down first.
func storeServer(t *testing.T, dir string) *server.Server {
	t.Helper()
	return natstest.Start(t, &server.Options{JetStream: true, StoreDir: dir})
}

// provisionAfterDelete provisions the bucket right after it was deleted,
// retrying nats-server's own race (see retryStoreRace).
func provisionAfterDelete(ctx context.Context, js jetstream.JetStream, spec broker.BucketSpec) (broker.ProvisionReport, error) {
	var report broker.ProvisionReport
	err := retryStoreRace(func() error {
		var err error
		report, err = broker.ProvisionElectionBucket(ctx, js, spec, nil)
		return err
	})
	return report, err
}

// retryStoreRace calls create until it does not fail with nats-server's
// "error creating store for stream" (10049). A stream created right after the
// account's last stream was deleted sometimes fails so (nats-server 2.15.2,
// about once in a hundred delete-create cycles under -race, with
// CreateKeyValue as well): the server removes the emptied streams directory
// while the new store makes its own. The broker retries provisioning anyway.
func retryStoreRace(create func() error) error {
	var err error
	for range 20 {
		var api *jetstream.APIError
		if err = create(); !errors.As(err, &api) || api.ErrorCode != 10049 {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// updateOnce updates key from revision last. A new R3 stream once answered
// a write that had landed with "wrong last sequence" (CI, stop 34; most
// likely the client's publish retried while the stream's leader settled):
// then the key holds value past last, and that revision is the write's.
// Nobody else writes the key in these tests.
func updateOnce(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, last uint64) (uint64, error) {
	rev, err := kv.Update(ctx, key, value, last)
	if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return rev, err
	}
	e, gerr := kv.Get(ctx, key)
	if gerr != nil || e.Revision() <= last || string(e.Value()) != string(value) {
		return 0, err
	}
	return e.Revision(), nil
}

func isNotFound(err error) bool {
	return err != nil && (errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound))
}

// An R3 bucket the brokers created keeps its revisions through a restart of
// every node: the first sequence does not move them back.
func TestClusterRestartKeepsRevisionsRising(t *testing.T) {
	c := brokertest.StartCluster(t, 3, nil)
	ctx := testContext(t, 90*time.Second)
	_, js := natstest.Connect(t, strings.Join(c.ClientURLs(), ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	waitStreamCurrent(t, ctx, js, 3)
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	last, err := kv.Create(ctx, "app", []byte("node-1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for range 20 {
		if last, err = updateOnce(ctx, kv, "app", []byte("node-1"), last); err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	if last < uint64(1e15) {
		t.Fatalf("revision %d, want one from the creation time", last)
	}

	c.Stop(0, 1, 2)
	c.Restart(0, 1, 2)
	for i, b := range c.Brokers() {
		if r := b.ProvisionReport(); r.Changed() {
			t.Errorf("node %d changed the bucket on restart: %q", i, r)
		}
	}
	waitStreamCurrent(t, ctx, js, 3)
	var rev uint64
	waitFor(t, 30*time.Second, "a write after the restart", func() bool {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		rev, err = kv.Create(wctx, "other", []byte("node-2"))
		return err == nil
	})
	if rev != last+1 {
		t.Errorf("first revision after the restart %d, want %d", rev, last+1)
	}
	if e, err := kv.Get(ctx, "app"); err != nil || e.Revision() != last {
		t.Errorf("after the restart: %v, %v; want revision %d", e, err, last)
	}
}
