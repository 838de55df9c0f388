package main

import "syscall"

// childAttr puts a child in a process group of its own and has the kernel
// kill it should the benchmark die without cleaning up.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
