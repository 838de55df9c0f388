// Package faults is a Jepsen-style fault harness for the election provider
// (providers/election/streams), run against real processes: brokers started
// with `conclave broker run --config FILE` (one node, or three with an R3
// election bucket) and candidate processes (package candidate) that use the
// public API over their own NATS connections, each through a TCP proxy of
// the harness (Proxy) that can blackhole, stall or delay its link.
//
// While leaders work (they write to a fencing resource in the harness, Fence,
// every 50–100ms with their term's token), Run injects faults at random
// times: SIGKILL and SIGSTOP of the leader (including a stop between its
// validity check and its write), cut, delayed and flapping links, forced
// stand-downs through the CLI, hand-overs to a named candidate (the
// library path of `conclave election stand-down --to`), a better-ranked
// candidate joining (a priority move), and SIGKILLs of the broker, of any cluster
// node and of the whole cluster; and what operators do: the bucket's TTL
// lowered and raised, every candidate process restarted at once (SIGTERM or
// SIGKILL), the stream's consumer limit filled so that no watch can be
// created, the election key purged, and two faults at once. Every process records what it did against
// CLOCK_MONOTONIC (Mono), which all processes share; Check reads the records
// afterwards and fails the run on two leaders at once, a loss without a
// win, a leaderless gap longer than its bound (the TTL in force plus the
// failover time, while a quorum was reachable; 1s after a graceful full
// restart), a token that does not grow, and a fencing resource
// that took a write from anyone but the leader of its term. Beside the
// elections, every candidate process runs a member of a shard group
// (package shards), whose shard keys the checker holds to one holder at a
// time and growing tokens each.
//
// docs/faults.md explains how to run it (go run ./cmd/faults, or
// TestFaultsShort) and what each fault and check is for.
package faults
