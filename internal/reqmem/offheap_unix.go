//go:build unix

package reqmem

import "golang.org/x/sys/unix"

const canMap = true

// mapBuffer maps n bytes of anonymous memory, which the kernel zeroes
// page by page as they are first touched.
func mapBuffer(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

func unmapBuffer(b []byte) { _ = unix.Munmap(b) }
