//go:build !linux

package testcluster

import (
	"os/exec"
	"syscall"
)

// dieWithParent is Linux-only; elsewhere a broker may outlive a test
// binary that panics. ownGroup puts it in a process group of its own.
func dieWithParent(cmd *exec.Cmd, ownGroup bool) {
	if ownGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
}
