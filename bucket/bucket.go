// Package bucket holds what every part of Conclave agrees on about the
// election bucket: its name, its stream and the limits of its settings. The
// election algorithm, the configuration, the broker that provisions the
// bucket and the CLI all refer to these, so they cannot drift apart.
//
// It imports only the standard library: a program that only campaigns links
// it without the NATS server.
package bucket

import "time"

// Name is the KV bucket that holds the elections, one key per election.
// Choria's brokers and clients use the same name.
const Name = "CHORIA_LEADER_ELECTION"

// Stream is the JetStream stream behind the bucket, as the KV API names it.
const Stream = "KV_" + Name

const (
	// MinTTL is the shortest bucket TTL that can hold elections: the
	// configuration refuses a shorter leader_election_ttl, the broker does
	// not provision one, and candidates refuse to campaign in such a bucket.
	// The server expires keys up to a few hundred milliseconds late (its
	// expiry timer is not re-armed below 250ms), which, with ordinary
	// scheduling delays, leaves a leader too little room to renew below it.
	MinTTL = time.Second

	// MaxReplicas is the most replicas JetStream supports for a stream, and
	// so for the bucket.
	MaxReplicas = 5
)
