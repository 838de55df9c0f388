package transport

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// holdConn holds the client's writes that carry a consumer-create request
// while armed, one at a time, until released.
type holdConn struct {
	net.Conn
	g *createGate
}

type createGate struct {
	armed   atomic.Bool
	held    chan struct{} // a create request is held
	release chan struct{} // let one go
}

func (c holdConn) Write(b []byte) (int, error) {
	if c.g.armed.Load() && bytes.Contains(b, []byte("CONSUMER.CREATE")) {
		c.g.held <- struct{}{}
		<-c.g.release
	}
	return c.Conn.Write(b)
}

// awaitHeld waits for a consumer-create request to be held.
func (g *createGate) awaitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no consumer-create request within 10s")
	}
}

// gatedHub returns a hub on a bucket of a new server whose connection
// holds consumer-create requests at g while g is armed.
func gatedHub(t *testing.T) (*watchHub, *createGate) {
	t.Helper()
	url := startServer(t)
	createBucket(t, connect(t, url), 30*time.Second)
	g := &createGate{held: make(chan struct{}), release: make(chan struct{})}
	_, js := natstest.Connect(t, url, nats.SetCustomDialer(gateDialer{g}))
	kv, err := js.KeyValue(context.Background(), bucketName)
	if err != nil {
		t.Fatal(err)
	}
	return hubFor(kv, js, nopLogger{}, writtenAfter), g
}

// awaitSetFeedsSettled waits until no set feed is being made or due to be
// made again, so that the next consumer creation is the one a test causes.
func awaitSetFeedsSettled(t *testing.T, h *watchHub) {
	t.Helper()
	eventually(t, 10*time.Second, "set feeds settled", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, f := range h.setFeeds {
			if f.remaking || f.dirty || f.caught != f.gen {
				return false
			}
		}
		return true
	})
}

type gateDialer struct{ g *createGate }

func (d gateDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return holdConn{c, d.g}, nil
}

// TestSetFeedRemadeDuringTheFoldDropsTheMovedKeys: the whole-bucket feed is
// made while a set feed's consumer is being made again with keys that then
// move onto it. The set feed keeps its few covered keys and is made once
// more, filtering on at most twice those, so that the moved keys' writes
// do not reach the process twice.
func TestSetFeedRemadeDuringTheFoldDropsTheMovedKeys(t *testing.T) {
	h, g := gatedHub(t)
	ctx := context.Background()
	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	full := MaxKeyFeeds + (maxSetFeeds-1)*setKeys
	ws := make(keyWatches, full+setKeys)
	defer ws.stop()
	follow := func(from, to int) {
		t.Helper()
		subscribeAtOnce(t, h, ws, from, to, key)
	}
	waitNil := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if ent := ws.next(t, i); ent != nil {
				t.Fatalf("k%d: got %v, want the end of the initial values", i, ent)
			}
		}
	}
	// Five key feeds and five full set feeds, then a sixth with 10 keys.
	follow(0, full)
	waitNil(0, full)
	follow(full, full+10)
	waitNil(full, full+10)
	h.mu.Lock()
	sf := h.setFeeds[len(h.setFeeds)-1]
	nsets := len(h.setFeeds)
	h.mu.Unlock()
	if nsets != maxSetFeeds {
		t.Fatalf("%d set feeds", nsets)
	}
	awaitSetFeedsSettled(t, h)
	g.armed.Store(true)
	next := full + 10
	follow(next, next+1) // K1 joins: remake R1, its create held
	g.awaitHeld(t)
	follow(next+1, full+setKeys) // the rest join while R1 is made: dirty
	g.release <- struct{}{}      // R1 is made; R2 (dirty) follows with every key
	g.awaitHeld(t)               // R2's create, filters computed with every key, held
	h.mu.Lock()
	keys, uncovered := len(sf.keys), 0
	for _, c := range sf.keys {
		if !c {
			uncovered++
		}
	}
	h.mu.Unlock()
	t.Logf("set feed: %d keys, %d waiting", keys, uncovered)
	// One more key: the sets are full, the whole-bucket feed is made and
	// the waiting keys move to it, while R2's create is in flight.
	xs := make(chan jetstream.KeyWatcher, 1)
	go func() {
		w, err := h.subscribe(ctx, key(full+setKeys), 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		xs <- w
	}()
	defer func() {
		if w := <-xs; w != nil {
			w.Stop()
		}
	}()
	eventually(t, 10*time.Second, "the whole-bucket feed made", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.allFeed != nil
	})
	g.armed.Store(false)
	g.release <- struct{}{}
	eventually(t, 10*time.Second, "consumers settled", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !sf.remaking && sf.caught == sf.gen && h.allFeed.ready
	})
	h.mu.Lock()
	t.Logf("after the fold: set feed follows %d keys, its consumer filters on %d", len(sf.keys), len(sf.genKeys))
	moved := key(full + setKeys - 1) // joined last: waiting, moved
	if h.setOf[moved] != nil {
		t.Fatalf("%s not moved", moved)
	}
	h.mu.Unlock()
	eventually(t, 5*time.Second, "the set feed to filter on at most twice its keys", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(sf.genKeys) <= 2*len(sf.keys)
	})
}

// TestRestartDuringTheFold: a subscriber waiting in a set feed's first
// start asks for its feed to be made again (as a campaign does when the
// bucket was made again) while the whole-bucket feed is made and the fold
// moves it. Under the race detector this checks that Restart reads the
// subscription's feed under the hub's lock, which the fold writes.
func TestRestartDuringTheFold(t *testing.T) {
	h, g := gatedHub(t)
	ctx := context.Background()
	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	full := MaxKeyFeeds + (maxSetFeeds-1)*setKeys
	ws := make(keyWatches, full+setKeys+1)
	defer ws.stop()
	// sub subscribes to key i; calls for distinct keys may run at once.
	sub := func(i int) jetstream.KeyWatcher {
		w, err := h.subscribe(ctx, key(i), 30*time.Second)
		if err != nil {
			t.Error(err)
			return nil
		}
		ws[i] = w
		return w
	}
	subscribeAtOnce(t, h, ws, 0, full, key)
	for i := range full {
		if ent := ws.next(t, i); ent != nil {
			t.Fatalf("k%d: got %v, want the end of the initial values", i, ent)
		}
	}
	var wg sync.WaitGroup
	awaitSetFeedsSettled(t, h)
	g.armed.Store(true)
	wg.Go(func() { sub(full) }) // makes the sixth set feed: its create held
	g.awaitHeld(t)
	w := sub(full + 1).(*hubWatch) // waits in it
	stop := make(chan struct{})
	var rg sync.WaitGroup
	rg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				w.Restart()
			}
		}
	})
	for i := full + 2; i < full+setKeys; i++ {
		sub(i)
	}
	wg.Go(func() { sub(full + setKeys) }) // the whole-bucket feed: the fold moves w
	eventually(t, 10*time.Second, "the whole-bucket feed made", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.allFeed != nil
	})
	close(stop)
	rg.Wait()
	g.armed.Store(false)
	close(g.release)
	wg.Wait()
}
