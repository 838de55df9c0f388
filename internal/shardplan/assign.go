package shardplan

import (
	"cmp"
	"slices"
)

// MaxWeight is the largest weight a member counts with: a weight above it
// counts as MaxWeight, one below 1 as 1.
const MaxWeight = 1000

// MaxShards is the largest number of shards a group may have; Assign
// returns nil for more. A member announces the shards it holds in one
// message, about 33 bytes a shard and at most 49: holding all of MaxShards
// comes to at most about 490 KB, under half of nats-server's default
// max_payload (1 MiB).
const MaxShards = 10_000

// Member is one member of a shard group as the assignment sees it.
type Member struct {
	// Identity names the member; it is the value of the shard keys it holds.
	Identity string
	// Weight is the member's share of the shards relative to the others',
	// counted between 1 and MaxWeight (1 when below 1, MaxWeight when
	// above).
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
// and excess shards go to members below their target, each shard to the
// one it ranks highest (rendezvous hashing), which spreads a departed
// member's shards over all the others. It
// moves the fewest shards any assignment within the bounds could: the extra
// shards that a remainder allows go first to members holding more than
// their lower bound.
//
// Weights count between 1 and MaxWeight, so that no input, however
// malformed, overflows the arithmetic: Assign never panics. n above
// MaxShards gets nil, n below 1 an empty assignment.
//
// Members not listed (left or silent) hold nothing: their shards are
// orphaned. Unhealthy members are given nothing while any member is
// healthy; when none is, all listed members count as healthy, since an
// unhealthy holder is better than none. With no member at all every shard
// is assigned "".
func Assign(n int, members []Member, holders []string) []string {
	if n > MaxShards {
		return nil
	}
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
		i := preferred(shard, eligible, target, kept)
		out[shard] = eligible[i].Identity
		kept[i]++
	}
	return out
}

// eligibleMembers returns the members that may be given shards, sorted by
// identity, without duplicates or empty names, weights between 1 and
// MaxWeight.
func eligibleMembers(members []Member) []Member {
	var healthy, all []Member
	seen := map[string]bool{}
	for _, m := range members {
		if m.Identity == "" || seen[m.Identity] {
			continue
		}
		seen[m.Identity] = true
		m.Weight = min(max(m.Weight, 1), MaxWeight)
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
// those whose share is fractional: first those that hold more than their
// lower bound (each keeps a shard that would move otherwise, so the moves
// are fewest), then by identity. The choice depends on counts only through
// "more than the lower bound", which a member below it crosses only by
// reaching its target: the members chosen stay chosen as the group moves
// toward the assignment, and once there (a fixed point).
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
	above := func(i int) int {
		if len(held[i]) > target[i] {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(fractional, func(a, b int) int { return cmp.Compare(above(b), above(a)) })
	for _, i := range fractional[:remainder] {
		target[i]++
	}
	return target
}

// preferred returns the member a shard to be placed goes to: of the
// members below their target, the one that ranks highest for this shard
// (rendezvous hashing of shard and identity). A shard placed this way keeps
// its member while the others are placed: once it is held by that member,
// the remaining shards go where they went before, so that members acting
// on slightly older views of the group still agree, and no shard moves
// twice on the way to an even spread.
func preferred(shard int, members []Member, target, kept []int) int {
	best, bestRank := -1, uint64(0)
	for i, m := range members {
		if kept[i] >= target[i] {
			continue
		}
		if r := rank(shard, m.Identity); best < 0 || r > bestRank {
			best, bestRank = i, r
		}
	}
	return best
}

// rank is the FNV-1a hash of identity and shard, mixed.
func rank(shard int, identity string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(identity); i++ {
		h ^= uint64(identity[i])
		h *= 1099511628211
	}
	h ^= uint64(shard) + 0x9e3779b97f4a7c15
	h *= 1099511628211
	// A final mix spreads the shard's bits over the whole word.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}
