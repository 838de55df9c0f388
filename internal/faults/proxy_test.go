package faults

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newTestProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := NewProxy(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// read returns the next line, or an error if none arrives within d.
func (c *client) read(d time.Duration) (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	return c.r.ReadString('\n')
}

func TestProxyPassesTraffic(t *testing.T) {
	p := newTestProxy(t, echoServer(t))
	c := dial(t, p)
	c.send(t, "hello")
	if got, err := c.read(5 * time.Second); got != "hello\n" || err != nil {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestProxyCutDropsBytesAndHealClosesDamagedConnections(t *testing.T) {
	p := newTestProxy(t, echoServer(t))
	c := dial(t, p)
	c.send(t, "before")
	if _, err := c.read(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	c.send(t, "lost")
	if got, err := c.read(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v through a cut link, want nothing", got, err)
	}
	late := dial(t, p) // accepted while cut
	late.send(t, "also lost")
	if got, err := late.read(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v on a connection made while cut, want nothing", got, err)
	}

	p.Heal(false)
	for _, cl := range []*client{c, late} {
		if got, err := cl.read(5 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("read %q, %v after heal on a connection that lost bytes, want EOF", got, err)
		}
	}
	fresh := dial(t, p)
	fresh.send(t, "after")
	if got, err := fresh.read(5 * time.Second); got != "after\n" || err != nil {
		t.Fatalf("read %q, %v after heal", got, err)
	}
}

func TestProxyStallHoldsBytesUntilHeal(t *testing.T) {
	p := newTestProxy(t, echoServer(t))
	c := dial(t, p)
	c.send(t, "warm")
	if _, err := c.read(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	c.send(t, "held")
	if got, err := c.read(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v through a stalled link, want nothing yet", got, err)
	}
	p.Heal(false)
	if got, err := c.read(5 * time.Second); got != "held\n" || err != nil {
		t.Fatalf("read %q, %v after heal, want the held line", got, err)
	}
}

func TestProxyHealWithResetClosesEveryConnection(t *testing.T) {
	p := newTestProxy(t, echoServer(t))
	c := dial(t, p)
	c.send(t, "x")
	if _, err := c.read(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Heal(true)
	if got, err := c.read(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read %q, %v after a reset, want EOF", got, err)
	}
}

func TestProxyDelaysEachDirection(t *testing.T) {
	p := newTestProxy(t, echoServer(t))
	const d = 100 * time.Millisecond
	p.SetDelay(d)
	c := dial(t, p)
	start := time.Now()
	c.send(t, "slow")
	if got, err := c.read(5 * time.Second); got != "slow\n" || err != nil {
		t.Fatalf("read %q, %v", got, err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v, want at least %v", rtt, 2*d)
	}
}

func TestProxyClosesClientsWhenTheUpstreamIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := dial(t, newTestProxy(t, addr))
	if got, err := c.read(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read %q, %v with the upstream down, want EOF", got, err)
	}
}
