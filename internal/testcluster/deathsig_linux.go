package testcluster

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the broker if the test binary dies
// first (a test timeout panics without running cleanups), so no broker
// outlives its test; ownGroup puts it in a process group of its own.
func dieWithParent(cmd *exec.Cmd, ownGroup bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: ownGroup}
}
