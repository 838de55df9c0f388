// Command election measures the election provider on an in-process broker
// and prints a table: time to first leader, graceful handoff, crash failover,
// and the load one election puts on the broker with 1, 10 and 100 standbys.
//
//	go run ./bench/election            # the numbers in BENCHMARKS.md
//	go run ./bench/election -quick     # a smaller run
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "election bench:", err)
		os.Exit(1)
	}
}

type config struct {
	ttl       time.Duration
	firsts    int
	handoffs  int
	failovers int
	window    time.Duration
	standbys  []int
}

func run() error {
	cfg := config{standbys: []int{1, 10, 100}}
	quick := flag.Bool("quick", false, "fewer iterations, shorter windows")
	flag.DurationVar(&cfg.ttl, "ttl", time.Second, "bucket TTL")
	flag.IntVar(&cfg.firsts, "firsts", 100, "elections started from scratch")
	flag.IntVar(&cfg.handoffs, "handoffs", 200, "graceful handoffs")
	flag.IntVar(&cfg.failovers, "failovers", 20, "crash failovers")
	flag.DurationVar(&cfg.window, "window", 10*time.Second, "steady-state measuring window")
	flag.Parse()
	if *quick {
		cfg.firsts, cfg.handoffs, cfg.failovers, cfg.window = 20, 40, 5, 3*time.Second
	}

	dir, err := os.MkdirTemp("", "conclave-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true, SyncAlways: true})
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("broker did not start")
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()

	b := &bench{cfg: cfg, srv: srv}
	nc, err := b.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	b.js = js
	b.kv, err = js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "CHORIA_LEADER_ELECTION", TTL: cfg.ttl, History: 1, Storage: jetstream.FileStorage, MaxValueSize: 1024,
	})
	if err != nil {
		return err
	}

	fmt.Printf("Conclave election benchmark: loopback, in-process nats-server %s with SyncAlways, TTL %v\n\n", server.VERSION, cfg.ttl)
	fmt.Println("| measure | runs | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	first, err := b.timeToFirstLeader()
	if err != nil {
		return err
	}
	row("time to first leader", first, "")
	hand, err := b.handoffs()
	if err != nil {
		return err
	}
	row("graceful handoff (Stop → next OnWon)", hand, "")
	fail, err := b.failovers()
	if err != nil {
		return err
	}
	row("crash failover (connection closed → next OnWon)", fail, "")
	fmt.Printf("| crash failover as a multiple of TTL | %d | %.2f | %.2f | %.2f |\n\n",
		len(fail), ratio(pct(fail, 50), cfg.ttl), ratio(pct(fail, 99), cfg.ttl), ratio(slices.Max(fail), cfg.ttl))

	fmt.Printf("Steady state, one election, measured over %v:\n\n", cfg.window)
	fmt.Println("| standbys | key writes/s | broker messages in/s | broker messages out/s |")
	fmt.Println("|---|---|---|---|")
	for _, n := range cfg.standbys {
		w, in, out, err := b.steady(n)
		if err != nil {
			return err
		}
		fmt.Printf("| %d | %.2f | %.2f | %.2f |\n", n, w, in, out)
	}
	return nil
}

type bench struct {
	cfg  config
	srv  *server.Server
	kv   jetstream.KeyValue
	js   jetstream.JetStream
	keys int
}

func (b *bench) connect() (*nats.Conn, error) {
	return nats.Connect(b.srv.ClientURL(), nats.MaxReconnects(-1))
}

func (b *bench) key() string {
	b.keys++
	return fmt.Sprintf("bench_%d", b.keys)
}

// candidate is a running election with its win times.
type candidate struct {
	e    *streams.Election
	won  chan time.Time
	done chan struct{}
	nc   *nats.Conn
}

func (b *bench) start(key, identity string, own bool) (*candidate, error) {
	kv, js := b.kv, b.js
	c := &candidate{won: make(chan time.Time, 16), done: make(chan struct{})}
	if own {
		nc, err := b.connect()
		if err != nil {
			return nil, err
		}
		js, _ = jetstream.New(nc)
		if kv, err = js.KeyValue(context.Background(), "CHORIA_LEADER_ELECTION"); err != nil {
			return nil, err
		}
		c.nc = nc
	}
	e, err := streams.NewElection(identity, key, kv, streams.WithJetStream(js), streams.OnWon(func() { c.won <- time.Now() }))
	if err != nil {
		return nil, err
	}
	c.e = e
	go func() {
		defer close(c.done)
		_ = e.Start(context.Background())
	}()
	return c, nil
}

func (c *candidate) stop() {
	c.e.Stop()
	<-c.done
	if c.nc != nil {
		c.nc.Close()
	}
}

func (b *bench) timeToFirstLeader() ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < b.cfg.firsts; i++ {
		start := time.Now()
		c, err := b.start(b.key(), "first", false)
		if err != nil {
			return nil, err
		}
		select {
		case at := <-c.won:
			out = append(out, at.Sub(start))
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("no leader within 10s")
		}
		c.stop()
	}
	return out, nil
}

// waitWin waits for one of cs to win and returns it and when.
func waitWin(cs []*candidate, within time.Duration) (*candidate, time.Time, error) {
	deadline := time.After(within)
	for {
		for _, c := range cs {
			select {
			case at := <-c.won:
				return c, at, nil
			default:
			}
		}
		select {
		case <-deadline:
			return nil, time.Time{}, fmt.Errorf("no leader within %v", within)
		case <-time.After(100 * time.Microsecond):
		}
	}
}

func without(cs []*candidate, c *candidate) []*candidate {
	out := cs[:0:0]
	for _, o := range cs {
		if o != c {
			out = append(out, o)
		}
	}
	return out
}

func (b *bench) handoffs() ([]time.Duration, error) {
	key := b.key()
	var cs []*candidate
	for i := 0; i < 3; i++ {
		c, err := b.start(key, fmt.Sprintf("h%d", i), false)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	leader, _, err := waitWin(cs, 10*time.Second)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 0; i < b.cfg.handoffs; i++ {
		time.Sleep(20 * time.Millisecond) // let the standbys settle on the new leader
		start := time.Now()
		stopped := make(chan struct{})
		go func(l *candidate) { l.stop(); close(stopped) }(leader)
		cs = without(cs, leader)
		next, at, err := waitWin(cs, 5*time.Second)
		if err != nil {
			return nil, err
		}
		<-stopped
		out = append(out, at.Sub(start))
		leader = next
		c, err := b.start(key, fmt.Sprintf("h%d", i+3), false)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.stop()
	}
	return out, nil
}

func (b *bench) failovers() ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < b.cfg.failovers; i++ {
		key := b.key()
		leader, err := b.start(key, "crashing", true)
		if err != nil {
			return nil, err
		}
		if _, _, err := waitWin([]*candidate{leader}, 10*time.Second); err != nil {
			return nil, err
		}
		standby, err := b.start(key, "standby", false)
		if err != nil {
			return nil, err
		}
		// Crash at a random point of the renewal cycle.
		time.Sleep(b.cfg.ttl/3 + time.Duration(i)*b.cfg.ttl/3/time.Duration(max(b.cfg.failovers, 1)))
		start := time.Now()
		leader.nc.Close()
		_, at, err := waitWin([]*candidate{standby}, 3*b.cfg.ttl+5*time.Second)
		if err != nil {
			return nil, err
		}
		out = append(out, at.Sub(start))
		standby.stop()
		leader.stop()
	}
	return out, nil
}

// steady measures one election with a leader and n standbys: how many writes
// the key sees, and how many messages the broker handles, per second.
func (b *bench) steady(n int) (writes, in, out float64, err error) {
	key := b.key()
	var cs []*candidate
	var mu sync.Mutex
	for i := 0; i <= n; i++ {
		c, err := b.start(key, fmt.Sprintf("s%d", i), i > 0)
		if err != nil {
			return 0, 0, 0, err
		}
		mu.Lock()
		cs = append(cs, c)
		mu.Unlock()
	}
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	if _, _, err := waitWin(cs, 10*time.Second); err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(b.cfg.ttl) // let every standby's watch settle
	st0, _ := b.kv.Status(context.Background())
	v0, _ := b.srv.Varz(nil)
	time.Sleep(b.cfg.window)
	st1, _ := b.kv.Status(context.Background())
	v1, _ := b.srv.Varz(nil)
	secs := b.cfg.window.Seconds()
	seq0 := st0.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	seq1 := st1.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	return float64(seq1-seq0) / secs, float64(v1.InMsgs-v0.InMsgs) / secs, float64(v1.OutMsgs-v0.OutMsgs) / secs, nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func ratio(d, ttl time.Duration) float64 { return d.Seconds() / ttl.Seconds() }

func row(name string, ds []time.Duration, _ string) {
	fmt.Printf("| %s | %d | %v | %v | %v |\n", name, len(ds), round(pct(ds, 50)), round(pct(ds, 99)), round(slices.Max(ds)))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(10 * time.Microsecond)
	}
}
