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
// A process that runs many candidates launches them instead (Launch). An
// Observer follows an election without campaigning.
//
// At most one candidate leads at any instant, provided clocks run at about
// the same rate: a leader counts itself leader only until its local
// deadline, the moment it sent its last successful write plus the TTL less
// SafetyMargin, and IsLeader, Term.Valid and the term's context read the
// clock directly. A process can still pause between checking and acting:
// send the term's fencing Token with every write to a resource that rejects
// tokens lower than the highest it has seen.
//
// OnWon, OnLost, OnLeading and OnCampaign run one at a time, in order, on a
// goroutine of the election's own, never under a lock. They may call any
// method of the Election, Stop included. Start returns after the last of
// them.
//
// The rules are in rules.go, applied by one pure lease machine (machine.go).
// What is promised, under which conditions (clocks, lowering the TTL,
// forced stand-downs, purges), and what is not, is in docs/promises.md.
package streams
