// Package keymsg lets this module's tools read a message of an election
// bucket's stream that they read raw (with
// jetstream.Stream.GetLastMsgForSubject, or a consumer) as
// streams.ReadEntry reads an entry, with what its writer said of itself in
// its headers (its instance, its term), which nats.go's KV API does not
// show. It is no API of the library's: programs follow elections with an
// Observer. The one reading of a message's headers is package streams',
// which sets Entry as it initialises.
package keymsg

import "github.com/nats-io/nats.go/jetstream"

// Entry returns msg, a message of bucket's stream, as a KV entry that
// streams.ReadEntry reads with its writer's stamp, or nil for a nil msg.
// Package streams sets it; a program that imports streams may call it.
var Entry func(bucket string, msg *jetstream.RawStreamMsg) jetstream.KeyValueEntry
