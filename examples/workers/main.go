// Command workers runs several workers in one process that share one
// election, "my_app": at any moment one of them leads and does the work,
// writing a line each second, while the others stand by to take over.
//
// It needs a broker with the election bucket. Start one, then the workers:
//
//	conclave broker run --config broker.conf   # plugin.choria.broker_network = true
//	go run ./examples/workers                  # Ctrl-C to stop
//
// The workers find their configuration as conclave.UserConfig says
// ($CONCLAVE_CONFIG, ./conclave.conf, …) or run on the defaults and the
// CONCLAVE_* environment (CONCLAVE_PLUGIN_CHORIA_MIDDLEWARE_HOSTS=…).
// Set WORKERS to change how many run (default 3).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/inter"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

// electionName is the election every worker campaigns in.
const electionName = "my_app"

// member is one worker: a candidate in the election that works while it
// leads.
type member struct {
	id      int
	log     *logrus.Entry
	leading atomic.Bool
}

// elected runs when the member becomes leader.
func (m *member) elected() {
	m.leading.Store(true)
	m.log.Info("Won the election: starting work")
}

// deposed runs when the member stops leading, for whatever reason.
func (m *member) deposed() {
	m.leading.Store(false)
	m.log.Info("No longer the leader: pausing work")
}

// work writes a line each second while the member leads, until ctx ends.
func (m *member) work(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	done := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if m.leading.Load() {
				done++
				m.log.WithField("items", done).Info("Working as the leader")
			}
		}
	}
}

// campaign joins the election through any inter.Framework and campaigns
// until ctx ends, or until the campaign ends with an error (the broker
// refuses it, its connection closes), which it returns.
func (m *member) campaign(ctx context.Context, fw inter.Framework) error {
	e, err := fw.NewElection(ctx, nil, electionName, election.OnWon(m.elected), election.OnLost(m.deposed))
	if err != nil {
		return fmt.Errorf("worker %d: joining %s: %w", m.id, electionName, err)
	}
	// The work stops when the campaign does, not only when ctx ends.
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.work(workCtx) })
	defer wg.Wait()
	defer stopWork()
	m.log.Info("Standing for election")
	if err := e.Start(ctx); err != nil {
		return fmt.Errorf("worker %d: campaigning in %s: %w", m.id, electionName, err)
	}
	return nil
}

// workerCount reads WORKERS, defaulting to 3.
func workerCount() (int, error) {
	v := os.Getenv("WORKERS")
	if v == "" {
		return 3, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("WORKERS=%q: want a whole number of at least 1", v)
	}
	return n, nil
}

func run() error {
	n, err := workerCount()
	if err != nil {
		return err
	}
	fw, err := conclave.New(conclave.UserConfig())
	if err != nil {
		return err
	}
	defer fw.Close()

	// Ctrl-C or SIGTERM ends every campaign; a leader hands over as it stops.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		m := &member{id: i + 1, log: fw.Logger("worker").WithField("worker", i+1)}
		wg.Go(func() {
			if err := m.campaign(ctx, fw); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				stop() // one worker that cannot join stops them all
			}
		})
	}
	wg.Wait()
	fw.Logger("workers").Info("All workers stopped")
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "workers:", err)
		os.Exit(1)
	}
}
