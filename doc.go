// Package conclave gives Go programs leader election on NATS JetStream,
// without HA storage of their own. A Framework holds what the elections of a
// program share: the identity they campaign under, a logger (logrus, or
// log/slog with WithSlog), an optional Prometheus registerer, and one NATS
// connection made on first use.
//
//	fw, err := conclave.New(conclave.UserConfig())
//	if err != nil { ... }
//	defer fw.Close()
//
//	e, err := fw.NewElection(ctx, nil, "my_app",
//		election.OnWon(func() { log.Print("leading") }),
//		election.OnLost(func() { log.Print("standing by") }))
//	if err != nil { ... }
//	err = e.Start(ctx) // campaigns until ctx ends
//
// (election is package github.com/conclave-io/conclave/providers/election/streams.)
//
// Each election is a key in the CHORIA_LEADER_ELECTION bucket, which a
// Conclave or Choria broker provisions (plugin.choria.broker_network = true).
// The bucket is wire-compatible with Choria's, so `nats kv get` and
// `choria kv get` show who leads, and Choria's candidates respect ours.
//
// # Where the framework connects
//
// The shared connection goes to the broker the framework runs in this
// process (embedded.StartBroker, or UseBroker), if any; else to every
// broker in plugin.choria.middleware_hosts; else to DefaultServer. It is made on first use (Connection, NewElection
// with a nil connection, …), reconnects forever, is named after the identity,
// and logs its disconnections and reconnections. Connect makes further
// connections with the same settings, for candidates that must not share a
// connection's fate. Connection and Connect fail at once with ErrNoBroker
// when no broker answers; NewElection, NewCampaign, NewObserver and Bucket
// with a nil connection wait for one instead, as `conclave election run`
// does, logging once that they wait, until their context ends: give it a
// deadline to fail instead.
//
// # Logging in
//
// Connections to brokers named in the configuration use its TLS files
// (plugin.security.file.certificate, .key and .ca: the broker is checked
// against the CA, and the certificate is presented), its login
// (plugin.nats.user and plugin.nats.pass, or plugin.nats.credentials) and
// the inbox prefix of plugin.nats.user, _INBOX.<user>, which a broker with
// users requires. The files are checked before connecting, and a refused
// login fails at once with ErrLogin naming the cause. A user who may not
// open the bucket gets ErrPermissionDenied from NewElection; a campaign in
// an election the user may not touch ends with it (see docs/security.md).
// A broker started with embedded.StartBroker is reached in-process, with a
// credential made at random and held only in memory.
//
// # Linking
//
// The package does not link the NATS server: a program that only
// campaigns stays small. Starting a broker in the program is package
// github.com/conclave-io/conclave/embedded, which does.
//
// # Configuration
//
// New reads a Choria-style configuration file (see package config and
// docs/config.md), or, given "", runs on the defaults and the CONCLAVE_*
// environment variables. UserConfig finds the file a user means.
package conclave
