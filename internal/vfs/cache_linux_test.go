//go:build linux

package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of path's first n bytes in the page cache.
func resident(t *testing.T, path string, n int) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	c := 0
	for _, v := range vec {
		c += int(v & 1)
	}
	return c
}

// TestDropCacheEvicts: on the OS filesystem, DropCache evicts synced pages
// and the content reads back unchanged (from the disk).
func TestDropCacheEvicts(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is tmpfs, whose pages are the file and cannot be evicted", dir)
	}
	path := filepath.Join(dir, "seg")
	f, err := Default.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 4 << 20
	data := bytes.Repeat([]byte("moonmq-"), n/7+1)[:n]
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := resident(t, path, n)
	// The whole file: the kernel keeps a large folio that the range
	// covers only in part.
	if err := DropCache(f, 0, n); err != nil {
		t.Fatal(err)
	}
	after := resident(t, path, n)
	pages := n / os.Getpagesize()
	if before < pages/2 || after > pages/4+8 {
		t.Fatalf("resident pages of %d: %d before DropCache of all, %d after", pages, before, after)
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content changed after DropCache (err %v)", err)
	}
}
