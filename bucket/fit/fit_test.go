package fit_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/bucket/fit"
)

// good is a stream configured as a Conclave broker provisions the bucket.
func good() jetstream.StreamConfig {
	return jetstream.StreamConfig{MaxAge: time.Minute, MaxMsgsPerSubject: 1, MaxMsgSize: 1024, Storage: jetstream.FileStorage, Replicas: 3}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*jetstream.StreamConfig)
		use     fit.Use
		kinds   []fit.Kind
		refused []fit.Kind
		says    string
	}{
		{name: "fit", use: fit.Use{Identity: "host-1", Clustered: true}},
		{name: "no TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = 0 }, kinds: []fit.Kind{fit.NoTTL}, refused: []fit.Kind{fit.NoTTL}, says: "never expires"},
		{name: "short TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = 999 * time.Millisecond }, kinds: []fit.Kind{fit.ShortTTL}, refused: []fit.Kind{fit.ShortTTL}, says: "TTL 999ms is below 1s, the minimum"},
		{name: "TTL of the minimum", change: func(c *jetstream.StreamConfig) { c.MaxAge = time.Second }},
		{name: "TTL of an hour", change: func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }},
		{name: "long TTL", change: func(c *jetstream.StreamConfig) { c.MaxAge = 2 * time.Hour }, kinds: []fit.Kind{fit.LongTTL}, says: "TTL 2h0m0s is over 1h0m0s"},
		{name: "history", change: func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 }, kinds: []fit.Kind{fit.History}, refused: []fit.Kind{fit.History}, says: "keeps 5 values per key"},
		{name: "unlimited history", change: func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = -1 }, kinds: []fit.Kind{fit.History}, refused: []fit.Kind{fit.History}, says: "history is -1"},
		{name: "limit markers", change: func(c *jetstream.StreamConfig) { c.SubjectDeleteMarkerTTL = time.Second }, kinds: []fit.Kind{fit.LimitMarkers}, refused: []fit.Kind{fit.LimitMarkers}, says: "limit markers are on (kept 1s)"},
		{name: "identity too long", change: func(c *jetstream.StreamConfig) { c.MaxMsgSize = 4 }, use: fit.Use{Identity: "host-1"}, kinds: []fit.Kind{fit.ValueSize}, refused: []fit.Kind{fit.ValueSize}, says: "at most 4 bytes"},
		{name: "small values without an identity", change: func(c *jetstream.StreamConfig) { c.MaxMsgSize = 4 }},
		{name: "memory", change: func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, kinds: []fit.Kind{fit.MemoryStorage}, says: "fencing tokens repeat"},
		{name: "one replica on a cluster", change: func(c *jetstream.StreamConfig) { c.Replicas = 1 }, use: fit.Use{Clustered: true}, kinds: []fit.Kind{fit.OneReplica}, says: "1 replica on a cluster"},
		{name: "one replica on one server", change: func(c *jetstream.StreamConfig) { c.Replicas = 1 }},
		{name: "everything at once", change: func(c *jetstream.StreamConfig) {
			*c = jetstream.StreamConfig{MaxMsgsPerSubject: 10, SubjectDeleteMarkerTTL: time.Minute, MaxMsgSize: 2, Storage: jetstream.MemoryStorage, Replicas: 1}
		}, use: fit.Use{Identity: "abc", Clustered: true},
			kinds:   []fit.Kind{fit.NoTTL, fit.History, fit.LimitMarkers, fit.ValueSize, fit.MemoryStorage, fit.OneReplica},
			refused: []fit.Kind{fit.NoTTL, fit.History, fit.LimitMarkers, fit.ValueSize}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			if tc.change != nil {
				tc.change(&cfg)
			}
			problems := fit.Check(cfg, tc.use)
			var kinds, refused []fit.Kind
			for _, p := range problems {
				kinds = append(kinds, p.Kind)
				if p.Refused {
					refused = append(refused, p.Kind)
				}
				if p.Error() != p.Text || p.Text == "" {
					t.Errorf("problem %v: Error %q, Text %q", p.Kind, p.Error(), p.Text)
				}
			}
			if !slices.Equal(kinds, tc.kinds) {
				t.Fatalf("kinds %v, want %v", kinds, tc.kinds)
			}
			if !slices.Equal(refused, tc.refused) {
				t.Errorf("refused %v, want %v", refused, tc.refused)
			}
			if got := fit.Refused(problems); len(got) != len(tc.refused) {
				t.Errorf("Refused returned %d problems, want %d", len(got), len(tc.refused))
			}
			if tc.says != "" && !strings.Contains(problems[0].Text, tc.says) {
				t.Errorf("problem says %q, want it to say %q", problems[0].Text, tc.says)
			}
		})
	}
}

func TestKindNamesTheSetting(t *testing.T) {
	for k, want := range map[fit.Kind]string{fit.NoTTL: "TTL", fit.ShortTTL: "TTL", fit.LongTTL: "TTL", fit.History: "history",
		fit.LimitMarkers: "limit markers", fit.ValueSize: "max value size", fit.MemoryStorage: "storage", fit.OneReplica: "replicas", fit.Kind(0): "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d) = %q, want %q", int(k), got, want)
		}
	}
}
