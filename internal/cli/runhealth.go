package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// healthCmdWait is how long a health command that was killed at its
// timeout has to let go of its output before it is given up on.
const healthCmdWait = time.Second

// shellHealthCheck returns a health check for streams.WithHealthCheck that
// runs command through the shell (sh -c): exit status 0 is healthy, any
// other, or running past the check's deadline (the interval), is not. The
// command runs in a process group of its own, killed whole at the deadline.
func shellHealthCheck(command string) func(context.Context) error {
	return func(ctx context.Context) error {
		cmd := exec.Command("/bin/sh", "-c", command)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = healthCmdWait
		setProcessGroup(cmd)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("health command %q: %w", command, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			_ = killGroup(cmd.Process.Pid)
			<-done
			return fmt.Errorf("health command %q still ran after %v: killed: %w", command, healthDeadline(ctx), ctx.Err())
		}
		if err == nil {
			return nil
		}
		msg := strings.TrimSpace(out.String())
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && msg != "" {
			return fmt.Errorf("health command %q: %w: %s", command, err, msg)
		}
		return fmt.Errorf("health command %q: %w", command, err)
	}
}

// healthDeadline is how long a check had, for messages.
func healthDeadline(ctx context.Context) string {
	if d, ok := ctx.Deadline(); ok {
		return "its deadline " + d.Format(time.TimeOnly)
	}
	return "its deadline"
}

// maxRunPriority is the highest --priority (and lowest, negated), as
// streams.WithPriority takes it.
const maxRunPriority = 1 << 30

// healthReport tells run's log when its health command turns failing or
// passing, in words that fit whether it leads: the election's own lines
// about it are dropped (see runLogger). Its election is set before the
// election starts, so before the first check.
type healthReport struct {
	log      *eventLog
	identity string
	name     string
	el       *streams.Election

	mu      sync.Mutex
	healthy bool
}

// wrap returns check, reporting each change of its outcome.
func (h *healthReport) wrap(check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		err := check(ctx)
		if ctx.Err() == nil {
			h.outcome(err)
		}
		return err
	}
}

func (h *healthReport) outcome(err error) {
	h.mu.Lock()
	changed := (err == nil) != h.healthy
	h.healthy = err == nil
	h.mu.Unlock()
	switch {
	case !changed:
	case err == nil:
		h.log.event("healthy", nil, "%s is healthy again: campaigning in %s", h.identity, h.name)
	case h.el != nil && h.el.IsLeader():
		h.log.event("unhealthy", nil, "warning: %s is unhealthy (%v): it still leads %s, and hands over to a healthy candidate if one stands", h.identity, err, h.name)
	default:
		h.log.event("unhealthy", nil, "warning: %s is unhealthy (%v): not campaigning in %s until it is healthy again", h.identity, err, h.name)
	}
}

// runLogger is run's logger for its election: stderrLogger, less the
// election's own lines about the health check when run reports them
// (healthReport), since those say "not campaigning" to a leader and show
// the recovery only with --verbose.
type runLogger struct {
	stderrLogger
	health bool
}

func (l runLogger) Infof(format string, args ...any) {
	if !l.healthLine(format, args) {
		l.stderrLogger.Infof(format, args...)
	}
}

func (l runLogger) Warnf(format string, args ...any) {
	if !l.healthLine(format, args) {
		l.stderrLogger.Warnf(format, args...)
	}
}

// healthLine reports whether a line is the election's about a change of
// health, which healthReport says instead.
func (l runLogger) healthLine(format string, args []any) bool {
	if !l.health {
		return false
	}
	msg := fmt.Sprintf(format, args...)
	return strings.Contains(msg, " is healthy again: campaigning") ||
		(strings.Contains(msg, " is unhealthy (") && strings.Contains(msg, "not campaigning"))
}

// standingOptions are the election options of run's --priority,
// --health-cmd, --health-every and --min-term, checked; report, when not
// nil, is told of each change of health.
func (f runFlags) standingOptions(report *healthReport) ([]streams.Option, error) {
	var opts []streams.Option
	if f.priority > maxRunPriority || f.priority < -maxRunPriority {
		return nil, fmt.Errorf("--priority %d is out of range: give a number between -%d and %d (higher is preferred; negative for a candidate that should lead only when no other can)", f.priority, maxRunPriority, maxRunPriority)
	}
	if f.set["priority"] {
		opts = append(opts, streams.WithPriority(f.priority))
	}
	switch {
	case f.set["health-every"] && f.healthCmd == "":
		return nil, errors.New("--health-every without --health-cmd: give the health command to run, such as --health-cmd 'curl -fs localhost:8080/healthz'")
	case f.set["health-cmd"] && strings.TrimSpace(f.healthCmd) == "":
		return nil, errors.New("--health-cmd is empty: give a shell command that exits with status 0 while healthy")
	case f.healthEvery <= 0:
		return nil, fmt.Errorf("--health-every %v is not positive: give how often to run --health-cmd, such as 5s", f.healthEvery)
	}
	if f.healthCmd != "" {
		check := shellHealthCheck(f.healthCmd)
		if report != nil {
			check = report.wrap(check)
		}
		opts = append(opts, streams.WithHealthCheck(check, f.healthEvery))
	}
	if f.set["min-term"] {
		if f.minTerm <= 0 {
			return nil, fmt.Errorf("--min-term %v is not positive: give how long a term lasts before the leader hands over to a better candidate, such as 30s", f.minTerm)
		}
		opts = append(opts, streams.WithMinTerm(f.minTerm))
	}
	return opts, nil
}

// electionDefaults are the options of the configuration's
// plugin.conclave.election.priority and .min_term, as the framework applies
// them (the --config file, the environment overriding it), for those of
// --priority and --min-term that were not given.
func (a *app) electionDefaults(f runFlags) ([]streams.Option, error) {
	_, cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	var opts []streams.Option
	if !f.set["priority"] && cfg.ElectionPriority != 0 {
		opts = append(opts, streams.WithPriority(cfg.ElectionPriority))
	}
	if !f.set["min-term"] && cfg.ElectionMinTerm > 0 {
		opts = append(opts, streams.WithMinTerm(cfg.ElectionMinTerm))
	}
	return opts, nil
}
