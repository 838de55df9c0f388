package shards

import "github.com/conclave-io/conclave/internal/shardplan"

// Member is one member of a shard group as the assignment sees it:
// Identity names the member (the value of the shard keys it holds), Weight
// is its share of the shards relative to the others' (counted as 1 when
// below 1, as MaxWeight when above), and
// Healthy is false while its health check fails (it then keeps no shard
// and is given none, unless no member is healthy).
type Member = shardplan.Member

// Assign returns who should hold each of n shards, given the members that
// may hold shards and holders[i], who holds shard i now ("" for nobody;
// holders shorter than n means the rest are free). It is a pure function:
// every member of a group computes it from the same roll and holders and
// gets the same answer.
//
// With total weight W, each healthy member m of weight w is given between
// floor(n*w/W) and ceil(n*w/W) shards. The assignment is sticky: a shard
// stays with its holder while the holder is a healthy member within its
// bound; only a member's excess moves, and free, orphaned and excess
// shards go to members below their target by rendezvous hashing, which
// spreads a departed member's shards over all the others. It moves the
// fewest shards any assignment within the bounds could. Members not listed
// hold nothing; unhealthy members are given nothing while any member is
// healthy. With no member at all every shard is assigned "".
//
// Assign never panics, whatever its input: weights count between 1 and
// MaxWeight, n above MaxShards gets nil and n below 1 an empty assignment.
func Assign(n int, members []Member, holders []string) []string {
	return shardplan.Assign(n, members, holders)
}
