package main

import (
	"bytes"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// deliveryCounter counts, from the NATS protocol a connection reads, the
// messages the broker delivers on the election bucket's subjects: every
// watch delivery of a key's write (whatever consumer carried it), and
// nothing else (replies, acknowledgements and heartbeats come on inboxes).
// own counts those of the process's own keys.
type deliveryCounter struct {
	prefix []byte              // $KV.<bucket>.
	own    map[string]struct{} // keys this process campaigns in
	kv     atomic.Int64
	mine   atomic.Int64
}

func newDeliveryCounter(bucket string, own []string) *deliveryCounter {
	d := &deliveryCounter{prefix: []byte("$KV." + bucket + "."), own: map[string]struct{}{}}
	for _, k := range own {
		d.own[k] = struct{}{}
	}
	return d
}

// dialer is a nats.CustomDialer whose connections feed the counter.
type countingDialer struct {
	d *deliveryCounter
	net.Dialer
}

func (c *countingDialer) Dial(network, address string) (net.Conn, error) {
	conn, err := c.Dialer.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, p: &protoScanner{d: c.d}}, nil
}

func newCountingDialer(d *deliveryCounter) *countingDialer {
	return &countingDialer{d: d, Dialer: net.Dialer{Timeout: 5 * time.Second}}
}

// countingConn passes what it reads to a protoScanner.
type countingConn struct {
	net.Conn
	p *protoScanner
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.p.feed(b[:n])
	}
	return n, err
}

// protoScanner follows the server-to-client NATS protocol: control lines
// ending in \r\n, and after MSG and HMSG lines a payload of the size the
// line ends with, plus \r\n.
type protoScanner struct {
	d    *deliveryCounter
	line []byte
	skip int // payload bytes still to pass over
}

func (p *protoScanner) feed(b []byte) {
	for len(b) > 0 {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			return
		}
		p.line = append(p.line, b[:i+1]...)
		b = b[i+1:]
		p.control(bytes.TrimRight(p.line, "\r\n"))
		p.line = p.line[:0]
	}
}

// control handles one control line.
func (p *protoScanner) control(line []byte) {
	var hdr bool
	switch {
	case bytes.HasPrefix(line, []byte("MSG ")):
	case bytes.HasPrefix(line, []byte("HMSG ")):
		hdr = true
	default:
		return
	}
	f := bytes.Fields(line)
	// MSG subject sid [reply] size; HMSG subject sid [reply] hdrsize total.
	if (!hdr && len(f) < 4) || (hdr && len(f) < 5) {
		return
	}
	size, err := strconv.Atoi(string(f[len(f)-1]))
	if err != nil || size < 0 {
		return
	}
	p.skip = size + 2
	if key, ok := bytes.CutPrefix(f[1], p.d.prefix); ok {
		p.d.kv.Add(1)
		if _, mine := p.d.own[string(key)]; mine {
			p.d.mine.Add(1)
		}
	}
}
