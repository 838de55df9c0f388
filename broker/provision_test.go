package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
)

func TestProvisionCreatesFreshBucket(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)

	spec := broker.BucketSpec{TTL: 45 * time.Second, Replicas: 1}
	report, err := broker.ProvisionElectionBucket(ctx, js, spec, nil)
	if err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	// Created as the KV API creates a bucket, then the consumer limit set.
	if want := "created, max consumers server default → 1000000"; !report.Created || report.String() != want {
		t.Fatalf("report = %q, want %q", report, want)
	}
	if want := (broker.ConsumerLimit{Max: broker.DefaultMaxConsumers, Source: broker.LimitStream}); report.Consumers != want {
		t.Errorf("report.Consumers = %+v, want %+v", report.Consumers, want)
	}

	c := streamConfig(t, ctx, js, bucket.Stream)
	checks := []struct {
		name      string
		got, want any
	}{
		{"MaxAge", c.MaxAge, 45 * time.Second},
		{"MaxMsgsPerSubject", c.MaxMsgsPerSubject, int64(1)},
		{"Replicas", c.Replicas, 1},
		{"Storage", c.Storage, jetstream.FileStorage},
		{"MaxMsgSize", c.MaxMsgSize, int32(broker.DefaultMaxValueSize)},
		{"SubjectDeleteMarkerTTL", c.SubjectDeleteMarkerTTL, time.Duration(0)},
		{"AllowMsgTTL", c.AllowMsgTTL, false},
		{"MaxConsumers", c.MaxConsumers, broker.DefaultMaxConsumers},
		{"AllowDirect", c.AllowDirect, true},
		{"DenyDelete", c.DenyDelete, true},
		{"AllowRollup", c.AllowRollup, true},
		{"Duplicates", c.Duplicates, 45 * time.Second},
		{"Subjects", strings.Join(c.Subjects, ","), "$KV." + bucket.Name + ".>"},
		{"report.Config.MaxAge", report.Config.MaxAge, 45 * time.Second},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	// It is a KV bucket with the wanted shape, as KV clients see it.
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if status.History() != 1 || status.TTL() != 45*time.Second {
		t.Errorf("KV status: history %d TTL %v, want 1 and 45s", status.History(), status.TTL())
	}
	rev, err := kv.Create(ctx, "app", []byte("node-1.example.net"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := kv.Update(ctx, "app", make([]byte, 900), rev); err != nil {
		t.Fatalf("Update with a 900 byte value: %v", err)
	}
	if _, err := kv.Create(ctx, "big", make([]byte, broker.DefaultMaxValueSize+1)); err == nil {
		t.Error("Create of a value over the max value size succeeded")
	}
}

func TestProvisionUpdatesExistingBucket(t *testing.T) {
	cases := []struct {
		name     string
		existing jetstream.KeyValueConfig
		spec     broker.BucketSpec
		want     []string // the report's changes
	}{
		{
			name:     "other TTL",
			existing: jetstream.KeyValueConfig{TTL: time.Minute, MaxValueSize: broker.DefaultMaxValueSize},
			spec:     broker.BucketSpec{TTL: 30 * time.Second, Replicas: 1},
			want:     []string{"TTL 1m0s → 30s", "max consumers server default → 1000000", "duplicate window 1m0s → 30s"},
		},
		{
			name:     "longer TTL",
			existing: jetstream.KeyValueConfig{TTL: 10 * time.Second, MaxValueSize: broker.DefaultMaxValueSize},
			spec:     broker.BucketSpec{TTL: 5 * time.Minute, Replicas: 1},
			want:     []string{"TTL 10s → 5m0s", "max consumers server default → 1000000", "duplicate window 10s → 2m0s"},
		},
		{
			name:     "as Choria creates it",
			existing: jetstream.KeyValueConfig{TTL: time.Minute},
			spec:     broker.BucketSpec{TTL: time.Minute, Replicas: 1},
			want:     []string{"max value size unlimited → 1024 B", "max consumers server default → 1000000"},
		},
		{
			name:     "history and limit markers",
			existing: jetstream.KeyValueConfig{TTL: time.Minute, History: 5, LimitMarkerTTL: 5 * time.Second, MaxValueSize: 4096},
			spec:     broker.BucketSpec{TTL: time.Minute, Replicas: 1},
			want:     []string{"history 5 → 1", "max value size 4096 B → 1024 B", "max consumers server default → 1000000", "limit marker TTL 5s → off"},
		},
		{
			name:     "per-key TTL wanted",
			existing: jetstream.KeyValueConfig{TTL: time.Minute, MaxValueSize: broker.DefaultMaxValueSize},
			spec:     broker.BucketSpec{TTL: time.Minute, Replicas: 1, PerKeyTTL: true},
			want:     []string{"max consumers server default → 1000000", "per-key TTL off → on"},
		},
		{
			name:     "rollups denied",
			existing: jetstream.KeyValueConfig{TTL: time.Minute, MaxValueSize: broker.DefaultMaxValueSize},
			spec:     broker.BucketSpec{TTL: time.Minute, Replicas: 1, DenyRollup: true},
			want:     []string{"max consumers server default → 1000000", "rollup on → off"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := plainServer(t)
			js := connect(t, srv.ClientURL())
			ctx := testContext(t, 30*time.Second)
			tc.existing.Bucket = bucket.Name
			tc.existing.Storage = jetstream.FileStorage
			if _, err := js.CreateKeyValue(ctx, tc.existing); err != nil {
				t.Fatalf("creating the existing bucket: %v", err)
			}

			log, hook := hookedLogger(logrus.InfoLevel)
			report, err := broker.ProvisionElectionBucket(ctx, js, tc.spec, log)
			if err != nil {
				t.Fatalf("ProvisionElectionBucket: %v", err)
			}
			var got []string
			for _, c := range report.Changes {
				got = append(got, c.String())
			}
			if report.Created || !slices.Equal(got, tc.want) {
				t.Fatalf("report: created %v, changes %q; want changes %q", report.Created, got, tc.want)
			}
			for _, w := range tc.want {
				if !hasMessage(hook, logrus.InfoLevel, "Election bucket "+bucket.Name+": "+w) {
					t.Errorf("no info log line for %q", w)
				}
			}

			c := streamConfig(t, ctx, js, bucket.Stream)
			if c.MaxAge != tc.spec.TTL || c.MaxMsgsPerSubject != 1 || c.MaxMsgSize != broker.DefaultMaxValueSize || c.SubjectDeleteMarkerTTL != 0 {
				t.Errorf("after provisioning: MaxAge %v, MaxMsgsPerSubject %d, MaxMsgSize %d, SubjectDeleteMarkerTTL %v",
					c.MaxAge, c.MaxMsgsPerSubject, c.MaxMsgSize, c.SubjectDeleteMarkerTTL)
			}
			if tc.spec.PerKeyTTL && !c.AllowMsgTTL {
				t.Error("per-key TTL is still off")
			}

			// Provisioning again changes nothing.
			again, err := broker.ProvisionElectionBucket(ctx, js, tc.spec, nil)
			if err != nil {
				t.Fatalf("provisioning again: %v", err)
			}
			if again.Changed() || again.String() != "unchanged" {
				t.Fatalf("provisioning again: %q, want unchanged", again)
			}
		})
	}
}

func TestProvisionTurnsRollupsOffAndOn(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)

	denied := broker.BucketSpec{TTL: time.Minute, Replicas: 1, DenyRollup: true}
	report, err := broker.ProvisionElectionBucket(ctx, js, denied, nil)
	if err != nil {
		t.Fatalf("creating with rollups denied: %v", err)
	}
	// Created without rollups, not created with them and then changed.
	if report.Config.AllowRollup || slices.ContainsFunc(report.Changes, func(c broker.SettingChange) bool { return c.Setting == "rollup" }) {
		t.Fatalf("created: %q, AllowRollup %v", report, report.Config.AllowRollup)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"app", "other"} {
		if _, err := kv.Create(ctx, k, []byte("leader")); err != nil {
			t.Fatalf("Create %s: %v", k, err)
		}
	}
	// Delete, what releasing an election does, still works.
	if err := kv.Delete(ctx, "app"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// A KV Purge is a rollup: refused, and the other key survives.
	if err := kv.Purge(ctx, "app"); err == nil || !strings.Contains(err.Error(), "rollup not permitted") {
		t.Fatalf("Purge: %v, want rollup not permitted", err)
	}
	if e, err := kv.Get(ctx, "other"); err != nil || string(e.Value()) != "leader" {
		t.Fatalf("other key after the refused rollup: %v, %v", e, err)
	}

	allowed := denied
	allowed.DenyRollup = false
	report, err = broker.ProvisionElectionBucket(ctx, js, allowed, nil)
	if err != nil || report.String() != "rollup off → on" || !report.Config.AllowRollup {
		t.Fatalf("allowing rollups again: %q, %v", report, err)
	}
}

func TestProvisionKeepsWhatItDoesNotManage(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket.Name, TTL: 2 * time.Minute, Description: "ours", Metadata: map[string]string{"team": "infra"},
		Compression: true, LimitMarkerTTL: time.Second,
	})
	if err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	if _, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil); err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	c := streamConfig(t, ctx, js, bucket.Stream)
	if c.Description != "ours" || c.Metadata["team"] != "infra" || c.Compression != jetstream.S2Compression {
		t.Errorf("unmanaged settings lost: description %q, metadata %v, compression %v", c.Description, c.Metadata, c.Compression)
	}
	// The server cannot turn per-message TTLs off again; the limit markers,
	// which break Choria's clients, are off.
	if !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != 0 {
		t.Errorf("AllowMsgTTL %v, SubjectDeleteMarkerTTL %v; want true and 0", c.AllowMsgTTL, c.SubjectDeleteMarkerTTL)
	}
}

func TestProvisionFixesDeleteAndDirectSettings(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	// A hand-made stream of the KV shape without DenyDelete, AllowDirect
	// and rollups.
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: bucket.Stream, Subjects: []string{"$KV." + bucket.Name + ".>"},
		MaxAge: time.Minute, MaxMsgsPerSubject: 1, MaxMsgSize: broker.DefaultMaxValueSize, Duplicates: time.Minute,
		Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	report, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil)
	if err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	if want := "max consumers server default → 1000000, deny delete off → on, direct get off → on, rollup off → on"; report.String() != want {
		t.Fatalf("report %q, want %q", report, want)
	}
}

func TestProvisionRefusesWhatItCannotChange(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	_, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: 30 * time.Second, Replicas: 1}, nil)
	if !errors.Is(err, broker.ErrBucketMisconfigured) {
		t.Fatalf("err = %v, want ErrBucketMisconfigured", err)
	}
	for _, want := range []string{"storage is Memory", "nats kv del " + bucket.Name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Nothing was changed half-way.
	if c := streamConfig(t, ctx, js, bucket.Stream); c.MaxAge != time.Minute {
		t.Errorf("MaxAge changed to %v", c.MaxAge)
	}
}

func TestProvisionRejectsBadSpec(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	for _, spec := range []broker.BucketSpec{
		{TTL: 0, Replicas: 1},
		{TTL: 500 * time.Millisecond, Replicas: 1},
		{TTL: time.Minute, Replicas: 0},
		{TTL: time.Minute, Replicas: 6},
		{TTL: time.Minute, Replicas: 1, MaxValueSize: -1},
	} {
		if _, err := broker.ProvisionElectionBucket(ctx, js, spec, nil); !errors.Is(err, broker.ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", spec, err)
		}
	}
}

func TestProvisionTooManyReplicasOnOneServer(t *testing.T) {
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	_, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 3}, nil)
	if !errors.Is(err, broker.ErrNotEnoughServers) {
		t.Fatalf("err = %v, want ErrNotEnoughServers", err)
	}
	for _, want := range []string{"3 replicas", "1 server", "plugin.choria.network.stream.leader_election_replicas"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestProvisionConcurrently(t *testing.T) {
	srv := plainServer(t)
	ctx := testContext(t, 30*time.Second)
	spec := broker.BucketSpec{TTL: 20 * time.Second, Replicas: 1}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		js := connect(t, srv.ClientURL())
		wg.Go(func() {
			// Each try has a deadline of its own, as the broker's: a request
			// of the first moments may go unanswered on a loaded machine
			// (CI once saw an account-info request time out at 30 s), and
			// the errors are documented as ones a caller retries.
			for {
				try, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, errs[i] = broker.ProvisionElectionBucket(try, js, spec, nil)
				cancel()
				if errs[i] == nil || ctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("provisioner %d: %v", i, err)
		}
	}
	js := connect(t, srv.ClientURL())
	if c := streamConfig(t, ctx, js, bucket.Stream); c.MaxAge != spec.TTL || c.MaxMsgSize != broker.DefaultMaxValueSize {
		t.Errorf("MaxAge %v, MaxMsgSize %d", c.MaxAge, c.MaxMsgSize)
	}
}

func TestSettingChangeString(t *testing.T) {
	c := broker.SettingChange{Setting: "TTL", From: time.Minute.String(), To: (30 * time.Second).String()}
	if got := fmt.Sprint(c); got != "TTL 1m0s → 30s" {
		t.Fatalf("got %q", got)
	}
}
