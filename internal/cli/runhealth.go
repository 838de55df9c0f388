package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/conclave-io/conclave/config"
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

// standingOptions are the election options of run's --priority,
// --health-cmd, --health-every and --min-term, checked.
func (f runFlags) standingOptions() ([]streams.Option, error) {
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
		opts = append(opts, streams.WithHealthCheck(shellHealthCheck(f.healthCmd), f.healthEvery))
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
	t, err := a.target()
	if err != nil {
		return nil, err
	}
	cfg := t.cfg
	if cfg == nil {
		lookup := a.conn.lookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		if cfg, err = config.FromEnv(lookup); err != nil {
			return nil, err
		}
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
