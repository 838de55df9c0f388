package cli

import "syscall"

// setDeathSignal has the kernel send the command SIGTERM when the thread
// that started it ends, as it does when conclave is killed.
func setDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGTERM }
