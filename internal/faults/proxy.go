package faults

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LinkState is what a Proxy does with the bytes it is given.
type LinkState int

const (
	// LinkUp passes bytes on, after the configured delay.
	LinkUp LinkState = iota
	// LinkCut is a blackhole: the proxy still accepts connections but
	// drops every byte either way, as a firewall dropping packets would. A
	// connection that lost bytes cannot carry on (its stream has a hole),
	// so Heal closes it, as TCP would reset it.
	LinkCut
	// LinkStall holds bytes without losing them, as a network path that
	// goes quiet and comes back does: TCP retransmits, and everything sent
	// meanwhile arrives late, at Heal.
	LinkStall
)

// String returns "up", "cut" or "stall".
func (s LinkState) String() string {
	switch s {
	case LinkCut:
		return "cut"
	case LinkStall:
		return "stall"
	default:
		return "up"
	}
}

// dialTimeout bounds the proxy's connection to its upstream. A broker that is
// down refuses at once on loopback.
const dialTimeout = time.Second

// Proxy is a TCP proxy on loopback between one candidate and one broker
// whose link can be cut, stalled, healed and delayed. Its methods are safe
// for concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu      sync.Mutex
	state   LinkState
	delay   time.Duration
	changed chan struct{} // closed and replaced whenever state changes
	links   map[*link]struct{}
	closed  bool
}

// link is one proxied connection.
type link struct {
	client  net.Conn
	damaged atomic.Bool
	done    chan struct{}

	mu     sync.Mutex
	server net.Conn // nil until dialled, and for a connection accepted while cut
	closed bool
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}

// attach sets the server side, unless the link was closed meanwhile.
func (l *link) attach(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.server = s
	return true
}

// NewProxy listens on a free loopback port and forwards connections to
// upstream (host:port).
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address candidates dial, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every byte from now on, and on connections accepted meanwhile.
func (p *Proxy) Cut() { p.set(LinkCut) }

// Stall holds every byte from now on until Heal.
func (p *Proxy) Stall() { p.set(LinkStall) }

// Heal passes traffic again: bytes a stall held are delivered, connections
// that lost bytes to a cut are closed. With reset, every connection is
// closed, as when a NAT or firewall forgets its state.
func (p *Proxy) Heal(reset bool) {
	p.mu.Lock()
	var doomed []*link
	for l := range p.links {
		if reset || l.damaged.Load() {
			doomed = append(doomed, l)
		}
	}
	p.setLocked(LinkUp)
	p.mu.Unlock()
	for _, l := range doomed {
		l.close()
	}
}

// SetDelay delays every byte read from now on by d, in each direction.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) set(s LinkState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(s)
}

func (p *Proxy) setLocked(s LinkState) {
	p.state = s
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve proxies one connection until either side closes it.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	l := &link{client: c, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	state := p.state
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()

	if state == LinkCut {
		// Accept, but let nothing through: not even to the broker.
		l.damaged.Store(true)
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}
	s, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		return
	}
	if !l.attach(s) { // Heal or Close closed the link while dialling
		s.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(l, c, s) })
	wg.Go(func() { p.pump(l, s, c) })
	wg.Wait()
}

// chunk is bytes read from one side, due at the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst through the link's state and delay, and closes the
// link when either fails.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	defer l.close()
	queue := make(chan chunk, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				state, delay := p.state, p.delay
				p.mu.Unlock()
				if state == LinkCut {
					l.damaged.Store(true)
				} else {
					select {
					case queue <- chunk{data: buf[:n], due: time.Now().Add(delay)}:
					case <-l.done:
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	for c := range queue {
		if err := p.deliver(l, dst, c); err != nil {
			l.close()
			return
		}
	}
}

var errLinkClosed = errors.New("link closed")

// deliver writes c to dst once the link passes traffic and c is due, or
// drops it if the link is cut meanwhile.
func (p *Proxy) deliver(l *link, dst net.Conn, c chunk) error {
	for {
		p.mu.Lock()
		state, changed := p.state, p.changed
		p.mu.Unlock()
		switch state {
		case LinkCut:
			l.damaged.Store(true)
			return nil
		case LinkStall:
			select {
			case <-changed:
				continue
			case <-l.done:
				return errLinkClosed
			}
		}
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
				continue
			case <-l.done:
				t.Stop()
				return errLinkClosed
			}
		}
		_, err := dst.Write(c.data)
		return err
	}
}
