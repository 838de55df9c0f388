// Command demo shows leader election at work: several workers in one process
// campaign in one election and the leader logs a line of work every second.
// Type s, c, d or q and Enter to make the leader step down, crash, be
// deposed, or to quit. Run `demo --help` for the flags.
//
// With no arguments it starts its own broker, so `go run ./cmd/demo` is all
// it takes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C during the shutdown kills the process
	}()
	code := Run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
