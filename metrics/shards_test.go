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

// TestShardMetricsFollowAGroup: each member's held gauge follows its
// shards, copies under one identity in one process each with a series of
// their own (member = identity/instance) that goes once the member stops,
// and takeovers are counted by cause.
func TestShardMetricsFollowAGroup(t *testing.T) {
	_, js, _ := bucket(t, 2*time.Second)
	reg := prometheus.NewRegistry()
	rec, err := metrics.NewShards(reg)
	if err != nil {
		t.Fatal(err)
	}
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
	var groups []*shards.Group
	var cancels []context.CancelFunc
	var dones []chan error
	for range 2 {
		g, err := shards.NewGroup("m1", "metered", 4, js, shards.WithRecorder(rec))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Start(ctx) }()
		groups, cancels, dones = append(groups, g), append(cancels, cancel), append(dones, done)
	}
	held := func(g *shards.Group) float64 {
		return value("conclave_shards_held", map[string]string{"group": "metered", "member": g.Member()})
	}
	waitUntil(t, "2 shards held by each copy", func() bool {
		return held(groups[0]) == 2 && held(groups[1]) == 2
	})
	if v := value("conclave_shards_moves_total", map[string]string{"group": "metered", "cause": "takeover"}); v < 4 {
		t.Errorf("takeovers = %v, want at least the 4 free shards", v)
	}
	for i, g := range groups {
		cancels[i]()
		if err := <-dones[i]; err != nil {
			t.Fatal(err)
		}
		if v := held(g); v != -1 {
			t.Errorf("%s's series reads %v after it stopped, want it gone", g.Member(), v)
		}
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
