package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

// stockCap is nats-server's default consumer limit per stream, which the
// docs quote.
const stockCap = 1000

// consumerWorkers is how many goroutines create consumers at once.
const consumerWorkers = 16

// createConsumers creates n ephemeral consumers on the election stream, each
// with a filter subject of its own (a key, as a single-key watch has), in
// parallel, and returns their names and the first error.
func createConsumers(ctx context.Context, js jetstream.JetStream, prefix string, n int) ([]string, error) {
	names := make([]string, n)
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for range consumerWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := js.CreateConsumer(ctx, bucket.Stream, jetstream.ConsumerConfig{
					FilterSubject:     fmt.Sprintf("$KV.%s.%s-%d", bucket.Name, prefix, i),
					AckPolicy:         jetstream.AckNonePolicy,
					InactiveThreshold: time.Minute,
				})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("consumer %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				names[i] = c.CachedInfo().Name
			}
		})
	}
	wg.Wait()
	return names, firstErr
}

// deleteConsumers deletes the named consumers, in parallel.
func deleteConsumers(t *testing.T, ctx context.Context, js jetstream.JetStream, names []string) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	for range consumerWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) {
					return
				}
				if names[i] == "" {
					continue
				}
				if err := js.DeleteConsumer(ctx, bucket.Stream, names[i]); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d consumers could not be deleted", n)
	}
}

// streamConsumers returns the number of consumers on the election stream.
func streamConsumers(t *testing.T, ctx context.Context, js jetstream.JetStream) int {
	t.Helper()
	st, err := js.Stream(ctx, bucket.Stream)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return st.CachedInfo().State.Consumers
}

// TestBrokerAcceptsMoreThanStockConsumerCap: on a broker as provisioned,
// the election stream takes more consumers than nats-server's default cap
// of 1,000, and the broker reports its limit.
func TestBrokerAcceptsMoreThanStockConsumerCap(t *testing.T) {
	cfg := brokertest.Config(t, "many-consumers")
	log, hook := hookedLogger(logrus.InfoLevel)
	b, err := broker.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := testContext(t, 60*time.Second)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Shutdown)

	want := broker.ConsumerLimit{Max: broker.DefaultMaxConsumers, Source: broker.LimitStream}
	if got := b.ProvisionReport().Consumers; got != want {
		t.Errorf("ProvisionReport().Consumers = %+v, want %+v", got, want)
	}
	if !hasMessagePrefix(hook, "Broker many-consumers ready: election bucket created, max consumers server default → 1000000, per-key TTL off → on; consumers limit 1000000 (the stream's limit)") {
		t.Error("the start-up line does not give the consumers limit")
	}

	js := connect(t, b.ClientURL())
	const n = stockCap + 50
	start := time.Now()
	names, err := createConsumers(ctx, js, "k", n)
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		deleteConsumers(t, dctx, js, names)
	})
	if err != nil {
		t.Fatalf("creating %d consumers: %v", n, err)
	}
	t.Logf("created %d consumers in %v", n, time.Since(start))
	if got := streamConsumers(t, ctx, js); got != n {
		t.Fatalf("the stream has %d consumers, want %d", got, n)
	}
	deleteConsumers(t, ctx, js, names)
	names = nil
	if got := streamConsumers(t, ctx, js); got != 0 {
		t.Errorf("%d consumers left after deleting them", got)
	}
}

// TestStockServerCapsKVBucketConsumers pins nats-server's default, which the
// docs quote: on a plain server, a bucket as the KV API creates it (stream
// MaxConsumers -1) refuses consumer 1,001.
func TestStockServerCapsKVBucketConsumers(t *testing.T) {
	if server.JSDefaultMaxConsumersPerStream != stockCap {
		t.Fatalf("nats-server's default is %d consumers per stream; the docs say %d", server.JSDefaultMaxConsumersPerStream, stockCap)
	}
	srv := plainServer(t)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 60*time.Second)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute}); err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	if c := streamConfig(t, ctx, js, bucket.Stream); c.MaxConsumers != -1 {
		t.Fatalf("CreateKeyValue set MaxConsumers %d, want -1", c.MaxConsumers)
	}
	start := time.Now()
	names, err := createConsumers(ctx, js, "k", stockCap)
	t.Logf("created %d consumers in %v", stockCap, time.Since(start))
	t.Cleanup(func() {
		start := time.Now()
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		deleteConsumers(t, dctx, js, names)
		t.Logf("deleted in %v", time.Since(start))
	})
	if err != nil {
		t.Fatalf("creating %d consumers: %v", stockCap, err)
	}
	_, err = createConsumers(ctx, js, "over", 1)
	if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) || !strings.Contains(err.Error(), "maximum consumers limit reached") {
		t.Fatalf("consumer %d: %v, want maximum consumers limit reached", stockCap+1, err)
	}

	// What EffectiveConsumerLimit says of it, knowing the server's default
	// or not.
	st, err := js.Stream(ctx, bucket.Stream)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := js.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := broker.EffectiveConsumerLimit(st.CachedInfo().Config, acct, 0); got.Max != stockCap || !got.Assumed || got.Source != broker.LimitServer {
		t.Errorf("EffectiveConsumerLimit = %+v, want the assumed server default of %d", got, stockCap)
	}
}

// TestProvisionConsumerLimit: provisioning raises an unset or lower stream
// limit, keeps a higher one, and stops at an account's lower limit.
func TestProvisionConsumerLimit(t *testing.T) {
	cases := []struct {
		name     string
		existing int // the stream's MaxConsumers before
		change   string
		after    int
	}{
		{"unset", -1, "max consumers server default → 1000000", broker.DefaultMaxConsumers},
		{"lower", 5000, "max consumers 5000 → 1000000", broker.DefaultMaxConsumers},
		{"higher", 2_000_000, "", 2_000_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := plainServer(t)
			js := connect(t, srv.ClientURL())
			ctx := testContext(t, 30*time.Second)
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, MaxValueSize: broker.DefaultMaxValueSize}); err != nil {
				t.Fatalf("CreateKeyValue: %v", err)
			}
			c := streamConfig(t, ctx, js, bucket.Stream)
			c.MaxConsumers = tc.existing
			if _, err := js.UpdateStream(ctx, c); err != nil {
				t.Fatalf("UpdateStream: %v", err)
			}
			report, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1}, nil)
			if err != nil {
				t.Fatalf("ProvisionElectionBucket: %v", err)
			}
			if report.String() != orUnchanged(tc.change) {
				t.Errorf("report %q, want %q", report, orUnchanged(tc.change))
			}
			if got := streamConfig(t, ctx, js, bucket.Stream).MaxConsumers; got != tc.after {
				t.Errorf("MaxConsumers %d, want %d", got, tc.after)
			}
			if want := (broker.ConsumerLimit{Max: tc.after, Source: broker.LimitStream}); report.Consumers != want {
				t.Errorf("report.Consumers %+v, want %+v", report.Consumers, want)
			}
		})
	}
}

func orUnchanged(s string) string {
	if s == "" {
		return "unchanged"
	}
	return s
}

// TestProvisionConsumerLimitUnderAccountLimit: on a server whose account
// allows fewer consumers per stream than DefaultMaxConsumers, the stream
// gets the account's limit (the server refuses a higher one), the report
// says so, and that is the limit enforced.
func TestProvisionConsumerLimitUnderAccountLimit(t *testing.T) {
	const accountMax = 20
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
accounts {
  APP {
    jetstream { max_consumers: %d, max_memory: -1, max_file: -1, max_streams: -1 }
    users [ { user: app, password: app } ]
  }
}
no_auth_user: app
`, filepath.Join(dir, "store"), accountMax), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("server config: %v", err)
	}
	srv := natstest.Start(t, opts)

	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 30*time.Second)
	report, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1, PerKeyTTL: true}, nil)
	if err != nil {
		t.Fatalf("ProvisionElectionBucket: %v", err)
	}
	if want := "created, max consumers server default → 20, per-key TTL off → on"; report.String() != want {
		t.Errorf("report %q, want %q", report, want)
	}
	if report.Consumers.Max != accountMax {
		t.Errorf("report.Consumers %+v, want %d", report.Consumers, accountMax)
	}
	if _, err := createConsumers(ctx, js, "k", accountMax); err != nil {
		t.Fatalf("creating %d consumers: %v", accountMax, err)
	}
	if _, err := createConsumers(ctx, js, "over", 1); !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Fatalf("consumer %d: %v, want maximum consumers limit reached", accountMax+1, err)
	}
	again, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: time.Minute, Replicas: 1, PerKeyTTL: true}, nil)
	if err != nil || again.Changed() {
		t.Errorf("provisioning again: %q, %v; want unchanged", again, err)
	}
	// The server refuses a stream limit above the account's.
	c := streamConfig(t, ctx, js, bucket.Stream)
	c.MaxConsumers = broker.DefaultMaxConsumers
	if _, err := js.UpdateStream(ctx, c); !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Errorf("stream limit above the account's: %v, want maximum consumers limit reached", err)
	}
}

func TestEffectiveConsumerLimit(t *testing.T) {
	acct := func(max int) *jetstream.AccountInfo {
		return &jetstream.AccountInfo{Tier: jetstream.Tier{Limits: jetstream.AccountLimits{MaxConsumers: max}}}
	}
	tiered := &jetstream.AccountInfo{Tiers: map[string]jetstream.Tier{
		"R1": {Limits: jetstream.AccountLimits{MaxConsumers: 100}},
		"R3": {Limits: jetstream.AccountLimits{MaxConsumers: 300}},
	}}
	cases := []struct {
		name          string
		stream        int
		replicas      int
		account       *jetstream.AccountInfo
		serverDefault int
		want          broker.ConsumerLimit
		text          string
	}{
		{"stream", 5000, 1, acct(-1), 0, broker.ConsumerLimit{Max: 5000, Source: broker.LimitStream}, "5000 (the stream's limit)"},
		{"stream under account", 50, 1, acct(80), 0, broker.ConsumerLimit{Max: 50, Source: broker.LimitStream}, "50 (the stream's limit)"},
		{"account under stream", 5000, 1, acct(80), 0, broker.ConsumerLimit{Max: 80, Source: broker.LimitAccount}, "80 (the account's limit)"},
		{"account only", -1, 1, acct(80), 0, broker.ConsumerLimit{Max: 80, Source: broker.LimitAccount}, "80 (the account's limit)"},
		{"tier R3", -1, 3, tiered, 0, broker.ConsumerLimit{Max: 300, Source: broker.LimitAccount}, "300 (the account's limit)"},
		{"tier R1", -1, 1, tiered, 0, broker.ConsumerLimit{Max: 100, Source: broker.LimitAccount}, "100 (the account's limit)"},
		{"server default unknown", -1, 1, acct(-1), 0, broker.ConsumerLimit{Max: 1000, Source: broker.LimitServer, Assumed: true}, "1000 (the server's default, assumed)"},
		{"account unknown", -1, 1, nil, 0, broker.ConsumerLimit{Max: 1000, Source: broker.LimitServer, Assumed: true}, "1000 (the server's default, assumed)"},
		{"server default known", -1, 1, acct(-1), 4000, broker.ConsumerLimit{Max: 4000, Source: broker.LimitServer}, "4000 (the server's default)"},
		{"server unlimited", -1, 1, acct(-1), -1, broker.ConsumerLimit{Max: -1, Source: broker.LimitServer}, "unlimited (the server sets no default)"},
	}
	for _, tc := range cases {
		got := broker.EffectiveConsumerLimit(jetstream.StreamConfig{MaxConsumers: tc.stream, Replicas: tc.replicas}, tc.account, tc.serverDefault)
		if got != tc.want || got.String() != tc.text {
			t.Errorf("%s: %+v %q, want %+v %q", tc.name, got, got, tc.want, tc.text)
		}
	}
}

// TestBrokerTurnsOnPerKeyTTL: the broker provisions the bucket with
// per-message TTLs on, whether it creates the bucket or finds one without
// them, and a key written with a TTL of its own expires by it.
func TestBrokerTurnsOnPerKeyTTL(t *testing.T) {
	// An existing bucket, as the KV API creates it, in the broker's store.
	cfg := brokertest.Config(t, "per-key-ttl")
	srv := storeServer(t, cfg.StreamStore)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 60*time.Second)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	b, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !b.BucketSpec().PerKeyTTL {
		t.Error("the broker's bucket spec leaves per-key TTL off")
	}
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Shutdown)
	report := b.ProvisionReport()
	if report.Created || !strings.Contains(report.String(), "per-key TTL off → on") || !report.Config.AllowMsgTTL {
		t.Errorf("report %q, AllowMsgTTL %v; want per-key TTL turned on", report, report.Config.AllowMsgTTL)
	}
	if report.Config.SubjectDeleteMarkerTTL != 0 {
		t.Errorf("limit markers on (%v)", report.Config.SubjectDeleteMarkerTTL)
	}

	// A freshly created bucket has them too (see also
	// TestBrokerAcceptsMoreThanStockConsumerCap's start-up line).
	fresh := brokertest.StartSingle(t, nil)
	js = connect(t, fresh.ClientURL())
	if c := streamConfig(t, ctx, js, bucket.Stream); !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != 0 {
		t.Errorf("created bucket: AllowMsgTTL %v, SubjectDeleteMarkerTTL %v; want true and 0", c.AllowMsgTTL, c.SubjectDeleteMarkerTTL)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	written := time.Now()
	if _, err := kv.Create(ctx, "short", []byte("n1"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatalf("Create with a per-key TTL: %v", err)
	}
	waitFor(t, 10*time.Second, "the key to expire by its own TTL", func() bool {
		_, err := kv.Get(ctx, "short")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	// Gone within the wait, long before the bucket's TTL of 1m.
	if d := time.Since(written); d < time.Second {
		t.Errorf("the key went after %v, before its TTL of 1s", d)
	}
	// And it can be taken again, as after any expiry.
	if _, err := kv.Create(ctx, "short", []byte("n2")); err != nil {
		t.Errorf("Create after the expiry: %v", err)
	}
}

// TestServerOptionLiftsStockCap backs the docs' advice for a NATS server
// Conclave does not run: with jetstream { limits { default_max_consumers:
// -1 } } in the server's configuration, a bucket as the KV API creates it
// takes more than 1,000 consumers.
func TestServerOptionLiftsStockCap(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	err := os.WriteFile(conf, fmt.Appendf(nil, `
listen: "127.0.0.1:-1"
jetstream {
  store_dir: %q
  limits { default_max_consumers: -1 }
}
`, filepath.Join(dir, "store")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("server config: %v", err)
	}
	if opts.JetStreamLimits.DefaultMaxConsumers != -1 {
		t.Fatalf("JetStreamLimits.DefaultMaxConsumers = %d, want -1", opts.JetStreamLimits.DefaultMaxConsumers)
	}
	srv := natstest.Start(t, opts)
	js := connect(t, srv.ClientURL())
	ctx := testContext(t, 60*time.Second)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute}); err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	const n = stockCap + 10
	names, err := createConsumers(ctx, js, "k", n)
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		deleteConsumers(t, dctx, js, names)
	})
	if err != nil {
		t.Fatalf("creating %d consumers: %v", n, err)
	}
}
