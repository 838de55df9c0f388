package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

const (
	// helperEnv carries the JSON configuration of a broker child process.
	helperEnv = "CONCLAVE_BROKER_HELPER"
	// readyLine prefixes the child's client URL on its standard output.
	readyLine = "CONCLAVE-BROKER-READY "

	// durabilitySyncEnv set to "false" runs TestAcknowledgedWritesSurviveSIGKILL
	// with SyncAlways off, for trying by hand; the test is for the default.
	durabilitySyncEnv = "CONCLAVE_DURABILITY_SYNC_ALWAYS"
	// durabilityCyclesEnv overrides the number of kill/restart cycles.
	durabilityCyclesEnv = "CONCLAVE_DURABILITY_CYCLES"
)

// TestHelperBrokerProcess is not a test: it is the broker child process of
// TestAcknowledgedWritesSurviveSIGKILL. It starts a broker from the
// configuration in helperEnv, prints its client URL, and runs until killed
// or until its standard input closes (the parent went away).
func TestHelperBrokerProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("helper process for TestAcknowledgedWritesSurviveSIGKILL")
	}
	var cfg config.Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "helper: bad configuration: %v\n", err)
		os.Exit(2)
	}
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	b, err := broker.New(&cfg, logrus.NewEntry(l))
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	startCtx, startCancel := context.WithTimeout(ctx, time.Minute)
	defer startCancel()
	if err := b.Start(startCtx); err != nil {
		fmt.Fprintf(os.Stderr, "helper: %v\n", err)
		os.Exit(2)
	}
	fmt.Printf("%s%s\n", readyLine, b.ClientURL())
	<-ctx.Done()
	b.Shutdown()
	os.Exit(0)
}

// child is a broker running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	url    string
	lines  chan struct{} // closed when the stdout reader ends
}

// startChild runs the test binary as a broker process on cfg.
func startChild(t *testing.T, cfg *config.Config) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBrokerProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	c := &child{cmd: cmd, stderr: &bytes.Buffer{}, lines: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the broker process: %v", err)
	}
	urls := make(chan string, 1)
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), readyLine); ok {
				urls <- url
			}
		}
	}()
	select {
	case c.url = <-urls:
		return c
	case <-c.lines:
		c.wait()
		t.Fatalf("broker process ended before it was ready:\n%s", c.stderr)
	case <-time.After(90 * time.Second):
		c.kill(t)
		t.Fatalf("broker process not ready after 90s:\n%s", c.stderr)
	}
	return nil
}

// kill sends SIGKILL: no shutdown, no flushing.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Errorf("SIGKILL: %v", err)
	}
	c.wait()
}

func (c *child) wait() {
	_ = c.stdin.Close()
	<-c.lines
	_ = c.cmd.Wait()
}

// keyLog is what the writer of one key knows: the last acknowledged
// revision and value, and the write in flight when the broker died.
type keyLog struct {
	acked      uint64
	ackedValue string
	inFlight   string // value of an unacknowledged write, "" if none
}

// TestAcknowledgedWritesSurviveSIGKILL runs a broker in a child process,
// writes election-style chains (Create, then compare-and-swap Updates) to a
// few keys, SIGKILLs the broker right after an acknowledgement with writes
// still in flight, restarts it on the same store and checks that every
// acknowledged write is there. It repeats that several times, continuing the
// chains from what survived.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	cycles := 5
	if n, err := strconv.Atoi(os.Getenv(durabilityCyclesEnv)); err == nil && n > 0 {
		cycles = n
	}
	cfg := brokertest.Config(t, "durable")
	cfg.LeaderElectionTTL = time.Hour // nothing expires during the test
	if os.Getenv(durabilitySyncEnv) == "false" {
		cfg.SyncAlways = false
	}
	t.Logf("sync_always = %v, %d cycles", cfg.SyncAlways, cycles)

	const (
		keys         = 4
		writesPerRun = 1000 // acknowledged writes per cycle, over all keys
	)
	logs := make([]keyLog, keys)
	lastSeq := uint64(0)
	for cycle := range cycles {
		c := startChild(t, cfg)
		kv, js, closeConn := childKV(t, c.url)

		// Everything acknowledged so far is there.
		verify(t, cycle, js, kv, logs, lastSeq)

		// Write until writesPerRun acknowledgements, then kill at once.
		var acks atomic.Int64
		var killOnce sync.Once
		killed := make(chan struct{})
		var wg sync.WaitGroup
		for k := range keys {
			wg.Go(func() {
				writeChain(kv, k, cycle, &logs[k], func() {
					if acks.Add(1) == writesPerRun {
						killOnce.Do(func() {
							_ = c.cmd.Process.Kill()
							close(killed)
						})
					}
				}, killed)
			})
		}
		wg.Wait()
		c.wait()
		closeConn()
		for _, l := range logs {
			lastSeq = max(lastSeq, l.acked)
		}
		if acks.Load() < writesPerRun {
			t.Fatalf("cycle %d: only %d writes acknowledged before the writers stopped:\n%s", cycle, acks.Load(), c.stderr)
		}
	}

	// One last restart to check the final kill.
	c := startChild(t, cfg)
	kv, js, closeConn := childKV(t, c.url)
	verify(t, cycles, js, kv, logs, lastSeq)
	closeConn()
	c.kill(t)
}

// childKV connects to a broker process without reconnecting, so that writes
// fail at once when it dies.
func childKV(t *testing.T, url string) (jetstream.KeyValue, jetstream.JetStream, func()) {
	t.Helper()
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	return kv, js, nc.Close
}

// writeChain renews key k by compare-and-swap from its last acknowledged
// revision (creating it first) until the broker is killed, calling acked
// after each acknowledgement.
func writeChain(kv jetstream.KeyValue, k, cycle int, l *keyLog, acked func(), killed <-chan struct{}) {
	key := fmt.Sprintf("election-%d", k)
	for n := 0; ; n++ {
		select {
		case <-killed:
			return
		default:
		}
		value := fmt.Sprintf("node-%d.cycle-%d.write-%d", k, cycle, n)
		l.inFlight = value
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var rev uint64
		var err error
		if l.acked == 0 {
			rev, err = kv.Create(ctx, key, []byte(value))
		} else {
			rev, err = kv.Update(ctx, key, []byte(value), l.acked)
		}
		cancel()
		if err != nil {
			return // the broker died; the write may or may not have landed
		}
		l.acked, l.ackedValue, l.inFlight = rev, value, ""
		acked()
	}
}

// verify checks that every acknowledged write survived: the stream reaches
// the highest acknowledged revision, and each key holds its last
// acknowledged value — or the one write that was in flight when the broker
// died, at a later revision. It moves the logs on to what it found.
func verify(t *testing.T, cycle int, js jetstream.JetStream, kv jetstream.KeyValue, logs []keyLog, lastSeq uint64) {
	landed := 0
	defer func() {
		t.Logf("cycle %d: all acknowledged writes present (last revision %d); %d unacknowledged writes landed", cycle, lastSeq, landed)
	}()
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, bucket.Stream)
	if err != nil {
		t.Fatalf("cycle %d: stream: %v", cycle, err)
	}
	if got := st.CachedInfo().State.LastSeq; got < lastSeq {
		t.Errorf("cycle %d: stream last sequence %d < last acknowledged revision %d: acknowledged writes lost", cycle, got, lastSeq)
	}
	for k := range logs {
		l := &logs[k]
		if l.acked == 0 {
			continue
		}
		key := fmt.Sprintf("election-%d", k)
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Errorf("cycle %d: key %s (acknowledged revision %d): %v", cycle, key, l.acked, err)
			continue
		}
		switch {
		case e.Revision() == l.acked && string(e.Value()) == l.ackedValue:
		case e.Revision() > l.acked && l.inFlight != "" && string(e.Value()) == l.inFlight:
			// The unacknowledged write landed: fine, the chain goes on from it.
			l.acked, l.ackedValue = e.Revision(), l.inFlight
			landed++
		default:
			t.Errorf("cycle %d: key %s at revision %d = %q; last acknowledged revision %d = %q, in flight %q",
				cycle, key, e.Revision(), e.Value(), l.acked, l.ackedValue, l.inFlight)
		}
		l.inFlight = ""
	}
	if t.Failed() {
		t.FailNow()
	}
}
