package testcluster

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the broker if the test binary dies
// first (a test timeout panics without running cleanups), so no broker
// outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
