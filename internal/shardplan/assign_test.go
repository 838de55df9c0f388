package shardplan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// members returns equal-weight healthy members named m0, m1, ….
func members(n int) []Member {
	out := make([]Member, n)
	for i := range out {
		out[i] = Member{Identity: fmt.Sprintf("m%d", i), Weight: 1, Healthy: true}
	}
	return out
}

// counts returns how many shards each identity is given.
func counts(assign []string) map[string]int {
	c := map[string]int{}
	for _, id := range assign {
		c[id]++
	}
	return c
}

// moves counts the shards held by someone that assign gives to someone else.
func moves(holders, assign []string) int {
	n := 0
	for i, h := range holders {
		if h != "" && h != assign[i] {
			n++
		}
	}
	return n
}

// checkBounds fails unless every shard is given to an eligible member and
// each eligible member gets between the floor and the ceiling of its share.
func checkBounds(t *testing.T, n int, ms []Member, got []string) {
	t.Helper()
	elig := eligibleMembers(ms)
	total := 0
	for _, m := range elig {
		total += m.Weight
	}
	c := counts(got)
	for _, m := range elig {
		lo, hi := n*m.Weight/total, (n*m.Weight+total-1)/total
		if c[m.Identity] < lo || c[m.Identity] > hi {
			t.Errorf("%s (weight %d of %d) holds %d of %d shards, want %d..%d", m.Identity, m.Weight, total, c[m.Identity], n, lo, hi)
		}
		delete(c, m.Identity)
	}
	if len(elig) > 0 && len(c) > 0 {
		t.Errorf("shards given to members not eligible: %v", c)
	}
}

func TestAssignSpreadsEvenlyFromNothing(t *testing.T) {
	for _, tc := range []struct{ n, m int }{{1, 1}, {1, 3}, {7, 3}, {64, 4}, {64, 3}, {64, 5}, {256, 4}, {1024, 16}, {3, 8}} {
		t.Run(fmt.Sprintf("%dx%d", tc.n, tc.m), func(t *testing.T) {
			ms := members(tc.m)
			got := Assign(tc.n, ms, nil)
			checkBounds(t, tc.n, ms, got)
		})
	}
}

func TestAssignTable(t *testing.T) {
	h := func(s ...string) []string { return s }
	for _, tc := range []struct {
		name    string
		n       int
		members []Member
		holders []string
		want    []string
	}{
		{"no members", 3, nil, h("a", "", "b"), h("", "", "")},
		{"quiet stays", 4, members(2), h("m1", "m0", "m1", "m0"), h("m1", "m0", "m1", "m0")},
		{"excess moves, highest first", 4, members(2), h("m0", "m0", "m0", "m1"), h("m0", "m0", "m1", "m1")},
		{"orphan goes to the shortest", 3, members(2), h("m0", "gone", "m0"), h("m0", "m1", "m0")},
		{"remainder goes to who holds more than the floor", 3, members(2), h("m1", "m1", ""), h("m1", "m1", "m0")},
		{"remainder otherwise by identity", 3, members(2), h("", "", ""), nil},
		{"unhealthy gives up", 2, []Member{{"a", 1, true}, {"b", 1, false}}, h("b", "b"), h("a", "a")},
		{"all unhealthy keep", 2, []Member{{"a", 1, false}, {"b", 1, false}}, h("b", "a"), h("b", "a")},
		{"weights", 6, []Member{{"a", 2, true}, {"b", 1, true}}, h("a", "a", "a", "a", "b", "b"), h("a", "a", "a", "a", "b", "b")},
		{"holders shorter than n", 3, members(1), h("m0"), h("m0", "m0", "m0")},
		{"duplicate members count once", 2, append(members(1), members(1)...), nil, h("m0", "m0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Assign(tc.n, tc.members, tc.holders)
			if tc.want == nil { // only the counts are fixed
				if c := counts(got); c["m0"] != 2 || c["m1"] != 1 {
					t.Errorf("Assign(%d, %v, %q) = %q, want m0 twice", tc.n, tc.members, tc.holders, got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Assign(%d, %v, %q) = %q, want %q", tc.n, tc.members, tc.holders, got, tc.want)
			}
		})
	}
}

// randomCase returns a random group: up to 12 members of weights 1–4, some
// unhealthy, and holders drawn from them, from departed members and from
// nobody.
func randomCase(rng *rand.Rand) (int, []Member, []string) {
	n := 1 + rng.IntN(80)
	ms := make([]Member, 1+rng.IntN(12))
	for i := range ms {
		ms[i] = Member{Identity: fmt.Sprintf("m%02d", i), Weight: 1 + rng.IntN(4), Healthy: rng.IntN(6) != 0}
		if rng.IntN(2) == 0 {
			ms[i].Weight = 1
		}
	}
	holders := make([]string, n)
	for i := range holders {
		switch rng.IntN(10) {
		case 0:
			holders[i] = ""
		case 1:
			holders[i] = "departed"
		default:
			holders[i] = ms[rng.IntN(len(ms))].Identity
		}
	}
	return n, ms, holders
}

// minimalMoves is the fewest shards held by eligible members that any
// assignment within the bounds must move, by trying every choice of the
// members given the remainder.
func minimalMoves(n int, ms []Member, holders []string) int {
	elig := eligibleMembers(ms)
	total := 0
	for _, m := range elig {
		total += m.Weight
	}
	c := counts(holders)
	var frac []int
	lower := make([]int, len(elig))
	rem := n
	for i, m := range elig {
		lower[i] = n * m.Weight / total
		rem -= lower[i]
		if n*m.Weight%total != 0 {
			frac = append(frac, i)
		}
	}
	best := -1
	for mask := 0; mask < 1<<len(frac); mask++ {
		chosen := 0
		for b := range frac {
			if mask&(1<<b) != 0 {
				chosen++
			}
		}
		if chosen != rem {
			continue
		}
		moved := 0
		for i, m := range elig {
			target := lower[i]
			for b, f := range frac {
				if f == i && mask&(1<<b) != 0 {
					target++
				}
			}
			moved += max(0, c[m.Identity]-target)
		}
		if best < 0 || moved < best {
			best = moved
		}
	}
	return best
}

// TestAssignProperties checks, over many random groups, that the
// assignment keeps the bounds, moves no more shards than it must, is a
// fixed point (a group that follows it moves nothing more), and does not
// depend on the order members are listed in.
func TestAssignProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 1))
	for i := range 3000 {
		n, ms, holders := randomCase(rng)
		got := Assign(n, ms, holders)
		checkBounds(t, n, ms, got)

		elig := map[string]bool{}
		for _, m := range eligibleMembers(ms) {
			elig[m.Identity] = true
		}
		heldByEligible := make([]string, n)
		for s, h := range holders {
			if elig[h] {
				heldByEligible[s] = h
			}
		}
		if got, want := moves(heldByEligible, got), minimalMoves(n, ms, holders); got != want {
			t.Fatalf("case %d: moved %d shards of eligible holders, the fewest possible is %d\nmembers %v\nholders %q", i, got, want, ms, holders)
		}
		if again := Assign(n, ms, got); !slices.Equal(again, got) {
			t.Fatalf("case %d: not a fixed point:\n%q\n%q", i, got, again)
		}
		shuffled := slices.Clone(ms)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if other := Assign(n, shuffled, holders); !slices.Equal(other, got) {
			t.Fatalf("case %d: depends on the members' order", i)
		}
		if t.Failed() {
			t.Fatalf("case %d: members %v holders %q", i, ms, holders)
		}
	}
}

// TestAssignJoinAndLeaveMoveOnlyTheirShards: from a settled group, a member
// that joins receives every shard that moves, each once, and a member that
// leaves gives up every shard that moves, and only its own.
func TestAssignJoinAndLeaveMoveOnlyTheirShards(t *testing.T) {
	for _, tc := range []struct{ n, m int }{{64, 4}, {64, 3}, {256, 4}, {1024, 16}, {10, 7}, {5, 1}} {
		t.Run(fmt.Sprintf("%dx%d", tc.n, tc.m), func(t *testing.T) {
			ms := members(tc.m + 1)
			before := ms[:tc.m]
			settled := Assign(tc.n, before, nil)

			joined := Assign(tc.n, ms, settled)
			checkBounds(t, tc.n, ms, joined)
			newcomer := ms[tc.m].Identity
			for s := range settled {
				if joined[s] != settled[s] && joined[s] != newcomer {
					t.Errorf("join: shard %d moved from %s to %s, not to the newcomer", s, settled[s], joined[s])
				}
			}
			if got, want := counts(joined)[newcomer], tc.n/(tc.m+1); got != want {
				t.Errorf("join: newcomer got %d shards, want %d", got, want)
			}

			left := Assign(tc.n, ms[1:], joined)
			checkBounds(t, tc.n, ms[1:], left)
			for s := range joined {
				if left[s] != joined[s] && joined[s] != ms[0].Identity {
					t.Errorf("leave: shard %d moved from %s, who stayed, to %s", s, joined[s], left[s])
				}
			}
		})
	}
}

// TestAssignCrashSpreadsOverSurvivors: the shards of a member that vanished
// are spread over every survivor rather than given to one.
func TestAssignCrashSpreadsOverSurvivors(t *testing.T) {
	ms := members(4)
	settled := Assign(64, ms, nil)
	after := Assign(64, ms[:3], settled)
	c := counts(after)
	for _, m := range ms[:3] {
		if c[m.Identity] < 21 || c[m.Identity] > 22 {
			t.Errorf("%s holds %d, want 21 or 22: %v", m.Identity, c[m.Identity], c)
		}
	}
	if moved := moves(settled, after); moved != 16 {
		t.Errorf("%d shards moved, want the departed member's 16", moved)
	}
}

// TestAssignHoldsAsTheGroupMoves: as members act on the assignment one
// shard at a time (a holder gives a shard up, then its new holder takes
// it), the assignment of every other shard stays as it was. Members that
// act on views a few moves apart therefore agree, and no shard moves twice
// on the way.
func TestAssignHoldsAsTheGroupMoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 2))
	for i := range 1500 {
		n, ms, holders := randomCase(rng)
		want := Assign(n, ms, holders)
		view := slices.Clone(holders)
		for _, s := range rng.Perm(n) {
			if view[s] == want[s] {
				continue
			}
			view[s] = "" // given up (or expired)
			if got := Assign(n, ms, view); !slices.Equal(got, want) {
				t.Fatalf("case %d: shard %d given up: the assignment changed\nmembers %v\nbefore %q\nview %q\nwant %q\ngot  %q", i, s, ms, holders, view, want, got)
			}
			view[s] = want[s] // taken
			if got := Assign(n, ms, view); !slices.Equal(got, want) {
				t.Fatalf("case %d: shard %d taken: the assignment changed\nmembers %v\nbefore %q\nview %q\nwant %q\ngot  %q", i, s, ms, holders, view, want, got)
			}
		}
	}
}

func FuzzAssign(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		n, ms, holders := randomCase(rand.New(rand.NewPCG(a, b)))
		got := Assign(n, ms, holders)
		checkBounds(t, n, ms, got)
		if again := Assign(n, ms, got); !slices.Equal(again, got) {
			t.Fatalf("not a fixed point")
		}
	})
}

// TestAssignClampsWeightsOutOfRange: weights come off the wire; huge,
// negative and extreme ones count between 1 and MaxWeight, so that the
// arithmetic cannot overflow, and the assignment is still within bounds.
func TestAssignClampsWeightsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
	}{
		{"huge", []int{1, math.MaxInt64 / 2}},
		{"max int", []int{math.MaxInt, math.MaxInt, 3}},
		{"min int", []int{math.MinInt, 2}},
		{"negative", []int{-5, -1, 0}},
		{"just above the maximum", []int{MaxWeight + 1, MaxWeight, 1}},
	} {
		for _, n := range []int{1, 7, 64, MaxShards} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				ms := make([]Member, len(tc.weights))
				for i, w := range tc.weights {
					ms[i] = Member{Identity: fmt.Sprintf("m%d", i), Weight: w, Healthy: true}
				}
				got := Assign(n, ms, nil)
				if len(got) != n {
					t.Fatalf("Assign(%d, …) returned %d shards", n, len(got))
				}
				clamped := slices.Clone(ms)
				for i := range clamped {
					clamped[i].Weight = min(max(clamped[i].Weight, 1), MaxWeight)
				}
				checkBounds(t, n, clamped, got)
			})
		}
	}
	if got := Assign(MaxShards+1, members(2), nil); got != nil {
		t.Errorf("Assign(MaxShards+1, …) returned %d shards, want nil", len(got))
	}
}
