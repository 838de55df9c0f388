// Package streams elects leaders with a NATS JetStream key-value bucket, such
// as the CHORIA_LEADER_ELECTION bucket a Conclave or Choria broker provisions.
// Each key is one election; its value is the leader's identity, so `nats kv
// get` and `choria kv get` show who leads, and Choria's own candidates on the
// same bucket respect our leaders and we theirs.
//
// # The algorithm
//
// A candidate campaigns by writing its identity with a compare-and-swap that
// only succeeds when the key is free. A leader renews with a compare-and-swap
// on its own last revision every third of the bucket's TTL; the broker expires
// a key TTL after its last write, so a crashed leader's key frees itself.
// Standbys watch the key and need not poll: they learn of every renewal,
// release and removal as it happens, predict an expiry from the last renewal
// they saw (expiry is silent), and fall back to a jittered safety-net
// campaign (see BackOff) in case the watch missed something.
//
// A leader stopping gracefully first runs OnLost, then writes an empty value
// over its own revision: a standby takes that over within milliseconds. If
// none does, it removes the key so that candidates that can only create keys
// (Choria's) can take it.
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
// When someone else removes the key (forcing a stand-down, as `kv del` does),
// the leader they removed may not notice at once, so the candidate that takes
// the key next waits a full TTL from when it saw the removal before it leads,
// and the deposed leader sits out that takeover. A write whose outcome is
// unknown (a timeout) is never assumed to be ours: a leader that cannot
// confirm its hold leads until its deadline and then stands down.
//
// The broker applies a changed TTL to values already stored. A candidate
// taking over a removed key waits by the higher of the TTL it knew and the
// TTL it reads then, so raising the TTL is safe. A leader re-reads the TTL
// every four TTLs and shortens its deadline at once when it was lowered, but
// a leader cut off from the broker cannot learn of it: lowering the TTL of a
// bucket in use can let a new leader in before such a leader's deadline.
// Lower it with elections stopped, or accept that window.
//
// What no election can promise is that a leader acts only while it leads: a
// process can pause between checking and acting. Send the term's fencing
// Token with every write to a resource that rejects tokens lower than the
// highest it has seen. Tokens are the revision of the write that began the
// term: they grow across terms and never repeat, as long as the broker does
// not lose acknowledged writes (Conclave's broker fsyncs before acknowledging).
//
// # Callbacks
//
// OnWon, OnLost, OnLeading and OnCampaign run one at a time, in order, on a
// goroutine of the election's own, never under a lock. They may call any
// method of the Election, Stop included. Start returns after the last of them.
package streams
