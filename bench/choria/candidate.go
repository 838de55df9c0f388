package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	choria "github.com/choria-io/go-choria/providers/election/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// lib names one of the two election libraries under test.
type lib int

const (
	conclaveLib lib = iota
	choriaLib
)

func (l lib) String() string {
	if l == choriaLib {
		return "Choria"
	}
	return "Conclave"
}

// libs is the order the table's columns follow.
var libs = []lib{conclaveLib, choriaLib}

type eventKind int

const (
	evWon       eventKind = iota // the library called OnWon
	evLost                       // the library called OnLost
	evStopped                    // Start returned: the candidate no longer runs at all
	evStopAsked                  // the benchmark asked it to stop (Stop, or ctx cancelled)
	evCrashed                    // the benchmark closed its connection
)

func (k eventKind) String() string {
	switch k {
	case evWon:
		return "won"
	case evLost:
		return "lost"
	case evStopAsked:
		return "stop asked"
	case evCrashed:
		return "crashed"
	default:
		return "stopped"
	}
}

// event is one thing a candidate reported, stamped with this process's
// clock (time.Now carries a monotonic reading, so events compare exactly).
type event struct {
	c    *candidate
	kind eventKind
	at   time.Time
}

// spec describes a candidate to create.
type spec struct {
	lib     lib
	url     string
	key     string
	id      string
	grace   time.Duration // Conclave only: streams.WithGrace; 0 leaves it out
	sink    func(event)   // receives every event; must not block for long
	timeout time.Duration // connect timeout; 0 means 10s
}

// candidate is one campaigner of either library, on a NATS connection of
// its own, as if it were a separate process.
type candidate struct {
	lib  lib
	id   string
	nc   *nats.Conn
	sink func(event)

	run    func(ctx context.Context) error
	stopFn func()
	cancel context.CancelFunc
	done   chan struct{}

	startOnce sync.Once
	stopOnce  sync.Once
	crashed   atomic.Bool
}

// newCandidate connects and builds the election, without starting it, so
// that a measurement can start the clock right before Start.
func newCandidate(ctx context.Context, s spec) (*candidate, error) {
	timeout := s.timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	nc, err := nats.Connect(s.url, nats.Name(s.id), nats.Timeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("candidate %s: connect: %w", s.id, err)
	}
	c := &candidate{lib: s.lib, id: s.id, nc: nc, sink: s.sink, done: make(chan struct{})}
	emit := func(k eventKind) func() { return func() { c.emit(k) } }
	if s.lib == conclaveLib {
		err = c.buildConclave(s, emit)
	} else {
		err = c.buildChoria(s, emit)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	go func() {
		// Start is launched by start(); this goroutine only reports the end.
		<-c.done
		c.emit(evStopped)
	}()
	return c, nil
}

func (c *candidate) buildConclave(s spec, emit func(eventKind) func()) error {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return fmt.Errorf("candidate %s: jetstream: %w", s.id, err)
	}
	opts := []streams.Option{streams.InBucket(bucketName), streams.OnWon(emit(evWon)), streams.OnLost(emit(evLost))}
	if s.grace > 0 {
		opts = append(opts, streams.WithGrace(s.grace))
	}
	e, err := streams.NewElection(s.id, s.key, js, opts...)
	if err != nil {
		return fmt.Errorf("candidate %s: %w", s.id, err)
	}
	c.run = e.Start
	c.stopFn = e.Stop
	return nil
}

func (c *candidate) buildChoria(s spec, emit func(eventKind) func()) error {
	js, err := c.nc.JetStream()
	if err != nil {
		return fmt.Errorf("candidate %s: jetstream: %w", s.id, err)
	}
	kv, err := js.KeyValue(bucketName)
	if err != nil {
		return fmt.Errorf("candidate %s: bucket: %w", s.id, err)
	}
	e, err := choria.NewElection(s.id, s.key, kv, choria.OnWon(emit(evWon)), choria.OnLost(emit(evLost)))
	if err != nil {
		return fmt.Errorf("candidate %s: %w", s.id, err)
	}
	c.run = e.Start
	// Choria's Stop locks its mutex and then calls a helper that locks it
	// again, so it never returns: a Choria user stops an election by
	// cancelling the context given to Start, and so do we.
	c.stopFn = nil
	return nil
}

func (c *candidate) emit(k eventKind) {
	if c.sink != nil {
		c.sink(event{c: c, kind: k, at: time.Now()})
	}
}

// start runs the election in the background.
func (c *candidate) start() {
	c.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		go func() {
			defer close(c.done)
			// After a crash, Conclave's Start returns an error saying the
			// connection was closed: expected, so not worth a line.
			if err := c.run(ctx); err != nil && ctx.Err() == nil && !c.crashed.Load() {
				fmt.Fprintf(os.Stderr, "candidate %s (%s): Start: %v\n", c.id, c.lib, err)
			}
		}()
	})
}

// stop ends the election the way a user of the library would and waits for
// Start to return, then closes the connection. A Conclave leader releases
// the key; a Choria leader leaves it to expire.
func (c *candidate) stop() {
	c.stopOnce.Do(func() {
		c.emit(evStopAsked)
		c.startOnce.Do(func() { close(c.done) }) // never started
		if c.stopFn != nil {
			c.stopFn()
		}
		if c.cancel != nil {
			c.cancel()
		}
		<-c.done
		c.nc.Close()
	})
}

// crash closes the connection under the running election, as a process
// crash or a network cut would look to the broker. Choria's election keeps
// running against the dead connection until stop; Conclave's ends its
// campaign when a request finds the connection closed.
func (c *candidate) crash() {
	c.crashed.Store(true)
	c.emit(evCrashed)
	c.nc.Close()
}

// stopAll stops cs in parallel.
func stopAll(cs []*candidate) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop() }()
	}
	wg.Wait()
}
