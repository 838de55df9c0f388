//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing outside Linux: children there end when their
// standard input closes (candidates) or when stopped (brokers).
func dieWithParent(*exec.Cmd) {}
