package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/conclave-io/conclave/metrics"
	"github.com/conclave-io/conclave/shards"
)

// TestShardMetricsFollowAGroup: a member's held gauge follows its shards,
// and its takeovers are counted by cause.
func TestShardMetricsFollowAGroup(t *testing.T) {
	_, js, _ := bucket(t, 2*time.Second)
	reg := prometheus.NewRegistry()
	rec, err := metrics.NewShards(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := shards.NewGroup("m1", "metered", 3, js, shards.WithRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	value := func(name string, labels map[string]string) float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				if matches(m, labels) {
					if m.GetGauge() != nil {
						return m.GetGauge().GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	waitUntil(t, "3 shards held", func() bool {
		return value("conclave_shards_held", map[string]string{"group": "metered", "member": "m1"}) == 3
	})
	if v := value("conclave_shards_moves_total", map[string]string{"group": "metered", "cause": "takeover"}); v != 3 {
		t.Errorf("takeovers = %v, want 3", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := value("conclave_shards_held", map[string]string{"group": "metered", "member": "m1"}); v != 0 {
		t.Errorf("held after stop = %v, want 0", v)
	}
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(labels)
}
