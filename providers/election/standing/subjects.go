// Package standing is the wire of who is standing in an election: the core
// NATS subjects on which candidates answer who stands, announce
// themselves, and take requests to hand over. The election
// (providers/election/streams) talks on them, and the per-election
// permissions (acl) allow them; both take the names from here.
package standing

// CandidatesSubject is the subject on which the candidates of election key
// in bucket answer who is standing.
func CandidatesSubject(bucket, key string) string { return "conclave.candidates." + bucket + "." + key }

// AnnounceSubject is the subject on which the candidates of election key in
// bucket announce themselves, to its leader and to observers.
func AnnounceSubject(bucket, key string) string { return "conclave.announce." + bucket + "." + key }

// ShardsSubject is the subject on which the members of shard group group
// in bucket announce themselves and what they hold (package shards).
func ShardsSubject(bucket, group string) string { return "conclave.shards." + bucket + "." + group }

// HandOverSubject is the subject on which the leader of election key in
// bucket takes requests to hand over, and on which it then offers the key
// to the candidate named.
func HandOverSubject(bucket, key string) string { return "conclave.handover." + bucket + "." + key }
