//go:build unix && !linux

package testenv

import (
	"os/exec"
	"time"
)

// dieWithParent has no equivalent here: a process may outlive a test
// binary that panics.
func dieWithParent(*exec.Cmd) {}

// stopped cannot ask the kernel here; a short wait stands in for it, as a
// queued SIGSTOP is acted on within a scheduling slice.
func stopped(int) bool {
	time.Sleep(100 * time.Millisecond)
	return true
}
