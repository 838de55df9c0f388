package streams

import "github.com/conclave-io/conclave/internal/denied"

// ErrPermissionDenied means the broker refused one of the election's
// requests because the connection's user may not make it: it may not
// publish to the election's key or to the JetStream API subject involved,
// or may not receive replies on the connection's inbox. The message names
// what was refused and what to change. Start returns it rather than
// retrying, since retrying cannot succeed until the broker's permissions
// change. Candidates always recognise it; observers only with
// ObserveWithJetStream (as the framework passes).
var ErrPermissionDenied = denied.ErrPermissionDenied
