// Package broker runs an embedded NATS server with JetStream and provisions
// the leader election bucket, CHORIA_LEADER_ELECTION, on it.
//
// A Broker is built from a config.Config with New and started with Start,
// which returns once the server accepts clients, JetStream is ready (in a
// cluster: a JetStream meta leader exists) and the election bucket has the
// configured settings. Run wraps Start and Shutdown for a command line tool.
//
// ProvisionElectionBucket is the provisioning step on its own: it works
// against any NATS server with JetStream, creating the bucket or updating an
// existing one to the wanted settings, and reports what it changed. A bucket
// it creates is the stream the KV API would create, except that its revisions
// start at the creation time in microseconds since the Unix epoch rather than
// at 1: a term's fencing token is a revision, so a bucket deleted and created
// again must not hand out its predecessor's revisions a second time. A bucket
// that already exists keeps its revisions.
//
// # Consumers and per-message TTLs
//
// Every watch of the bucket is a JetStream consumer, and nats-server caps a
// stream at 1,000 consumers (server.JSDefaultMaxConsumersPerStream) unless
// the stream, its account or the server option
// JetStreamLimits.DefaultMaxConsumers sets a limit; a stream limit of -1,
// what the KV API sets, counts as unset. Provisioning therefore gives the
// stream a limit of its own, DefaultMaxConsumers (see there for why the
// stream rather than the server option), or the account's limit when that is
// lower, and ProvisionReport.Consumers says what limit applies.
//
// The broker also turns on per-message TTLs (BucketSpec.PerKeyTTL), never
// limit markers.
//
// # Durability
//
// JetStream acknowledges a write before it reaches the disk unless the server
// runs with SyncAlways. A single server that crashes can then lose
// acknowledged election writes, and a lost write can hand out a fencing token
// (a key revision) a second time. The broker therefore passes
// config.Config.SyncAlways (default true) straight to the server.
//
// # Cluster size
//
// With LeaderElectionReplicas -1 the bucket gets one replica per server named
// in the configuration: this server plus every distinct entry of Peers that is
// not this server itself. Peer lists that name every node, this one included,
// as Choria's do, therefore count each node once. The count comes from the
// configuration, not from the servers seen so far, so every node of a
// cluster computes the same number while the cluster is still forming.
package broker
