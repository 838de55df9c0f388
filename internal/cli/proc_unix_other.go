//go:build unix && !linux

package cli

import "syscall"

// setDeathSignal does nothing: only Linux can signal a command when its
// parent dies.
func setDeathSignal(*syscall.SysProcAttr) {}
