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
// # Security
//
// TLS: when the configuration names TLS files (plugin.security.file.*), New
// loads and checks them (a missing file, an expired certificate, one the CA
// did not sign or a key that does not match fails New with an error wrapping
// ErrInvalidConfig and security.ErrTLSFiles). The client port then serves TLS
// 1.2 or later only: nats-server announces tls_required and closes any
// connection that does not start the handshake. Clients must present a
// certificate the CA signed when plugin.choria.network.client_tls_force_required
// is true (the default); otherwise a certificate is verified only when given.
// Routes between brokers use TLS too, verified both ways against the same CA,
// and nats-server does a route's handshake before it sends anything, so a
// peer without a certificate the CA signed learns nothing. Each node's
// certificate must name the host the other peers dial (a DNS or IP SAN).
// plugin.choria.network.tls_timeout bounds every handshake. nats-server logs
// each failed handshake at error level with the certificate's subject and
// fingerprint (a connection that is not TLS at all, such as a probe, at debug
// level).
//
// Users: with plugin.conclave.user.NAME.* users configured, every client must
// log in as one of them. A password user gives its name and password
// (plugin.nats.user and plugin.nats.pass), checked against the bcrypt hash in
// the configuration. A certificate user is found from the client certificate
// alone: its setting must equal one of the certificate's DNS or e-mail SANs or
// its subject DN as Go prints it (CN=app-a,O=Example); a client that also
// sends a user name must name that user. Both kinds may be configured
// together, which nats-server's own TLS user map cannot do. Tokens, nkeys and
// JWT credentials files are refused. Each user gets the NATS allow lists
// acl.Compile makes of its campaign, observe and admin settings. Every
// refused login is logged at warning level with the reason and never the
// password; the client sees only nats-server's "Authorization Violation".
// At every start the broker logs each user and how it logs in, without
// secrets. Without users there are no per-user logins: with TLS and client
// certificates required, every client with a certificate the CA signed has
// full access; without either, anyone who reaches the port has.
//
// In-process connections: the broker's own connection and the framework's
// connection to an embedded broker (InProcessOptions) go through memory, not
// the network: no port, no TLS and no client certificate. They log in with a
// random credential made at New that exists only in this process's memory,
// is accepted only on in-process connections, and has full access.
//
// Rollups: with users configured the election bucket is provisioned without
// rollups (BucketSpec.DenyRollup), since a Nats-Rollup header, which NATS
// permissions do not cover, would let any user allowed to write one key wipe
// every other. Elections release with Delete, never Purge.
//
// Route credentials: plugin.choria.network.peer_user and peer_password are
// required of every route and sent on the broker's own routes.
//
// Safe defaults: the broker listens on loopback unless
// plugin.choria.network.listen_address says otherwise. New refuses with
// ErrInsecure to listen anywhere else (a routable address, 0.0.0.0, ::, or
// any host name but localhost) without TLS, without authentication (users, or
// TLS with client certificates required), or with a peer port without TLS,
// unless plugin.conclave.insecure is true: then the broker starts and warns
// at every start what it exposes. A monitoring port
// (plugin.choria.stats_port) beyond loopback needs no login, so the broker
// warns about it at every start. Passwords, hashes and the peer password
// never appear in the logs or the ProvisionReport.
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
