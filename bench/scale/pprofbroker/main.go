// Command pprofbroker is the conclave CLI (cmd/conclave) plus
// net/http/pprof served on the loopback address in BENCH_SCALE_PPROF_ADDR,
// for bench/scale -profile: the benchmark runs `pprofbroker broker run` as
// its broker and reads /debug/pprof/profile over the steady-state window,
// so that `go tool pprof -top` shows where the broker's time goes. It is
// never the CLI users run.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"

	"github.com/conclave-io/conclave/internal/cli"
)

func main() {
	if addr := os.Getenv("BENCH_SCALE_PPROF_ADDR"); addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !net.ParseIP(host).IsLoopback() {
			fmt.Fprintf(os.Stderr, "pprofbroker: BENCH_SCALE_PPROF_ADDR %q: a loopback host:port\n", addr)
			os.Exit(2)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pprofbroker: %v\n", err)
			os.Exit(2)
		}
		go func() { _ = http.Serve(ln, mux) }()
	}
	// As cmd/conclave's main.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
