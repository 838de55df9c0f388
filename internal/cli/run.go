package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// Exit statuses of run when the command cannot run, as shells use them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// restartDelay is how long run --restart waits before starting the command
// again after it exited on its own.
const restartDelay = time.Second

// Environment variables run gives the command.
const (
	envElection = "CONCLAVE_ELECTION"
	envToken    = "CONCLAVE_TOKEN"
	envIdentity = "CONCLAVE_IDENTITY"
	envBucket   = "CONCLAVE_BUCKET"
)

// runFlags are run's flags.
type runFlags struct {
	identity string
	grace    time.Duration
	restart  bool
	verbose  bool
	json     bool
	timeout  time.Duration
	once     bool

	// Issue 19: where leadership should go.
	priority    int
	healthCmd   string
	healthEvery time.Duration
	minTerm     time.Duration
	set         map[string]bool // which of these were given
}

func (e *elections) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] NAME [--] COMMAND [ARGS...]",
		Short: "Campaign in an election and run a command only while leading",
		Long: `Campaigns in election NAME as --identity, else as the framework would: the
identity of the --config file, $CONCLAVE_IDENTITY overriding it, else the host
name; and runs
COMMAND only while leading, with standard input, output and error passed
through and these variables added to its environment:

  CONCLAVE_ELECTION  the election (NAME)
  CONCLAVE_TOKEN     the term's fencing token: send it with every write to a
                     resource that can reject tokens lower than one it has seen
  CONCLAVE_IDENTITY  the identity run campaigns as
  CONCLAVE_BUCKET    the bucket

When leadership is lost (the key was removed, or could not be renewed in time)
the command gets SIGTERM, and SIGKILL if it is still running --grace later;
run then campaigns again and starts the command anew when it leads again. The
command runs in its own process group, and the signals go to the whole group.

If the command exits on its own while leading, run releases the election and
exits with the command's exit status; with --restart it keeps leading and
starts the command again after 1s instead.

On Ctrl-C (SIGINT) or SIGTERM, run stops the command (SIGTERM, then SIGKILL
after --grace), hands the election over at once (to the best-ranked standby
it knows of, or by a release that any candidate may take), says which, and
exits with status 0 when the command exited with 0 or died of that SIGTERM
(a stop that was asked for), else with the command's exit status (128 plus
the signal's number for a signal, as in shells: 137 when it had to be
killed).

Everything after NAME is the command, its flags included (run job ls -l);
run's own flags go before NAME, or between NAME and a "--" that ends them.

A broker that does not answer yet, or has no election bucket yet, is waited
for (run says so once); after the first connection run reconnects forever.

How long a take-over waits: a candidate that takes a released key (the
leader stopped, or handed over) leads at once and starts its command at once;
one that takes a removed key (stand-down, nats kv del) leads a TTL after the
removal, when the removed leader has surely stopped counting on its lease;
one that takes an absent or expired key (a new election, or one whose leader
vanished) leads at once. Except after a release, run then waits --grace
before it starts the command, and says so, so that an earlier leader's
command, killed --grace after its term ended, is surely gone; give every
candidate of an election the same --grace. The term, and --min-term, count
from when it leads, not from when the command starts.

--priority ranks candidates: a leader hands the election over to a healthy
candidate of a higher priority once its term has lasted --min-term (default
twice the TTL, at least 10s); equal priorities never move. --health-cmd runs
a command through the shell every --health-every (default 5s), each run
bounded by that interval: while it exits non-zero the candidate does not
campaign, and as leader hands over to a healthy candidate if one stands, and
otherwise keeps leading.`,
		Example: `  conclave election run my_app ./cron.sh --verbose
  conclave --config /etc/conclave/client.conf election run \
      --grace 30s reports -- ./report.sh -l
  conclave election run --identity "$(hostname -f)" --restart --json \
      my_app ./worker
  conclave election run --priority 10 \
      --health-cmd 'curl -fs localhost:8080/healthz' my_app ./worker`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := splitRunArgs(cmd, args)
			if err != nil || name == "" {
				return err
			}
			f.set = map[string]bool{}
			for _, n := range []string{"priority", "health-cmd", "health-every", "min-term"} {
				f.set[n] = cmd.Flags().Changed(n)
			}
			return e.run(cmd.Context(), name, argv, f)
		},
	}
	// Flags end at NAME: what follows is the command's, flags and all
	// (splitRunArgs reads flags between NAME and --).
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&f.identity, "identity", "", "the name to campaign as, the value of the election key (default: --config's identity, $CONCLAVE_IDENTITY, else the host name)")
	durationVar(cmd.Flags(), &f.grace, "grace", 10*time.Second, "how long the command has to exit after SIGTERM before it gets SIGKILL; a new leader waits as long before starting its command, except after a release")
	cmd.Flags().BoolVar(&f.restart, "restart", false, "restart the command when it exits on its own while leading, instead of exiting")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "log what the election does")
	// Not --timeout: that is every command's connection timeout, which a
	// flag of run's own would shadow.
	durationVar(cmd.Flags(), &f.timeout, "lead-timeout", 0, "give up with status 1 unless leading within this long (waiting for the broker included), as consul lock -timeout; 0 waits forever")
	cmd.Flags().BoolVar(&f.once, "once", false, "lead at most once: exit with status 1 at once if another candidate leads, or if not leading within a TTL and --grace; once leading, exit when the command exits or leadership is lost, without campaigning again")
	cmd.Flags().IntVar(&f.priority, "priority", 0, "rank among the candidates: the leader hands over to a healthy candidate of a higher priority after --min-term (default: plugin.conclave.election.priority of --config or the environment, else 0)")
	cmd.Flags().StringVar(&f.healthCmd, "health-cmd", "", "a shell command run every --health-every: while it exits non-zero, do not campaign, and hand over to a healthy candidate if leading")
	durationVar(cmd.Flags(), &f.healthEvery, "health-every", 5*time.Second, "how often to run --health-cmd, and how long each run may take")
	durationVar(cmd.Flags(), &f.minTerm, "min-term", 0, "how long a term lasts before the leader hands over to a better candidate on its own (default: plugin.conclave.election.min_term of --config or the environment, else twice the TTL, at least 10s)")
	cmd.Flags().BoolVar(&f.json, "json", false, "log to standard error as JSON, one object per line (time, event, election, identity, token, status, message)")
	return cmd
}

// runUsage is run's usage line, for errors.
const runUsage = "usage: conclave election run [flags] NAME [--] COMMAND [ARGS...]"

// splitRunArgs splits run's arguments into NAME and the command. Flags go
// before NAME (parsing stops there), or between NAME and "--"; without
// "--" right after NAME or its flags, everything after NAME is the command,
// its own flags included: run job ls -l runs ls -l, as consul lock and
// etcdctl lock do. An empty name means help was shown.
func splitRunArgs(cmd *cobra.Command, args []string) (string, []string, error) {
	if cmd.ArgsLenAtDash() == 0 {
		return "", nil, errors.New("missing NAME before --: " + runUsage)
	}
	if len(args) == 0 {
		return "", nil, errors.New("missing NAME and COMMAND: " + runUsage)
	}
	name, rest := args[0], args[1:]
	if len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
		// Flags after NAME: they end at "--", before the command.
		dash := slices.Index(rest, "--")
		if dash < 0 && (slices.Contains(rest, "--help") || slices.Contains(rest, "-h")) {
			return "", nil, cmd.Help()
		}
		if dash < 0 {
			return "", nil, fmt.Errorf("flags after NAME need -- before the command (%s), or put them before NAME: %s", strings.Join(rest, " "), runUsage)
		}
		if err := cmd.Flags().Parse(rest[:dash]); err != nil {
			if errors.Is(err, pflag.ErrHelp) {
				return "", nil, cmd.Help()
			}
			return "", nil, err
		}
		if extra := cmd.Flags().Args(); len(extra) > 0 {
			return "", nil, fmt.Errorf("only NAME goes before --, got %q: %s", append([]string{name}, extra...), runUsage)
		}
		rest = rest[dash+1:]
	}
	if len(rest) == 0 {
		return "", nil, errors.New("missing the COMMAND to run: " + runUsage)
	}
	return name, rest, nil
}

func (e *elections) run(ctx context.Context, name string, argv []string, f runFlags) error {
	if err := validateElectionName(name); err != nil {
		return err
	}
	if f.grace < 0 {
		return fmt.Errorf("--grace %v is negative", f.grace)
	}
	if f.timeout < 0 {
		return fmt.Errorf("--lead-timeout %v is negative", f.timeout)
	}
	if f.once && f.restart {
		return errors.New("--once and --restart contradict each other: pass one of them")
	}
	health := &healthReport{name: name, healthy: true}
	standOpts, err := f.standingOptions(health)
	if err != nil {
		return err
	}
	fromConfig, err := e.a.electionDefaults(f)
	if err != nil {
		return err
	}
	standOpts = append(fromConfig, standOpts...)
	var deadline time.Time
	if f.timeout > 0 {
		deadline = time.Now().Add(f.timeout)
	}
	identity, from, err := e.a.identity(f.identity)
	if err != nil {
		return err
	}
	path, err := lookCommand(argv[0])
	if err != nil {
		return err
	}
	log := newEventLog(e.a.stderr, f.json)
	log.election, log.identity = name, identity
	health.log, health.identity = log, identity
	openCtx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		openCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	s, err := e.open(openCtx, connectOptions{name: "conclave election run " + name, longLived: true, wait: true, log: log, verbose: f.verbose})
	if err != nil && ctx.Err() == nil && openCtx.Err() != nil {
		return fmt.Errorf("no broker to campaign in %s within %v (--lead-timeout): giving up: %w", name, f.timeout, err)
	}
	if err != nil && ctx.Err() != nil {
		log.event("stopped_campaigning", map[string]any{"exit_status": 0}, "interrupted before campaigning in %s; exiting with status 0", name)
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	onConnection(s.nc, func(event, server string, err error) { logConnection(log, event, server, err) })
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	r := &runner{
		e: e, s: s, name: name, identity: identity, argv: argv, path: path, flags: f,
		terms: make(chan *lead, 1), quit: make(chan struct{}), log: log,
	}
	el, err := streams.NewElection(identity, name, s.js, append([]streams.Option{
		streams.InBucket(s.bucket),
		streams.OnLeading(r.onLeading),
		streams.OnLost(r.onLost),
		streams.WithLogger(runLogger{stderrLogger: stderrLogger{log: log, verbose: f.verbose}, health: f.healthCmd != ""}),
	}, standOpts...)...)
	if err != nil {
		return err
	}
	health.el = el
	if f.once {
		recs, err := s.readRecords(ctx, name)
		if err != nil {
			return err
		}
		// Another candidate leads, another copy of this identity too
		// (its write names its instance): only a key this very
		// candidate holds, none before it campaigns, is not another's.
		if len(recs) == 1 && recs[0].State == streams.KeyHeld {
			if rec := s.withStamp(ctx, recs[0]); rec.State == streams.KeyHeld && (rec.Leader != identity || rec.Instance != el.Instance()) {
				return fmt.Errorf("%s leads %s (--once): not campaigning", named(rec.Leader, rec.Instance), name)
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(st.TTL() + f.grace + waitSlack)
		}
	}
	r.log.event("campaigning", map[string]any{"instance": el.Instance(), "bucket": bucketRefJSON{Name: s.bucket, TTLSeconds: seconds(st.TTL())}}, "%s campaigning in %s (identity from %s, instance %s: `conclave election info %s` lists it as %s; bucket %s on %s, TTL %v); leading after a take-over that was not a release, it waits --grace (%v) before starting %s, so that an earlier leader's command is surely gone",
		identity, name, from, el.Instance(), name, named(identity, el.Instance()), s.bucket, s.url, st.TTL(), f.grace, argv[0])
	startDone := make(chan error, 1)
	// The election outlives ctx: the supervisor stops the command before it
	// stops the election, so that the next leader starts after it.
	go func() { startDone <- el.Start(context.WithoutCancel(ctx)) }()
	var giveUp <-chan time.Time
	if !deadline.IsZero() {
		giveUp = time.After(time.Until(deadline))
	}
	return r.supervise(ctx, el, startDone, giveUp)
}

// logConnection logs that run's connection to the broker was lost, or is
// back, always, as watch prints it: while the broker is away the leader
// cannot renew its term and the standbys cannot campaign.
func logConnection(log *eventLog, event, server string, err error) {
	attrs := map[string]any{"server": server}
	switch {
	case event == connReconnected:
		log.event(event, attrs, "connected to %s again: the election resumes", server)
	case err != nil:
		attrs["error"] = err.Error()
		log.event(event, attrs, "warning: lost the connection to %s (%v): reconnecting; a leader keeps its term only while its lease lasts", server, err)
	default:
		log.event(event, attrs, "warning: lost the connection to %s: reconnecting; a leader keeps its term only while its lease lasts", server)
	}
}

// lead is one term as the supervisor learns of it.
type lead struct {
	term    *streams.Term
	stopped chan struct{} // closed once the term's command is not running
	once    sync.Once
	started bool // the command was started in this term; supervisor only
}

func (l *lead) markStopped() { l.once.Do(func() { close(l.stopped) }) }

// child is a running command.
type child struct {
	cmd    *exec.Cmd
	exited chan int // receives the exit status once
}

// startChild starts the command path with argv, a's standard streams and
// the environment with env added, in a process group of its own.
func startChild(a *app, path string, argv []string, env ...string) (*child, error) {
	cmd := exec.Command(path)
	cmd.Args = argv
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)
	ch := &child{cmd: cmd, exited: make(chan int, 1)}
	started := make(chan error, 1)
	go func() {
		// The command gets a signal when the thread that started it ends
		// (Linux): keep the thread until the command has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		ch.exited <- exitStatus(cmd.ProcessState, err)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return ch, nil
}

// stop stops the command, SIGTERM first and SIGKILL after grace, and
// returns its exit status; it logs to log what it had to do.
func (ch *child) stop(log *eventLog, grace time.Duration) int {
	name := ch.cmd.Args[0]
	pid := ch.cmd.Process.Pid
	if err := terminateGroup(pid); err != nil {
		log.event("error", nil, "cannot send SIGTERM to %s: %v", name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case status := <-ch.exited:
		return status
	case <-timer.C:
	}
	log.event("killing", nil, "%s still runs %v after SIGTERM: sending SIGKILL", name, grace)
	if err := killGroup(pid); err != nil {
		log.event("error", nil, "cannot send SIGKILL to %s: %v", name, err)
	}
	return <-ch.exited
}

// runner starts and stops the command as leadership comes and goes. The
// supervisor (supervise) owns the command; the election's callbacks only
// hand terms over and wait for the command to stop.
type runner struct {
	e        *elections
	s        *session
	name     string
	identity string
	argv     []string
	path     string
	flags    runFlags
	log      *eventLog

	terms    chan *lead    // OnLeading to the supervisor
	quit     chan struct{} // closed when the supervisor stops serving terms
	quitOnce sync.Once

	cbLead *lead // the term the callbacks last announced; callbacks only
}

// onLeading hands a new term to the supervisor. It runs on the election's
// callback goroutine.
func (r *runner) onLeading(t *streams.Term) {
	l := &lead{term: t, stopped: make(chan struct{})}
	r.cbLead = l
	select {
	case r.terms <- l:
	case <-r.quit:
	}
}

// onLost waits until the supervisor has stopped the command of the term that
// ended: a release hands over only after that, so the next leader's command
// never overlaps ours.
func (r *runner) onLost() {
	l := r.cbLead
	r.cbLead = nil
	if l == nil {
		return
	}
	select {
	case <-l.stopped:
	case <-r.quit:
	}
}

// supervise runs until ctx ends, the command exits on its own (without
// --restart) or the election fails, and returns run's result.
// giveUp fires when run should stop campaigning unless it leads by then
// (--lead-timeout, --once).
func (r *runner) supervise(ctx context.Context, el *streams.Election, startDone <-chan error, giveUp <-chan time.Time) error {
	var (
		cur     *lead  // the term being led
		ch      *child // the running command
		startAt <-chan time.Time
	)
	stopAll := func() int {
		status := 0
		if ch != nil {
			status = r.stop(ch)
			ch = nil
		}
		if cur != nil {
			cur.markStopped()
		}
		return status
	}
	for {
		var termDone <-chan struct{}
		if cur != nil {
			termDone = cur.term.Done()
		}
		var exited <-chan int
		if ch != nil {
			exited = ch.exited
		}
		select {
		case <-ctx.Done():
			if ch == nil {
				return r.finish(el, startDone, 0, nil)
			}
			r.log.event("interrupted", nil, "interrupted: stopping %s, then handing %s over", r.argv[0], r.name)
			status := stopAll()
			if status == 128+int(syscall.SIGTERM) {
				// It died of the SIGTERM it was sent: the stop that was
				// asked for, not a failure.
				r.log.event("stopped", map[string]any{"status": status}, "%s stopped on SIGTERM", r.argv[0])
				status = 0
			} else {
				r.log.event("stopped", map[string]any{"status": status}, "%s stopped with status %d", r.argv[0], status)
			}
			return r.finish(el, startDone, status, nil)

		case err := <-startDone:
			stopAll()
			r.closeQuit()
			if err == nil {
				err = errors.New("the election stopped unexpectedly")
			}
			return fmt.Errorf("election %s: %w", r.name, err)

		case l := <-r.terms:
			if cur != nil {
				cur.markStopped()
			}
			cur, startAt = l, nil
			if !l.term.Valid() {
				l.markStopped()
				cur = nil
				continue
			}
			giveUp = nil
			if wait := r.startDelay(l.term); wait > 0 {
				r.log.event("elected", map[string]any{"token": l.term.Token()}, "%s leads %s, token %d, over a key that was %s: starting %s in %v (--grace), when an earlier leader's command is surely gone",
					r.identity, r.name, l.term.Token(), l.term.From(), strings.Join(r.argv, " "), wait)
				startAt = time.After(wait)
				continue
			}
			r.log.event("elected", map[string]any{"token": l.term.Token()}, "%s leads %s, token %d: starting %s", r.identity, r.name, l.term.Token(), strings.Join(r.argv, " "))
			var err error
			if ch, err = r.start(l.term); err != nil {
				l.markStopped()
				return r.finish(el, startDone, exitCannotRun, err)
			}
			l.started = true

		case <-termDone:
			startAt = nil
			if ch != nil {
				r.log.event("lost", map[string]any{"cause": cur.term.Cause().String()}, "%s no longer leads %s (%s): stopping %s (SIGTERM, SIGKILL after %v)", r.identity, r.name, cur.term.Cause(), r.argv[0], r.flags.grace)
				status := r.stop(ch)
				ch = nil
				r.log.event("stopped", map[string]any{"status": status}, "%s stopped with status %d; campaigning again", r.argv[0], status)
			} else {
				r.log.event("lost", map[string]any{"cause": cur.term.Cause().String()}, "%s no longer leads %s (%s); campaigning again", r.identity, r.name, cur.term.Cause())
			}
			cur.markStopped()
			cur = nil
			if r.flags.once {
				return r.finish(el, startDone, 0, fmt.Errorf("%s lost %s (--once): not campaigning again", r.identity, r.name))
			}

		case <-giveUp:
			what := "--lead-timeout " + r.flags.timeout.String()
			if r.flags.timeout == 0 {
				what = "--once"
			}
			return r.finish(el, startDone, 0, fmt.Errorf("%s does not lead %s (%s): giving up", named(r.identity, el.Instance()), r.name, what))

		case status := <-exited:
			// Whatever the command left running in its group stops with it.
			_ = terminateGroup(ch.cmd.Process.Pid)
			ch = nil
			if cur == nil || !cur.term.Valid() {
				continue // the term ended meanwhile: handled with termDone
			}
			if r.flags.restart {
				r.log.event("exited", map[string]any{"status": status}, "%s exited with status %d while leading %s: starting it again in %v (--restart)", r.argv[0], status, r.name, restartDelay)
				startAt = time.After(restartDelay)
				continue
			}
			r.log.event("exited", map[string]any{"status": status}, "%s exited with status %d: handing %s over", r.argv[0], status, r.name)
			cur.markStopped()
			return r.finish(el, startDone, status, nil)

		case <-startAt:
			startAt = nil
			if cur == nil || !cur.term.Valid() || ch != nil {
				continue
			}
			if !cur.started {
				r.log.event("starting", map[string]any{"token": cur.term.Token()}, "%s leads %s, token %d, and --grace (%v) has passed: starting %s", r.identity, r.name, cur.term.Token(), r.flags.grace, strings.Join(r.argv, " "))
			}
			var err error
			if ch, err = r.start(cur.term); err != nil {
				cur.markStopped()
				return r.finish(el, startDone, exitCannotRun, err)
			}
			cur.started = true
		}
	}
}

// startDelay is how long to wait, once leading in term t, before starting
// the command: nothing after a release or hand-over, whose leader stopped
// its command before it let go; else --grace, the longest an earlier
// leader's command can outlive its term (it gets SIGKILL --grace after).
func (r *runner) startDelay(t *streams.Term) time.Duration { return graceFor(t, r.flags.grace) }

// graceFor is how long work begun in term t waits, run and shards run
// alike: nothing after a release or hand-over, else grace.
func graceFor(t *streams.Term, grace time.Duration) time.Duration {
	if t.From() == streams.KeyReleased {
		return 0
	}
	return grace
}

// finish stops the election, handing it over or releasing it if leading,
// says which, and returns run's
// result: err, else the exit status.
func (r *runner) finish(el *streams.Election, startDone <-chan error, status int, err error) error {
	r.closeQuit()
	leading := el.IsLeader()
	el.Stop()
	serr := <-startDone
	if serr != nil && err == nil {
		err = fmt.Errorf("election %s: %w", r.name, serr)
	}
	switch {
	case serr != nil:
		r.log.event("stopped_campaigning", map[string]any{"exit_status": exitCode(status, err)}, "stopped campaigning in %s; exiting with status %d", r.name, exitCode(status, err))
	case leading && el.HandedOverTo() != "":
		to := el.HandedOverTo()
		toName, toInstance := r.s.takerName(context.Background(), r.name, to)
		r.log.event("handed_over", map[string]any{"new_leader": to, "new_leader_instance": toInstance, "exit_status": exitCode(status, err)}, "handed %s over to %s, which leads at once; exiting with status %d", r.name, toName, exitCode(status, err))
	case leading:
		r.log.event("released", map[string]any{"exit_status": exitCode(status, err)}, "released %s (no standby took it up); exiting with status %d", r.name, exitCode(status, err))
	default:
		r.log.event("stopped_campaigning", map[string]any{"exit_status": exitCode(status, err)}, "stopped campaigning in %s (not leading); exiting with status %d", r.name, exitCode(status, err))
	}
	switch {
	case err != nil && status != 0:
		return &exitError{code: status, err: err}
	case err != nil:
		return err
	case status != 0:
		return &exitError{code: status}
	}
	return nil
}

// exitCode is the exit status finish's result gives.
func exitCode(status int, err error) int {
	if status == 0 && err != nil {
		return 1
	}
	return status
}

func (r *runner) closeQuit() { r.quitOnce.Do(func() { close(r.quit) }) }

// start starts the command for term t.
func (r *runner) start(t *streams.Term) (*child, error) {
	return startChild(r.e.a, r.path, r.argv,
		envElection+"="+r.name,
		envToken+"="+strconv.FormatUint(t.Token(), 10),
		envIdentity+"="+r.identity,
		envBucket+"="+r.e.bucket,
	)
}

// stop stops the command, SIGTERM first and SIGKILL after the grace, and
// returns its exit status.
func (r *runner) stop(ch *child) int { return ch.stop(r.log, r.flags.grace) }

// lookCommand finds the command run and shards run start, failing as
// shells do: 127 when it is not found, 126 when it is there but is not an
// executable file (no execute permission, or a directory).
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR):
		return "", &exitError{code: exitCannotRun, err: fmt.Errorf("cannot run %q: it is not an executable file (check that it is a file with execute permission): %w", name, err)}
	case err != nil:
		return "", &exitError{code: exitNotFound, err: fmt.Errorf("cannot run %q: %w", name, err)}
	}
	return path, nil
}
