package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
)

// infoJSONOf runs info --json on bucket and decodes it.
func infoJSONOf(t *testing.T, url, bucket string) infoOutput {
	t.Helper()
	r := conclave(t, "--server", url, "election", "info", "--bucket", bucket, "--json")
	mustSucceed(t, r)
	var out infoOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	return out
}

// addConsumers creates n consumers with filters of their own on bucket's
// stream and deletes them when the test ends.
func addConsumers(t *testing.T, js jetstream.JetStream, bucket string, n int) {
	t.Helper()
	// Each consumer is a synced write on the broker's disk: 900 took over
	// 30 s on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(t.Context(), 4*eventTimeout)
	defer cancel()
	names := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := js.CreateConsumer(ctx, "KV_"+bucket, jetstream.ConsumerConfig{
				FilterSubject: fmt.Sprintf("$KV.%s.key-%d", bucket, i), AckPolicy: jetstream.AckNonePolicy,
				// An ephemeral consumer nobody pulls from is deleted after
				// 5s by default: on a busy machine the first would be gone
				// before the last is made.
				InactiveThreshold: time.Hour,
			})
			if err != nil {
				errs[i] = err
				return
			}
			names[i] = c.CachedInfo().Name
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
		defer cancel()
		for _, name := range names {
			if name != "" {
				_ = js.DeleteConsumer(ctx, "KV_"+bucket, name)
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
	}
}

// TestInfoConsumersOnBroker: on a broker as provisioned, info shows the
// consumers in use against the stream's limit of 1000000, and per-key TTL
// on.
func TestInfoConsumersOnBroker(t *testing.T) {
	t.Parallel()
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)
	addConsumers(t, js, bucket.Name, 3)

	r := conclave(t, "--server", url, "election", "info")
	mustSucceed(t, r)
	mustContain(t, "info", r.stdout, "Consumers:", "3 of 1000000 (the stream's limit)", "Per-key TTL:", "No problems found")
	if !regexp.MustCompile(`Per-key TTL:\s+on\n`).MatchString(r.stdout) {
		t.Errorf("per-key TTL not on:\n%s", r.stdout)
	}

	out := infoJSONOf(t, url, bucket.Name)
	b := out.Bucket
	if b.Consumers != 3 || b.MaxConsumers != broker.DefaultMaxConsumers || b.MaxConsumersSource != "stream" || b.MaxConsumersAssumed || !b.PerKeyTTL {
		t.Errorf("bucket is %+v, want 3 consumers of the stream's 1000000 and per-key TTL on", b)
	}
	if len(out.Warnings) != 0 {
		t.Errorf("warnings %q", out.Warnings)
	}
}

// TestInfoWarnsNearConsumerLimit: within 10% of the limit info warns and
// says how to raise it; the way it gives works.
func TestInfoWarnsNearConsumerLimit(t *testing.T) {
	// Not parallel: making 900 consumers keeps the test's broker busy for
	// seconds, and must end within eventTimeout.
	url := startBroker(t, time.Minute)
	js := jetStream(t, url)

	t.Run("stream limit", func(t *testing.T) {
		if _, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "NEAR", TTL: time.Minute, History: 1}); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(testCtx(t), "KV_NEAR")
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.MaxConsumers = 10
		if _, err := js.UpdateStream(testCtx(t), cfg); err != nil {
			t.Fatal(err)
		}
		addConsumers(t, js, "NEAR", 8)
		if out := infoJSONOf(t, url, "NEAR"); len(out.Warnings) != 0 {
			t.Errorf("8 of 10: warnings %q, want none", out.Warnings)
		}
		addConsumers(t, js, "NEAR", 1)
		r := conclave(t, "--server", url, "election", "info", "--bucket", "NEAR")
		mustSucceed(t, r)
		mustContain(t, "info", r.stdout, "Consumers:", "9 of 10 (the stream's limit)", "WARNINGS:",
			"9 consumers in use of a limit of 10 (the stream's limit)", "nats stream edit KV_NEAR --max-consumers N`")
		out := infoJSONOf(t, url, "NEAR")
		if b := out.Bucket; b.Consumers != 9 || b.MaxConsumers != 10 || b.MaxConsumersSource != "stream" {
			t.Errorf("bucket is %+v", b)
		}
		if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "9 consumers in use") {
			t.Errorf("warnings %q", out.Warnings)
		}

		// Raised (as `nats stream edit` does), the warning goes.
		cfg.MaxConsumers = 100
		if _, err := js.UpdateStream(testCtx(t), cfg); err != nil {
			t.Fatal(err)
		}
		out = infoJSONOf(t, url, "NEAR")
		if out.Bucket.MaxConsumers != 100 || len(out.Warnings) != 0 {
			t.Errorf("after raising the limit: %+v, warnings %q", out.Bucket, out.Warnings)
		}
	})

	t.Run("server default", func(t *testing.T) {
		// A bucket as the KV API makes it sets no limit: nats-server's
		// default of 1000 applies, which the client cannot read, so it is
		// shown as assumed.
		if _, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "STOCK", TTL: time.Minute, History: 1}); err != nil {
			t.Fatal(err)
		}
		out := infoJSONOf(t, url, "STOCK")
		if b := out.Bucket; b.Consumers != 0 || b.MaxConsumers != 1000 || b.MaxConsumersSource != "server" || !b.MaxConsumersAssumed {
			t.Errorf("bucket is %+v, want 0 of the server's assumed 1000", b)
		}
		addConsumers(t, js, "STOCK", 900)
		r := conclave(t, "--server", url, "election", "info", "--bucket", "STOCK")
		mustSucceed(t, r)
		mustContain(t, "info", r.stdout, "900 of 1000 (the server's default, assumed)", "WARNINGS:",
			"nats stream edit KV_STOCK --max-consumers 1000000`", "jetstream { limits { default_max_consumers: -1 } }")
	})
}

// TestInfoConsumersAccountLimit: on a NATS server whose account limits
// consumers per stream, info shows the account's limit.
func TestInfoConsumersAccountLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	err := os.WriteFile(conf, fmt.Appendf(nil, `
jetstream { store_dir: %q }
accounts {
  APP {
    jetstream { max_consumers: 10, max_memory: -1, max_file: -1, max_streams: -1 }
    users [ { user: app, password: app } ]
  }
}
no_auth_user: app
`, filepath.Join(dir, "store")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	url := plainServer(t, true, func(o *server.Options) {
		parsed.Host, parsed.Port = o.Host, o.Port
		parsed.NoLog, parsed.NoSigs, parsed.DisableJetStreamBanner = true, true, true
		*o = *parsed
	})
	js := jetStream(t, url)
	if _, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: time.Minute, History: 1}); err != nil {
		t.Fatal(err)
	}
	addConsumers(t, js, bucket.Name, 9)
	r := conclave(t, "--server", url, "election", "info")
	mustSucceed(t, r)
	mustContain(t, "info", r.stdout, "9 of 10 (the account's limit)", "WARNINGS:", "the account's JetStream limit applies")
	out := infoJSONOf(t, url, bucket.Name)
	if b := out.Bucket; b.MaxConsumers != 10 || b.MaxConsumersSource != "account" || b.MaxConsumersAssumed {
		t.Errorf("bucket is %+v", b)
	}
}
