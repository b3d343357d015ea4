package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the process if the test binary dies
// first (a test timeout panics without running cleanups), so that no
// broker outlives its test holding ports and CPU.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// stopped reports whether /proc says the process is stopped (state T or
// t).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
}
