package conclave_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/embedded"
	"github.com/conclave-io/conclave/inter"
	"github.com/conclave-io/conclave/internal/brokertest"
	"github.com/conclave-io/conclave/internal/natstest"
)

// connectionsNamed counts the server's client connections named name.
func connectionsNamed(t *testing.T, srv *server.Server, name string) int {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatalf("Connz: %v", err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == name {
			n++
		}
	}
	return n
}

func TestConnectionIsLazyAndShared(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("lazy-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	if n := connectionsNamed(t, b.Server(), "lazy-node"); n != 0 {
		t.Fatalf("%d connections before first use, want 0", n)
	}
	nc, err := fw.Connection(ctx)
	if err != nil {
		t.Fatalf("Connection: %v", err)
	}
	again, err := fw.Connection(ctx)
	if err != nil || again != nc {
		t.Fatalf("second Connection = %p, %v; want the same %p", again, err, nc)
	}
	if got := nc.Opts.Name; got != "lazy-node" {
		t.Errorf("connection named %q, want the identity", got)
	}
	if n := connectionsNamed(t, b.Server(), "lazy-node"); n != 1 {
		t.Errorf("%d connections after use, want 1", n)
	}
}

func TestNewWithConfigDoesNotConnect(t *testing.T) {
	// Nothing listens there: building the framework must not care.
	fw := newFramework(t, testConfig("lazy-node", natstest.DeadURL(t)))
	if fw.Identity() != "lazy-node" {
		t.Fatal("framework not usable")
	}
}

func TestUnreachableBroker(t *testing.T) {
	dead, dead2 := natstest.DeadURL(t), natstest.DeadURL(t)
	tests := []struct {
		name    string
		servers []string
		where   string
	}{
		{"one server", []string{dead}, dead},
		{"two servers", []string{dead, dead2}, dead + ", " + dead2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFramework(t, testConfig("lonely-node", tc.servers...))
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err := fw.Connection(ctx)
			if !errors.Is(err, conclave.ErrNoBroker) {
				t.Fatalf("Connection error %v does not match ErrNoBroker", err)
			}
			for _, want := range []string{"no broker at " + tc.where, "conclave broker run --config FILE", "plugin.choria.middleware_hosts"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			// The election constructors wait for a broker while ctx
			// lasts, and then report the same.
			short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancelShort()
			if _, err := fw.NewElection(short, nil, "app"); !errors.Is(err, conclave.ErrNoBroker) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("NewElection error %v does not match ErrNoBroker and context.DeadlineExceeded", err)
			}
		})
	}
}

func TestConnectionHonoursContext(t *testing.T) {
	fw := newFramework(t, testConfig("ctx-node", natstest.DeadURL(t)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fw.Connection(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Connection with a cancelled context: %v, want context.Canceled", err)
	}
}

// silentBroker listens where nothing answers a NATS client: a connection
// made to it waits for the server's INFO until its timeout. Each accepted
// connection is sent on accepted and held open until the test ends.
func silentBroker(t *testing.T) (url string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return "nats://" + ln.Addr().String(), conns
}

// connectionUnderWay calls fw.Connection in the background and returns
// once its connection reached the silent broker: where its error will
// come, and the broker's end of the connection, which fails the dial once
// closed.
func connectionUnderWay(t *testing.T, fw *conclave.Framework, accepted <-chan net.Conn) (<-chan error, net.Conn) {
	t.Helper()
	result := make(chan error, 1)
	go func() {
		_, err := fw.Connection(context.Background())
		result <- err
	}()
	select {
	case held := <-accepted:
		return result, held
	case <-time.After(wait):
		t.Fatal("the Connection did not reach the broker")
		return nil, nil
	}
}

// TestConnectionBeingMadeHoldsNoOneUp: while the shared connection is
// being made (here to a broker that never answers, for the 2 s a first
// connection may take), another caller waits for it only until its own
// context ends, the framework's other methods answer, and Close returns at
// once; the connection being made then ends with ErrClosed.
func TestConnectionBeingMadeHoldsNoOneUp(t *testing.T) {
	url, accepted := silentBroker(t)
	fw := newFramework(t, testConfig("dialling-node", url))
	first, held := connectionUnderWay(t, fw, accepted)
	short, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := fw.Connection(short)
		second <- err
	}()
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a second Connection whose context ended: %v, want context.Canceled", err)
		}
	case <-first:
		t.Fatal("the first Connection ended before the second's context")
	case <-time.After(wait):
		t.Fatal("a second Connection waited past its own context for the first")
	}
	if got := fw.Servers(); len(got) != 1 || got[0] != url {
		t.Errorf("Servers while connecting = %v, want [%s]", got, url)
	}
	closed := make(chan error, 1)
	go func() { closed <- fw.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-first:
		t.Fatal("Close waited for the connection being made")
	case <-time.After(wait):
		t.Fatal("Close did not return")
	}
	_ = held.Close() // the connection being made fails now
	select {
	case err := <-first:
		if !errors.Is(err, conclave.ErrClosed) {
			t.Errorf("the Connection under way as Close was called: %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("the first Connection did not end")
	}
}

// slowProxy listens where each connection reaches target only after
// delay; each accepted connection is signalled on accepted.
func slowProxy(t *testing.T, target string, delay time.Duration) (url string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	signal := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			signal <- struct{}{}
			go func() {
				defer c.Close()
				time.Sleep(delay)
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return "nats://" + ln.Addr().String(), signal
}

// TestAWaiterDialsInTurnWhenTheDiallersContextCutItShort: a caller waiting
// for the shared connection being made does not take the failure of a dial
// that its own caller's context cut short as its answer: it dials in turn,
// under its own context, and connects.
func TestAWaiterDialsInTurnWhenTheDiallersContextCutItShort(t *testing.T) {
	b := startBroker(t)
	url, accepted := slowProxy(t, strings.TrimPrefix(b.ClientURL(), "nats://"), 500*time.Millisecond)
	fw := newFramework(t, testConfig("slow-node", url))
	first := make(chan error, 1)
	go func() {
		short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := fw.Connection(short)
		first <- err
	}()
	select {
	case <-accepted: // the short dial is under way
	case <-time.After(wait):
		t.Fatal("the first Connection did not reach the broker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := fw.Connection(ctx); err != nil {
		t.Fatalf("a Connection with time enough, made while a shorter one dialled: %v", err)
	}
	if err := <-first; err == nil {
		t.Error("the Connection whose 200ms context ended before the broker answered succeeded")
	}
}

// inertBroker is a LocalBroker that starts at once and serves nobody.
type inertBroker struct{ started chan struct{} }

func (b inertBroker) Start(context.Context) error   { close(b.started); return nil }
func (inertBroker) ClientURL() string               { return "nats://127.0.0.1:1" }
func (inertBroker) InProcessOptions() []nats.Option { return nil }
func (inertBroker) Shutdown()                       {}

// TestUseBrokerWaitsForAConnectionBeingMade: UseBroker called while the
// shared connection is being made waits for it: when that dial fails, the
// broker is started and used, not refused as if a connection were made.
func TestUseBrokerWaitsForAConnectionBeingMade(t *testing.T) {
	url, accepted := silentBroker(t)
	fw := newFramework(t, testConfig("use-node", url))
	dialled, held := connectionUnderWay(t, fw, accepted)
	b := inertBroker{started: make(chan struct{})}
	used := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		used <- fw.UseBroker(ctx, b)
	}()
	_ = held.Close() // the dial under way fails
	if err := <-dialled; err == nil {
		t.Error("the dial to a broker that hung up succeeded")
	}
	if err := <-used; err != nil {
		t.Fatalf("UseBroker after the dial under way failed: %v", err)
	}
	if got := fw.Servers(); len(got) != 1 || got[0] != b.ClientURL() {
		t.Errorf("Servers after UseBroker = %v, want the broker's %s", got, b.ClientURL())
	}
}

func TestConnectMakesOwnConnection(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("own-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := fw.Connect(ctx)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	shared, err := fw.Connection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nc == shared {
		t.Fatal("Connect returned the shared connection")
	}
	if n := connectionsNamed(t, b.Server(), "own-node"); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	fw.Close()
	if nc.IsClosed() {
		t.Error("Close closed a connection the caller owns")
	}
	if !shared.IsClosed() {
		t.Error("Close left the shared connection open")
	}
}

func TestWithConnection(t *testing.T) {
	b := startBroker(t)
	cfg := testConfig("given-node", natstest.DeadURL(t)) // not used: the connection is given
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	given := newFramework(t, testConfig("dialer", b.ClientURL()))
	nc, err := given.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	fw := newFramework(t, cfg, conclave.WithConnection(nc))
	got, err := fw.Connection(ctx)
	if err != nil || got != nc {
		t.Fatalf("Connection = %p, %v; want the given %p", got, err, nc)
	}
	fw.Close()
	if nc.IsClosed() {
		t.Error("Close closed the connection given with WithConnection")
	}
}

func TestClose(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("closing-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := fw.Connection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := fw.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !nc.IsClosed() {
		t.Error("shared connection still open")
	}
	for name, call := range map[string]func() error{
		"Connection":  func() error { _, err := fw.Connection(ctx); return err },
		"Connect":     func() error { _, err := fw.Connect(ctx); return err },
		"NewElection": func() error { _, err := fw.NewElection(ctx, nil, "app"); return err },
		"StartBroker": func() error { _, err := embedded.StartBroker(ctx, fw); return err },
	} {
		if err := call(); !errors.Is(err, conclave.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// TestCloseRefusesAGivenConnection: after Close, the methods that take a
// connection return ErrClosed for a connection of the caller's too, as
// they do for the shared one, instead of handing out elections of a
// closed framework.
func TestCloseRefusesAGivenConnection(t *testing.T) {
	b := startBroker(t)
	fw := newFramework(t, testConfig("closing-node", b.ClientURL()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := fw.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := fw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, call := range map[string]func() error{
		"Bucket":        func() error { _, err := fw.Bucket(ctx, nc); return err },
		"NewElection":   func() error { _, err := fw.NewElection(ctx, nc, "app"); return err },
		"NewCampaign":   func() error { _, err := fw.NewCampaign(ctx, nc, "app"); return err },
		"NewObserver":   func() error { _, err := fw.NewObserver(ctx, nc, "app"); return err },
		"NewShardGroup": func() error { _, err := fw.NewShardGroup(ctx, nc, "group", 2); return err },
	} {
		if err := call(); !errors.Is(err, conclave.ErrClosed) {
			t.Errorf("%s over a connection of the caller's after Close: %v, want ErrClosed", name, err)
		}
	}
}

// messageHook passes every logged message of one component to a channel.
type messageHook struct {
	component string
	messages  chan string
}

func (h *messageHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *messageHook) Fire(e *logrus.Entry) error {
	if e.Data["component"] == h.component {
		select {
		case h.messages <- e.Message:
		default:
		}
	}
	return nil
}

// awaitMessage waits for a message containing text.
func (h *messageHook) awaitMessage(t *testing.T, text string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case m := <-h.messages:
			if strings.Contains(m, text) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q logged within %v", text, wait)
		}
	}
}

func TestConnectionReconnectsAndLogs(t *testing.T) {
	c := brokertest.StartCluster(t, 1, nil)
	logger, _ := bufferLogger()
	hook := &messageHook{component: "connection", messages: make(chan string, 100)}
	logger.AddHook(hook)
	fw := newFramework(t, testConfig("reconnecting-node", c.Broker(0).ClientURL()), conclave.WithLogger(logger))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := fw.Connection(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c.Stop(0)
	hook.awaitMessage(t, "Disconnected from the broker, reconnecting")
	c.Restart(0)
	hook.awaitMessage(t, "Reconnected to "+c.Broker(0).ClientURL())
	if !nc.IsConnected() {
		t.Error("not connected after the reconnection was logged")
	}
	if again, _ := fw.Connection(ctx); again != nc {
		t.Error("the framework made a new connection instead of reconnecting")
	}
}

// failingBroker is a LocalBroker that cannot start.
type failingBroker struct{ conclave.LocalBroker }

var errNoStart = errors.New("cannot start")

func (failingBroker) Start(context.Context) error { return errNoStart }

func TestUseBroker(t *testing.T) {
	fw := newFramework(t, testConfig("using-node"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := fw.UseBroker(ctx, nil); !errors.Is(err, conclave.ErrInvalidOption) {
		t.Errorf("UseBroker(nil): %v, want ErrInvalidOption", err)
	}
	if err := fw.UseBroker(ctx, failingBroker{}); !errors.Is(err, errNoStart) {
		t.Errorf("UseBroker of a broker that cannot start: %v, want its error", err)
	}
	if got := fw.Servers(); len(got) != 1 || got[0] != conclave.DefaultServer {
		t.Errorf("Servers = %v after a failed start, want [%s]: the framework kept the broker", got, conclave.DefaultServer)
	}
}

// signalHook closes seen at the first log line containing text.
type signalHook struct {
	text string
	once sync.Once
	seen chan struct{}
}

func (h *signalHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *signalHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, h.text) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}

// TestNewElectionWaitsForTheBroker: NewElection with no broker up yet
// waits for one, as `conclave election run` does, saying so once, and
// returns the election once the broker answers.
func TestNewElectionWaitsForTheBroker(t *testing.T) {
	port := natstest.FreePort(t)
	log := brokertest.Logger(t).Logger
	hook := &signalHook{text: "Waiting for a broker", seen: make(chan struct{})}
	log.AddHook(hook)
	fw := newFramework(t, testConfig("patient-node", "nats://127.0.0.1:"+strconv.Itoa(port)), conclave.WithLogger(log))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type result struct {
		e   inter.Election
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := fw.NewElection(ctx, nil, "app")
		done <- result{e, err}
	}()
	select {
	case <-hook.seen:
	case r := <-done:
		t.Fatalf("NewElection returned before any broker was up: %v", r.err)
	case <-ctx.Done():
		t.Fatal("NewElection did not say it waits for a broker")
	}
	brokertest.StartSingle(t, func(c *config.Config) { c.ClientPort = port; c.LeaderElectionTTL = testTTL })
	select {
	case r := <-done:
		if r.err != nil || r.e == nil {
			t.Fatalf("NewElection once the broker is up: %v", r.err)
		}
	case <-ctx.Done():
		t.Fatal("NewElection still waits after the broker came up")
	}
}

// TestNewElectionWaitsForTheBucketOfABrokerThatCameUp: a broker answers
// clients a moment before it has provisioned its bucket. NewElection,
// having waited for the broker, waits for the bucket too (it fails at
// once only on a broker that was up when asked: TestMissingBucket).
func TestNewElectionWaitsForTheBucketOfABrokerThatCameUp(t *testing.T) {
	port := natstest.FreePort(t)
	log := brokertest.Logger(t).Logger
	brokerHook := &signalHook{text: "Waiting for a broker", seen: make(chan struct{})}
	bucketHook := &signalHook{text: "provision its bucket", seen: make(chan struct{})}
	log.AddHook(brokerHook)
	log.AddHook(bucketHook)
	fw := newFramework(t, testConfig("patient-node", "nats://127.0.0.1:"+strconv.Itoa(port)), conclave.WithLogger(log))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := fw.NewElection(ctx, nil, "app")
		done <- err
	}()
	for _, h := range []*signalHook{brokerHook, bucketHook} {
		select {
		case <-h.seen:
		case err := <-done:
			t.Fatalf("NewElection returned while waiting for %q: %v", h.text, err)
		case <-ctx.Done():
			t.Fatalf("NewElection did not say %q", h.text)
		}
		if h == brokerHook {
			// A server with JetStream and, for now, no bucket.
			natstest.Start(t, &server.Options{ServerName: "starting", Port: port, JetStream: true})
		}
	}
	_, js := natstest.Connect(t, "nats://127.0.0.1:"+strconv.Itoa(port))
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket.Name, TTL: testTTL, History: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("NewElection once the bucket is there: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("NewElection still waits after the bucket was made")
	}
}
