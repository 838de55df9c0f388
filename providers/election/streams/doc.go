// Package streams elects leaders with a NATS JetStream key-value bucket, such
// as the CHORIA_LEADER_ELECTION bucket a Conclave or Choria broker provisions.
// Each key is one election; its value is the leader's identity, so `nats kv
// get` and `choria kv get` show who leads, and Choria's own candidates on the
// same bucket respect our leaders and we theirs.
//
// A candidate needs its identity, the election's key, and the JetStream
// context of the connection it campaigns over:
//
//	js, err := jetstream.New(nc)
//	...
//	e, err := streams.NewElection("host1", "my_app", js,
//		streams.OnWon(func() { ... }), streams.OnLost(func() { ... }))
//	...
//	err = e.Start(ctx) // campaigns until ctx ends or e.Stop()
//
// Start opens the bucket, CHORIA_LEADER_ELECTION unless InBucket names
// another, waiting while it does not exist yet. When a leader stops, the
// next candidate leads at once: the best-ranked standby the leader knows of,
// which takes the key with one write, or else the first to campaign after
// the leader's release (see below: the release mark).
//
// A process that runs many candidates (a fleet of elections, a shard
// group's) launches them instead: Launch returns at once and calls back
// with what Start would return once the campaign has wound down.
//
//	e.Launch(ctx, func(err error) { ... }) // campaigns until ctx ends or e.Stop()
//
// A process's candidates and observers share one scheduler that steps
// their machines on one goroutine (sched.go), so a launched candidate at
// rest costs no goroutine of its own.
//
// # The algorithm
//
// The rules below are stated once, in rules.go, and applied by one pure
// lease machine (machine.go): it takes what happened (a message seen, a
// request's outcome, a read of the bucket's settings, time passing) and
// returns the one thing to do next and when to be woken, from one function.
// A candidate (campaign.go) and an Observer are thin drivers of it, stepped
// by the process's scheduler (sched.go), and a
// deterministic simulator of many candidates and observers (simulate_test.go,
// go run ./cmd/simulate) checks it under faults.
//
// A candidate campaigns by writing its identity with a compare-and-swap that
// only succeeds when the key is free. A leader renews with a compare-and-swap
// on its own last revision every third of the bucket's TTL; the broker expires
// a key TTL after its last write, so a crashed leader's key frees itself.
// Standbys watch the key and need not poll: they learn of every renewal,
// release and removal as it happens, predict an expiry from the last renewal
// they saw (expiry is silent), and fall back to a jittered safety-net
// campaign (see WithBackoff) in case the watch missed something.
//
// A candidate without a working watch (the broker refuses consumers, or the
// watch is stuck) still campaigns: it reads the key on its backoff timer,
// predicts expiry from what it read, retries the watch with backoff, and logs
// the cause once. The watch only makes takeovers faster.
//
// A leader stopping gracefully first runs OnLost, then writes a release
// marker: a delete marker over its own revision whose payload names it
// ("released by host1"; see ReadEntry). Any candidate that sees it, now or
// later, leads at once; Choria's candidates see an ordinary deleted key and
// take it too. The marker is written through the election's JetStream
// context, which the KV API alone could not do: a plain delete would look
// like a forced stand-down, and the next candidate would wait a TTL.
//
// # Takeover on time
//
// A standby that saw the leader's last renewal knows when that leader's
// lease ends at the latest: a TTL after it learned of the write, since the
// leader counts on its lease only until it sent the write plus the TTL, less
// SafetyMargin. From then on it takes the key over with a compare-and-swap
// on that very revision, without waiting for the broker to expire it: the
// broker's expiry timer is not re-armed within 250 ms of its last run, so
// expiries of keys that fall close together, such as a fleet's, run up to a
// few hundred milliseconds late. It first reads the bucket's TTL, and waits
// by the longer of the TTL it knew and the one it read, so that a raised TTL
// it had not yet read cannot cut a lease short. A compare-and-swap that finds
// a newer revision (a renewal the standby missed) fails like any campaign,
// and the standby reads the key and waits for the new lease instead.
//
// Writes also carry the TTL itself where the bucket allows per-message TTLs
// (AllowMsgTTL, as a Conclave broker provisions it): the Nats-TTL header,
// rounded up to whole seconds. A key whose leader crashed then disappears
// about a TTL after its last write, for candidates that start after the
// crash. MaxAge stays the backstop: it expires Choria's candidates' writes,
// which carry no TTL, and everything on a bucket without per-message TTLs,
// which candidates detect from the bucket's settings and write to as before.
//
// # Fleets: one watch per election per process
//
// The candidates and observers of one process that follow an election over
// one connection share one watch: one delivery of each change to the
// process, however many candidates, and at most 12 consumers on the broker
// per process and bucket, whatever its number of elections, where
// permissions allow consumers with several filters. Where they do not,
// each election gets a consumer of its own, except that from the 8th under
// one prefix (the key's first token, as in "app-a.scheduler") the further
// ones share a consumer on the prefix ("$KV.<bucket>.app-a.>"), which
// permissions can scope; DESIGN.md in the repository gives the details.
// Reads of the bucket's settings that a process's candidates make at once
// share one request. Observers share these too: NewObserver takes the
// JetStream context, as NewElection does.
//
// # Guarantees and the clock
//
// At most one candidate leads at any instant, provided clocks run at about
// the same rate (not that they agree on the time). A leader counts itself
// leader only until its local deadline: the moment it sent its last successful
// write, plus the TTL, less SafetyMargin. The broker receives that write after
// it was sent and expires it no earlier than TTL after receiving it, so the
// leader has stood down before anyone else can take the key, even if it cannot
// reach the broker or was paused. IsLeader, Term.Valid and the term's context
// read the clock directly and turn false the instant the deadline passes.
//
// When anyone else removes the key (forcing a stand-down: `nats kv del`,
// `nats kv purge`, `conclave election stand-down`, or writing an empty value),
// the leader they removed may not notice at once, so the candidate that takes
// the key next waits a full TTL from when it saw the removal before it leads,
// and the deposed leader sits out that takeover. Only a holder's own release
// marker is not a removal. A write whose outcome is unknown (a timeout) is
// never assumed to be ours: a leader that cannot confirm its hold leads until
// its deadline and then stands down, and a write that takes the key is taken
// up only once the candidate sees it in the key, known by a number drawn for that
// write alone, with the lease counted from when it was sent (not across a
// change of the bucket's TTL or a bucket made again).
//
// Removing the key behind the KV API's back (a stream purge, `nats stream
// rmm`, deleting the bucket) leaves nothing to see: candidates that watched
// the leader's last renewal still wait for its predicted expiry, but a
// candidate that starts afterwards finds an empty key and leads at once, while
// the removed leader learns of it only at its next renewal, within a third of
// the TTL. Force stand-downs with a delete, never with a stream purge.
//
// # Changing the TTL
//
// The broker applies a changed TTL to values already stored. Every term reads
// the TTL after its winning write and before it begins, and bases its
// deadline on the lower of that and the TTL the candidate knew, so no term
// rests on a TTL older than itself. A candidate taking over a removed key
// waits by the higher of the two, so raising the TTL is safe. A leader in
// touch with the broker re-reads the TTL every TTL and shortens its deadline
// at once when it was lowered; standbys re-read it every four TTLs or
// every minute, whichever is longer, and when a leader outlives their
// prediction. A TTL
// that can no longer hold elections (below bucket.MinTTL, or none) makes the leader
// release the key and every candidate stop campaigning until it changes.
//
// What a lowered TTL cannot reach is a leader cut off from the broker before
// it reads the new TTL, up to one old TTL after the change: every renewal it
// sends meanwhile counts on the old TTL, while the broker expires the key by
// the new one. Its deadline (old TTL less the margin) stays within the key's
// life only if the new TTL is at least the old one less the safety margin. So
// lower the TTL in steps no larger than the margin (a tenth by default), one
// old TTL apart, or with elections stopped. Raising it is always safe.
//
// # Clocks
//
// The deadline is measured on the leader's monotonic clock, and the broker
// expires keys by its wall clock. The safety margin (SafetyMargin, a tenth of
// the TTL by default) absorbs the difference in their rates over one TTL;
// nothing more. A forward step of the broker's wall clock larger than the
// margin, or a failover to a replica whose clock is ahead by more, expires a
// key early and can let a second leader in. A suspended host (laptop sleep, a
// VM paused) stops Go's monotonic clock, so a leader that wakes believes less
// time passed than did: check Term.Valid right before acting, and rely on
// fencing tokens. Run NTP in slewing mode (chrony's default, with makestep
// only at boot) on brokers and candidates, and keep the margin above the
// worst step you allow.
//
// What no election can promise is that a leader acts only while it leads: a
// process can pause between checking and acting. Send the term's fencing
// Token with every write to a resource that rejects tokens lower than the
// highest it has seen. Tokens are the revision of the write that began the
// term: they grow across terms and never repeat, as long as the broker does
// not lose acknowledged writes (Conclave's broker fsyncs before acknowledging)
// and the bucket is not recreated by a tool that restarts revisions at 1
// (Conclave's broker creates it with revisions above any earlier one's).
//
// # Callbacks
//
// OnWon, OnLost, OnLeading and OnCampaign run one at a time, in order, on a
// goroutine of the election's own, never under a lock. They may call any
// method of the Election, Stop included. Start returns after the last of them.
package streams
