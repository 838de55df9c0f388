// Package shardplan is the pure decision code of a shard group member: the
// assignment of shards to members (Assign), what a member does about it
// in one pass (Decide), and the announcement cadence (AnnounceInterval,
// RollSilence). Package shards runs it on a real broker; the election
// simulator (providers/election/streams) runs the same code on simulated
// members, which is why it imports nothing of either.
package shardplan
