//go:build linux

package vfs

import "golang.org/x/sys/unix"

// DropCache asks the kernel to evict the page cache of [off, off+n). Clean
// pages go at once; the kernel starts writeback of dirty ones and keeps
// them, so it never loses data.
func (f *osFile) DropCache(off, n int64) error {
	return unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
