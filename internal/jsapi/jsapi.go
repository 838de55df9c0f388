// Package jsapi says which subjects a nats.go JetStream context talks to,
// for code that publishes or explains refusals by subject: the election's
// raw writes and the CLI's permission errors.
package jsapi

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Prefix returns the subject prefix of js's JetStream API, with its final
// dot, as nats.go computes it: "$JS.<domain>.API." for a context made with
// a domain, the context's own API prefix, or jetstream.DefaultAPIPrefix
// ("$JS.API."). The KV API puts it in front of "$KV.<bucket>.<key>" too
// when it is not the default.
func Prefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
