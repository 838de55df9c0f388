package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScaleSmoke runs the scale scenario in miniature: the conclave CLI
// built from this repository, one `conclave broker run`, three Choria
// candidate processes in 2 and then 4 elections at the shortest TTL Choria
// accepts.
func TestScaleSmoke(t *testing.T) {
	cfg := defaultScaleConfig()
	cfg.sizes, cfg.ttl, cfg.window, cfg.settle = []int{2, 4}, 4*time.Second, 3*time.Second, 500*time.Millisecond
	cfg.fill()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	res, err := runScale(context.Background(), cfg, t.Logf)
	if err != nil {
		t.Fatalf("runScale: %v", err)
	}
	t.Logf("took %v", time.Since(started).Round(time.Millisecond))
	md := res.markdown()
	t.Log("\n" + md)
	if len(res.rows) != 2 {
		t.Fatalf("%d rows, want 2", len(res.rows))
	}
	for _, r := range res.rows {
		if !r.sustained {
			t.Errorf("%d elections not sustained: %s", r.elections, r.reason)
		}
		if r.allLed <= 0 || r.allLed > cfg.deadline {
			t.Errorf("%d elections: all led after %v, want within %v", r.elections, r.allLed, cfg.deadline)
		}
		if r.msgsIn <= 0 || r.msgsOut <= 0 || r.brokerRSS <= 0 || r.candRSS <= 0 {
			t.Errorf("%d elections: a counter did not move: %+v", r.elections, r)
		}
	}
	for _, want := range []string{"| elections | all led after | broker CPU (cores) |", "| 4 |", "Largest size sustained: 4 elections × 3 processes."} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

func TestGrowUntilUnsustained(t *testing.T) {
	boom := errors.New("boom")
	measure := func(bad map[int]error, unsustained int) func(int) (scaleRow, error) {
		return func(n int) (scaleRow, error) {
			if err := bad[n]; err != nil {
				return scaleRow{}, err
			}
			return scaleRow{elections: n, allLed: time.Second, sustained: n != unsustained, reason: "slow"}, nil
		}
	}
	sizes := func(rows []scaleRow) []int {
		var out []int
		for _, r := range rows {
			out = append(out, r.elections)
		}
		return out
	}
	var seen []int
	rows, err := growUntilUnsustained([]int{1, 2, 4, 8}, measure(nil, 4), func(r scaleRow) { seen = append(seen, r.elections) })
	if err != nil || !slices.Equal(sizes(rows), []int{1, 2, 4}) || !slices.Equal(seen, []int{1, 2, 4}) {
		t.Errorf("stops after the first unsustained size: rows %v, reported %v, err %v", sizes(rows), seen, err)
	}
	rows, err = growUntilUnsustained([]int{1, 2, 4}, measure(map[int]error{2: boom}, 0), func(scaleRow) {})
	if err != nil || len(rows) != 2 || rows[1].sustained || rows[1].reason != "boom" {
		t.Errorf("a later size's error is a row not sustained: rows %+v, err %v", rows, err)
	}
	if _, err = growUntilUnsustained([]int{1, 2}, measure(map[int]error{1: boom}, 0), func(scaleRow) {}); !errors.Is(err, boom) {
		t.Errorf("the first size's error is returned: %v", err)
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts("250, 500,1000")
	if err != nil || !slices.Equal(got, []int{250, 500, 1000}) {
		t.Errorf("parseInts: %v, %v", got, err)
	}
	if _, err := parseInts("250,x"); err == nil {
		t.Error("parseInts accepted x")
	}
	if joinInts(got) != "250,500,1000" {
		t.Errorf("joinInts: %q", joinInts(got))
	}
}
