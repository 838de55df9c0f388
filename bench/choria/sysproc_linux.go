package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when this one dies, so
// that a benchmark interrupted by a signal or a test timeout leaves no
// broker or candidates behind.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
