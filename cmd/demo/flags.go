package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// usage is the demo's help text.
const usage = `Usage: demo [flags]

Runs WORKERS candidates in one process, all in the election KEY. The leader
logs "Doing work as the leader" every second; the others stand by.

The workers share the host's identity (or CONCLAVE_IDENTITY) and stand apart
by instance: worker-1.XXXXXXXX to worker-WORKERS.XXXXXXXX, with XXXXXXXX
drawn for each run (the banner shows it), so that copies of the demo on one
host, the second started with --config naming the first one's broker, are
all candidates of their own. Their log lines name them as instance=.

With no --config the demo starts its own single-node broker on a random free
port, with its store in a temporary directory that is removed at exit, and an
election TTL of --ttl. With --config FILE it connects to the brokers the file
names (plugin.choria.middleware_hosts); their bucket sets the TTL.

While it runs, type a letter and Enter:
  s   the leader steps down gracefully: another worker leads within milliseconds
  c   the leader crashes (its connection is cut, no hand-over): another worker
      leads once the key expires, about a TTL later
  d   delete the election key, as 'nats kv del' does: the leader is deposed and
      the next one starts leading a TTL later, when the deposed one has surely
      stopped
  q   quit, as Ctrl-C does: the leader hands over as it stops
A worker that stepped down or crashed rejoins the election two TTLs later.

Watch the election from another terminal, with the broker URL the demo prints:
  conclave election watch --server URL KEY
  nats --server URL kv get CHORIA_LEADER_ELECTION KEY

Flags:
  --config FILE   connect to the brokers FILE names instead of starting one
  --workers N     how many workers campaign (env WORKERS; default 10)
  --key NAME      the election to campaign in (env KEY; default demo)
  --ttl D         the embedded broker's election TTL, at least 1s (default 3s)
  --metrics ADDR  serve Prometheus /metrics and /healthz on ADDR
                  (default 127.0.0.1:9190; 127.0.0.1:0 for any free port; "" for none)
  --nosplay       start every worker at once instead of spread over a second
                  (env NOSPLAY=1)

Other environment variables: CONCLAVE_* set configuration keys, such as
CONCLAVE_LOGLEVEL=debug or CONCLAVE_IDENTITY=me. The short names WORKERS, KEY
and NOSPLAY (without the CONCLAVE_ prefix) are on purpose: they are the names
Choria's own election demo uses, so its instructions work here unchanged.
`

// errUsage marks errors in the command line: the demo exits with status 2.
var errUsage = errors.New("invalid command line")

// settings is what the command line and environment ask for.
type settings struct {
	config     string
	workers    int
	key        string
	ttl        time.Duration
	metrics    string
	noSplay    bool
	ttlFlagSet bool
	getenv     func(string) string // the environment, for CONCLAVE_* too
}

const (
	defaultWorkers = 10
	maxWorkers     = 1000
	defaultKey     = "demo"
	defaultTTL     = 3 * time.Second
	defaultMetrics = "127.0.0.1:9190"
)

// parseSettings reads the environment (through getenv), then the flags in
// args, which win.
func parseSettings(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	s := settings{workers: defaultWorkers, key: defaultKey, ttl: defaultTTL, metrics: defaultMetrics, getenv: getenv}
	if v := getenv("WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("%w: WORKERS=%q is not a whole number", errUsage, v)
		}
		s.workers = n
	}
	if v := getenv("KEY"); v != "" {
		s.key = v
	}
	if v := getenv("NOSPLAY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%w: NOSPLAY=%q: use 1 to start the workers at once, 0 to spread them", errUsage, v)
		}
		s.noSplay = b
	}

	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&s.config, "config", "", "")
	fs.IntVar(&s.workers, "workers", s.workers, "")
	fs.StringVar(&s.key, "key", s.key, "")
	fs.DurationVar(&s.ttl, "ttl", s.ttl, "")
	fs.StringVar(&s.metrics, "metrics", s.metrics, "")
	fs.BoolVar(&s.noSplay, "nosplay", s.noSplay, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	fs.Visit(func(f *flag.Flag) { s.ttlFlagSet = s.ttlFlagSet || f.Name == "ttl" })

	switch {
	case fs.NArg() > 0:
		return s, fmt.Errorf("%w: unexpected argument %q: the demo takes flags only", errUsage, fs.Arg(0))
	case s.workers < 1 || s.workers > maxWorkers:
		return s, fmt.Errorf("%w: %d workers: run 1 to %d", errUsage, s.workers, maxWorkers)
	case s.ttl < bucket.MinTTL:
		return s, fmt.Errorf("%w: --ttl %v: the election TTL must be at least %v", errUsage, s.ttl, bucket.MinTTL)
	case s.config != "" && s.ttlFlagSet:
		return s, fmt.Errorf("%w: --ttl sets the embedded broker's TTL and cannot go with --config: the TTL of %s's brokers is their plugin.choria.network.stream.leader_election_ttl", errUsage, s.config)
	}
	if err := streams.ValidateKey(s.key); err != nil {
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	return s, nil
}
