//go:build !linux

package main

import "syscall"

// childAttr is nil off Linux, where the benchmark does not run (see
// checkPlatform); it exists so that the package builds everywhere.
func childAttr() *syscall.SysProcAttr { return nil }
