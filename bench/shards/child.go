package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// childFlag is the first argument of the benchmark's own processes: members
// of a shard group, or candidates of plain elections.
const childFlag = "-child"

// runChild runs one benchmark process until SIGTERM: members members of
// group (named identity-0, identity-1, … when more than one, else identity)
// or, with elections > 0, that many elections prefix.0 … with one candidate
// each, all over one connection. Members print a line per shard assigned
// and revoked, with the wall-clock time in Unix nanoseconds:
//
//	assigned IDENTITY SHARD TOKEN NANOS
//	revoked IDENTITY SHARD NANOS
func runChild(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	url := fs.String("url", "", "broker URL")
	identity := fs.String("identity", "", "member identity")
	group := fs.String("group", "", "shard group")
	n := fs.Int("n", 0, "shards of the group")
	members := fs.Int("members", 1, "members in this process")
	elections := fs.Int("elections", 0, "plain elections instead of a group")
	verbose := fs.Bool("v", false, "log what the members do, to standard error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := nats.Connect(*url, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var (
		out sync.Mutex
		wg  sync.WaitGroup
	)
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		if *verbose {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}
		out.Unlock()
	}
	errs := make(chan error, max(*members, *elections))
	if *elections > 0 {
		for i := range *elections {
			e, err := streams.NewElection(*identity, *group+"."+strconv.Itoa(i), js)
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs <- e.Start(ctx) }()
		}
	} else {
		for i := range *members {
			id := *identity
			if *members > 1 {
				id = fmt.Sprintf("%s-%d", *identity, i)
			}
			opts := []shards.Option{}
			if *verbose {
				opts = append(opts, shards.WithLogger(stderrLog{id}))
			}
			g, err := shards.NewGroup(id, *group, *n, js, append(opts,
				shards.OnAssigned(func(s int, t *streams.Term) {
					say("assigned %s %d %d %d", id, s, t.Token(), time.Now().UnixNano())
				}),
				shards.OnRevoked(func(s int) { say("revoked %s %d %d", id, s, time.Now().UnixNano()) }))...)
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs <- g.Start(ctx) }()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stderrLog writes a member's log lines to standard error with the time in
// milliseconds.
type stderrLog struct{ id string }

func (l stderrLog) print(level, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s %s %s\n", time.Now().Format("15:04:05.000"), l.id, level, fmt.Sprintf(format, args...))
}
func (l stderrLog) Debugf(format string, args ...any) { l.print("debug", format, args...) }
func (l stderrLog) Infof(format string, args ...any)  { l.print("info", format, args...) }
func (l stderrLog) Warnf(format string, args ...any)  { l.print("warn", format, args...) }
func (l stderrLog) Errorf(format string, args ...any) { l.print("error", format, args...) }
