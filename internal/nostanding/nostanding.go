// Package nostanding lets this module's benchmarks run candidates that take
// no part in who is standing: no announcements, no answers, no
// subscriptions on the candidates and hand-over subjects. bench/scale runs
// a fleet both ways to measure what the announcements cost the broker.
// Being internal, it is no option of the library's: a program cannot turn
// who is standing off, and `conclave election info`, hand-overs, priorities
// and health checks keep working for it.
package nostanding

import "context"

type key struct{}

// Context returns ctx marked so that an Election started with it takes no
// part in who is standing.
func Context(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Marked reports whether ctx was marked by Context.
func Marked(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
