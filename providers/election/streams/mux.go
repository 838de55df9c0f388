package streams

import (
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
)

// muxBuffer is how many messages a connection's mux holds before nats.go
// drops the next as a slow consumer's: a new leader's question reaches every
// candidate of its election, so 10,000 elections starting at once send a
// process of one candidate in each 10,000 questions within a few seconds.
const muxBuffer = 1 << 16

// A subMux delivers the messages of one connection's subscriptions to who
// is standing's subjects through one channel and one goroutine, where
// nats.go gives each subscription with a callback a goroutine of its own.
// A process's candidates in one election share one subscription to each
// subject, so the broker routes a message to the process once. Handlers
// run on the mux's goroutine one message at a time: they must not block,
// and must not change the message.
type subMux struct {
	nc     *nats.Conn
	ch     chan *nats.Msg
	quit   chan struct{}
	closed chan nats.Status // the connection's closing: the mux ends with it

	// subjects and bySub change under muxes.mu and mu; run reads them under mu.
	mu       sync.Mutex
	subjects map[string]*subjectSub // the subscription to each subject
	bySub    map[*nats.Subscription]*subjectSub
}

// subjectSub is the mux's one subscription to a subject, and the handlers'
// subscriptions that share it (few: a process's candidates in one election).
type subjectSub struct {
	subject  string
	sub      *nats.Subscription
	handlers []*muxSub
}

// muxes holds the mux of each connection with subscriptions.
var muxes = struct {
	mu sync.Mutex
	m  map[*nats.Conn]*subMux
}{m: map[*nats.Conn]*subMux{}}

// muxSub is one handler's subscription through a connection's mux.
type muxSub struct {
	mux    *subMux
	ss     *subjectSub
	handle func(*nats.Msg)
}

// muxSubscribe subscribes handler to subject on nc through nc's mux, made
// if nc has none, and the mux's subscription to subject, made if it has
// none.
func muxSubscribe(nc *nats.Conn, subject string, handler func(*nats.Msg)) (*muxSub, error) {
	muxes.mu.Lock()
	defer muxes.mu.Unlock()
	m := muxes.m[nc]
	if m == nil {
		m = &subMux{nc: nc, ch: make(chan *nats.Msg, muxBuffer), quit: make(chan struct{}),
			closed: nc.StatusChanged(nats.CLOSED), subjects: map[string]*subjectSub{}, bySub: map[*nats.Subscription]*subjectSub{}}
		go m.run()
		muxes.m[nc] = m
	}
	// The handler is in place before run can look it up: a message may
	// reach the channel as soon as the subscription is sent.
	m.mu.Lock()
	defer m.mu.Unlock()
	ss := m.subjects[subject]
	if ss == nil {
		sub, err := nc.ChanSubscribe(subject, m.ch)
		if err != nil {
			m.stopIfIdleLocked()
			return nil, fmt.Errorf("subscribing to %s: %w", subject, err)
		}
		ss = &subjectSub{subject: subject, sub: sub}
		m.subjects[subject], m.bySub[sub] = ss, ss
	}
	s := &muxSub{mux: m, ss: ss, handle: handler}
	ss.handlers = append(ss.handlers, s)
	return s, nil
}

// Unsubscribe ends the subscription, and the mux's subscription to its
// subject with the subject's last handler; the mux stops with its
// connection's last one. A message taken from the channel before may
// still reach the handler, as with nats.go's own subscriptions.
func (s *muxSub) Unsubscribe() error {
	muxes.mu.Lock()
	defer muxes.mu.Unlock()
	m := s.mux
	m.mu.Lock()
	s.ss.handlers = slices.DeleteFunc(s.ss.handlers, func(h *muxSub) bool { return h == s })
	last := len(s.ss.handlers) == 0 && m.subjects[s.ss.subject] == s.ss
	if last {
		delete(m.subjects, s.ss.subject)
		delete(m.bySub, s.ss.sub)
	}
	m.mu.Unlock()
	var err error
	if last {
		err = s.ss.sub.Unsubscribe()
	}
	m.stopIfIdleLocked()
	return err
}

// stopIfIdleLocked stops m when it has no subscription left. The caller
// holds muxes.mu.
func (m *subMux) stopIfIdleLocked() {
	if len(m.subjects) == 0 && muxes.m[m.nc] == m {
		delete(muxes.m, m.nc)
		close(m.quit)
	}
}

// run hands each message to its subscription's handlers until the mux
// stops or its connection closes (nats.go closes no channel of a
// subscription then, and subscriptions left would keep the mux).
func (m *subMux) run() {
	defer m.nc.RemoveStatusListener(m.closed)
	for {
		select {
		case <-m.quit:
			return
		case <-m.closed:
			muxes.mu.Lock()
			if muxes.m[m.nc] == m {
				delete(muxes.m, m.nc)
			}
			muxes.mu.Unlock()
			return
		case msg := <-m.ch:
			m.mu.Lock()
			var hs []*muxSub // a copy: Unsubscribe changes the handlers in place
			if ss := m.bySub[msg.Sub]; ss != nil {
				hs = slices.Clone(ss.handlers)
			}
			m.mu.Unlock()
			for _, h := range hs {
				h.handle(msg)
			}
		}
	}
}
