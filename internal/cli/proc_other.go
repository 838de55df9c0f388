//go:build !unix

package cli

import (
	"errors"
	"os"
	"os/exec"
)

// setProcessGroup does nothing where there are no process groups.
func setProcessGroup(*exec.Cmd) {}

// terminateGroup kills the process: there is no SIGTERM here.
func terminateGroup(pid int) error { return killProcess(pid) }

// killGroup kills the process.
func killGroup(pid int) error { return killProcess(pid) }

func killProcess(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// exitStatus is a finished command's exit status.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 1
		}
		return 0
	}
	return ps.ExitCode()
}
