//go:build unix

package broker

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (which Go raised to the
// hard limit at start).
func openFileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return uint64(rl.Cur), true
}
