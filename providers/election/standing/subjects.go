// Package standing is who is standing in an election, as anyone on the
// broker sees it: which candidates stand (Standing), asking the leader to
// hand over (RequestHandOver), and the core NATS subjects and messages
// these run on, which the election (providers/election/streams) and the
// per-election permissions (acl) take from here. None of it is in the
// election bucket: it needs no JetStream, and dies with the process.
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
