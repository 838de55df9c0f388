//go:build unix

package cli

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup puts the command in a process group of its own, so that
// stopping it stops whatever it started too, and (on Linux) has it sent
// SIGTERM if conclave dies without stopping it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// terminateGroup sends SIGTERM to the process group led by pid, then
// SIGCONT so that members stopped by job control act on it.
func terminateGroup(pid int) error {
	if err := signalGroup(pid, syscall.SIGTERM); err != nil {
		return err
	}
	return signalGroup(pid, syscall.SIGCONT)
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error { return signalGroup(pid, syscall.SIGKILL) }

func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // gone already
	}
	return err
}

// exitStatus is a finished command's exit status as a shell reports it:
// 128 plus the signal's number when a signal killed it.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
