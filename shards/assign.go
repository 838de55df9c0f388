package shards

import (
	"cmp"
	"slices"
)

// Member is one member of a shard group as the assignment sees it.
type Member struct {
	// Identity names the member; it is the value of the shard keys it holds.
	Identity string
	// Weight is the member's share of the shards relative to the others'
	// (1 when below 1).
	Weight int
	// Healthy is false while the member's health check fails: it then keeps
	// no shard and is given none, unless no member is healthy.
	Healthy bool
}

// Assign returns who should hold each of n shards, given the members that
// may hold shards and holders[i], who holds shard i now ("" for nobody;
// holders shorter than n means the rest are free). It is a pure function:
// every member of a group computes it from the same roll and holders and
// gets the same answer.
//
// With total weight W, each healthy member m of weight w is given between
// floor(n*w/W) and ceil(n*w/W) shards, so with equal weights each holds
// floor(n/M) or ceil(n/M). The assignment is sticky: a shard stays with
// its holder while the holder is a healthy member within its bound; only a
// member's excess moves (its highest-numbered shards), and free, orphaned
// and excess shards go to the members furthest below their target. It
// moves the fewest shards any assignment within the bounds could: the extra
// shards that a remainder allows go to the members holding most beyond
// their lower bound.
//
// Members not listed (left or silent) hold nothing: their shards are
// orphaned. Unhealthy members are given nothing while any member is
// healthy; when none is, all listed members count as healthy, since an
// unhealthy holder is better than none. With no member at all every shard
// is assigned "".
func Assign(n int, members []Member, holders []string) []string {
	out := make([]string, max(n, 0))
	eligible := eligibleMembers(members)
	if len(eligible) == 0 || n <= 0 {
		return out
	}
	index := make(map[string]int, len(eligible))
	for i, m := range eligible {
		index[m.Identity] = i
	}

	held := make([][]int, len(eligible)) // each member's shards, ascending
	for shard := 0; shard < n && shard < len(holders); shard++ {
		if i, ok := index[holders[shard]]; ok {
			held[i] = append(held[i], shard)
		}
	}
	target := targets(n, eligible, held)

	kept := make([]int, len(eligible))
	for i, shards := range held {
		keep := min(len(shards), target[i])
		for _, shard := range shards[:keep] {
			out[shard] = eligible[i].Identity
		}
		kept[i] = keep
	}
	for shard := range n {
		if out[shard] != "" {
			continue
		}
		i := mostShort(target, kept)
		out[shard] = eligible[i].Identity
		kept[i]++
	}
	return out
}

// eligibleMembers returns the members that may be given shards, sorted by
// identity, without duplicates or empty names, weights at least 1.
func eligibleMembers(members []Member) []Member {
	var healthy, all []Member
	seen := map[string]bool{}
	for _, m := range members {
		if m.Identity == "" || seen[m.Identity] {
			continue
		}
		seen[m.Identity] = true
		m.Weight = max(m.Weight, 1)
		all = append(all, m)
		if m.Healthy {
			healthy = append(healthy, m)
		}
	}
	if len(healthy) == 0 {
		healthy = all
	}
	slices.SortFunc(healthy, func(a, b Member) int { return cmp.Compare(a.Identity, b.Identity) })
	return healthy
}

// targets returns how many shards each member should hold: its lower bound
// floor(n*w/W), plus one for as many members as the remainder allows among
// those whose share is fractional, chosen by the most shards held now
// beyond the lower bound (then by identity). Each member so chosen that
// holds more than its lower bound keeps a shard that would move otherwise,
// so the moves are fewest; and the members chosen once are chosen again,
// so the assignment is a fixed point.
func targets(n int, members []Member, held [][]int) []int {
	total := 0
	for _, m := range members {
		total += m.Weight
	}
	target := make([]int, len(members))
	var fractional []int
	remainder := n
	for i, m := range members {
		share := n * m.Weight
		target[i] = share / total
		remainder -= target[i]
		if share%total != 0 {
			fractional = append(fractional, i)
		}
	}
	slices.SortStableFunc(fractional, func(a, b int) int {
		return cmp.Compare(len(held[b])-target[b], len(held[a])-target[a])
	})
	for _, i := range fractional[:remainder] {
		target[i]++
	}
	return target
}

// mostShort returns the member furthest below its target (the first, by
// identity, among equals).
func mostShort(target, kept []int) int {
	best := -1
	for i := range target {
		if kept[i] >= target[i] {
			continue
		}
		if best < 0 || target[i]-kept[i] > target[best]-kept[best] {
			best = i
		}
	}
	return best
}
