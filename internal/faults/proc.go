package faults

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// process is a child process of the harness: a broker or a candidate.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once reaped
	// expected is set before the harness kills or stops the process, so
	// that an exit without it is reported.
	expected atomic.Bool
	// Set before done closes.
	exitedAt int64
	state    *os.ProcessState
}

// startProcess starts bin with args, its output appended to logPath. The
// child is killed if the harness dies (Pdeathsig), so that a crashed run
// leaves no brokers behind.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exitedAt = Mono()
		p.state = cmd.ProcessState
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// signal sends sig unless the process has been reaped.
func (p *process) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s has exited", p.name)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// alive reports whether the process has not been reaped yet.
func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait waits up to d for the process to be reaped.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// kill sends SIGKILL and waits until the process is reaped, returning the
// CLOCK_MONOTONIC time it was found dead.
func (p *process) kill() int64 {
	_ = p.signal(syscall.SIGKILL)
	<-p.done
	return p.exitedAt
}

// terminate asks the process to stop (SIGCONT first, in case it is
// stopped, then SIGTERM) and kills it if it has not exited within grace.
func (p *process) terminate(grace time.Duration) (clean bool) {
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	if p.wait(grace) {
		return p.state != nil && p.state.Success()
	}
	p.kill()
	return false
}

// stopped reports whether the kernel shows the process as stopped by a
// signal (state T in /proc/PID/stat).
func (p *process) stopped() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid()) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain them.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T'
}

// awaitStopped polls until the process is stopped or d passes.
func (p *process) awaitStopped(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if p.stopped() {
			return true
		}
		if !p.alive() || time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
