package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/backoff"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// worker is one candidate of the demo. It campaigns over a connection of its
// own, so that crashing it cuts off no one else, and while it leads it logs a
// line of work every second. After it steps down or crashes it rejoins the
// election as a new candidate.
type worker struct {
	// instance is the worker's name in the election and in its log lines:
	// "worker-N." and a part drawn once per process, so that the workers
	// of two copies of the demo under one identity stand apart.
	instance string
	fw       *conclave.Framework
	key      string
	log      *logrus.Entry
	splay    time.Duration // wait before the first campaign
	rejoin   time.Duration // wait before campaigning again after stopping

	mu      sync.Mutex
	e       *streams.Election // nil between memberships
	conn    *nats.Conn
	term    *streams.Term
	crashed bool // the c command cut this membership's connection
}

// run campaigns until ctx ends, rejoining after each membership ends.
func (w *worker) run(ctx context.Context) {
	if backoff.Sleep(ctx, w.splay) != nil {
		return
	}
	for {
		if err := w.member(ctx); err != nil && ctx.Err() == nil {
			w.log.Errorf("Cannot campaign: %v", err)
		}
		if ctx.Err() != nil {
			return
		}
		w.log.Infof("Rejoining the election in %v", w.rejoin)
		if backoff.Sleep(ctx, w.rejoin) != nil {
			return
		}
	}
}

// member connects, campaigns until the election is stopped (by ctx, or by
// the s and c commands), and disconnects.
func (w *worker) member(ctx context.Context) error {
	conn, err := w.fw.Connect(ctx, nats.Name(w.fw.Identity()+" "+w.instance))
	if err != nil {
		return err
	}
	defer conn.Close()

	var work sync.WaitGroup
	defer work.Wait()
	e, err := w.fw.NewCampaign(ctx, conn, w.key,
		streams.OnWon(w.won),
		streams.OnLost(w.lost),
		streams.OnLeading(func(t *streams.Term) {
			w.mu.Lock()
			w.term = t
			w.mu.Unlock()
			work.Go(func() { w.work(t) })
		}),
		streams.WithLogger(workerLogger{log: w.fw.Logger("election").WithFields(logrus.Fields{"election": w.key, "instance": w.instance}), instance: w.instance}),
		// The workers share the host's identity; the instance tells them
		// apart in who stands, hand-overs and watch.
		streams.WithInstance(w.instance),
	)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.e, w.conn = e, conn
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.e, w.conn, w.term, w.crashed = nil, nil, nil, false
		w.mu.Unlock()
	}()

	w.log.Info("Worker starting")
	err = e.Start(ctx)
	w.mu.Lock()
	crashed, last := w.crashed, w.term
	w.mu.Unlock()
	if crashed {
		// The c command closed the connection: the campaign ending
		// with it is what was asked for, not an error to report.
		w.log.Info("Crashed: the campaign ended with its connection")
		return nil
	}
	if err == nil && last != nil && last.Cause() == streams.CauseReleased {
		// It led until its stop (s, q): say where the key went.
		if to := e.HandedOverTo(); to != "" {
			w.log.WithField("to", to).Info("Handed the key over: the standby it named leads at once")
		} else {
			w.log.Info("Released the key: the first standby to campaign leads at once")
		}
	}
	return err
}

// workerLogger logs an election's lines with the worker's instance in the
// message: every worker campaigns under the host's identity, so "vm
// became leader" alone does not say which one did.
type workerLogger struct {
	log      *logrus.Entry
	instance string
}

func (l workerLogger) Debugf(format string, args ...any) {
	l.log.Debugf(l.prefix(format), noNegative(args)...)
}

func (l workerLogger) Infof(format string, args ...any) {
	l.log.Infof(l.prefix(format), noNegative(args)...)
}

func (l workerLogger) Warnf(format string, args ...any) {
	l.log.Warnf(l.prefix(format), noNegative(args)...)
}

func (l workerLogger) Errorf(format string, args ...any) {
	l.log.Errorf(l.prefix(format), noNegative(args)...)
}

// noNegative shows a wait that is already over as 0s: the election
// reports how long until a term begins ("leading in …") counted from a
// read that may come after that instant, and "leading in -1ms" reads as
// an error.
func noNegative(args []any) []any {
	for i, a := range args {
		if d, ok := a.(time.Duration); ok && d < 0 {
			args = slices.Clone(args)
			args[i] = time.Duration(0)
		}
	}
	return args
}

func (l workerLogger) prefix(format string) string {
	return l.instance + ": " + format
}

func (w *worker) won() { w.log.Info("Became leader") }

func (w *worker) lost() {
	w.mu.Lock()
	t, crashed := w.term, w.crashed
	w.mu.Unlock()
	entry := w.log
	switch {
	case crashed:
		entry = entry.WithField("cause", "crashed")
	case t != nil:
		entry = entry.WithField("cause", t.Cause())
	}
	entry.Info("Lost leadership")
}

// work logs a line every second of the term t, with its fencing token.
func (w *worker) work(t *streams.Term) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.Done():
			return
		case <-tick.C:
			if t.Valid() {
				w.log.WithField("token", t.Token()).Info("Doing work as the leader")
			}
		}
	}
}

// leads reports whether the worker leads now.
func (w *worker) leads() bool {
	w.mu.Lock()
	e := w.e
	w.mu.Unlock()
	return e != nil && e.IsLeader()
}

// stepDown stops the worker's election: a leader hands over at once.
func (w *worker) stepDown() {
	w.mu.Lock()
	e := w.e
	w.mu.Unlock()
	if e != nil {
		e.Stop()
	}
}

// crash cuts the worker's connection: its election can then neither renew
// nor hand over, and ends; the key stays until it expires. The election is
// not stopped as well: a stop asks for a release, which would end the term
// as "released" and then fail on the closed connection, where a crashed
// process releases nothing.
func (w *worker) crash() {
	w.mu.Lock()
	e, conn := w.e, w.conn
	w.crashed = e != nil
	w.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// Healthy reports on the worker's current election; see
// streams.Election.Healthy. It serves metrics.HealthHandler.
func (w *worker) Healthy(tolerance time.Duration) error {
	w.mu.Lock()
	e := w.e
	w.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.Healthy(tolerance)
}
