// Package shards splits work among a service's copies: a shard group is a
// name, a fixed number of shards N, and the members that join it. Each
// shard is owned by at most one member at a time, fenced, spread evenly
// over the healthy members, and moved by a named hand-over, without a gap
// longer than one, when a member joins, stops or turns unhealthy.
//
// On the wire each shard is an ordinary election (package streams): shard i
// of group G is the key "G.i" in the election bucket. Its holder is the
// election's leader, with every guarantee an election gives: at most one
// holder at any instant, a fencing token that grows (Term.Token), and a
// term whose context ends at its deadline. NATS and Choria tools, and
// `conclave election info`, see shards as elections.
//
//	g, err := shards.NewGroup("host1", "ingest", 64, js,
//		shards.OnAssigned(func(shard int, term *streams.Term) { go work(term.Context(), shard, term.Token()) }),
//		shards.OnRevoked(func(shard int) { stop(shard) }))
//	...
//	err = g.Start(ctx) // runs until ctx ends, then hands its shards over
//
// # How members agree
//
// Members announce themselves on the group's subject (Subject), over core
// NATS: their identity, weight, health, the shards they hold with their
// tokens, and the shards they stand for. They announce every quarter TTL
// (250ms to 15s), at once when any of this changes, and when a member that
// joins asks. A member silent for about a TTL drops from the others' roll.
// A member ignores, with a warning, an announcement it cannot use: a
// weight outside 1 to MaxWeight, a shard count outside 1 to MaxShards, an
// identity that cannot hold a shard, shards outside the group.
// The members of a group in one process share one subscription.
//
// Every member computes the same assignment from the roll and the holders
// the announcements name (Assign, a pure function): sticky, within
// floor(N*w/W) and ceil(N*w/W) shards each by weight, moving the fewest
// shards. A member campaigns only for the shards the assignment gives it,
// and the holder of a shard assigned to another member hands it over by
// name (streams.Election.HandOver) once that member stands for it, so the
// offer is taken with one write. A member that stops announces that it
// leaves, and hands each shard to the member the assignment without it
// names. A member that crashes drops from the roll about a TTL after its
// last announcement; the survivors then stand for its shards, spread by
// the assignment, and take them as their keys expire.
//
// Members may share an identity (the copies of a program on one host):
// each Start has an instance of its own, and the group knows a member as
// identity/instance (Group.Member), which its shards' hand-overs name.
// Members need the same number of shards: a member that hears a member
// started before it with another count hands its shards over and Start
// returns ErrShardCountMismatch; the earlier member logs an error and
// carries on without it.
//
// # Callbacks
//
// OnAssigned and OnRevoked run on the shard's election goroutine, never
// under a lock, in order per shard: OnAssigned, then OnRevoked, then
// perhaps OnAssigned again. A shard handed over begins its next holder's
// term only after OnRevoked returns, if it returns within the shard's
// lease (about a TTL): the key is not renewed meanwhile, and one that runs
// longer lets the shard expire to the next holder, as a crash would.
package shards
