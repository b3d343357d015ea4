//go:build linux

package vfs

import (
	"bytes"
	"path/filepath"
	"testing"
)

// After Preallocate the file is longer than its data, and writes land
// after the data, not after the reserved zeros; Truncate moves both ends.
func TestPreallocateKeepsWritePosition(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := Default.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	size := func() int64 {
		t.Helper()
		n, err := f.Size()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	write("abc")
	if err := Preallocate(f, 4096); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != 4096 {
		t.Fatalf("size %d after Preallocate(4096)", n)
	}
	write("def")
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	write("XY")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != 7 {
		t.Fatalf("size %d, want 7", n)
	}
	got := make([]byte, 7)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte("abcdeXY")) {
		t.Fatalf("file holds %q", got)
	}
	// Reopened for appending, the file appends at its end again.
	g, err := Default.OpenRW(name)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Write([]byte("Z")); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.Size(); n != 8 {
		t.Fatalf("size %d after an append on a reopened file", n)
	}
}

// Reservations made while another goroutine writes (a segment's appender
// reserving while a reader or a sync writes the appends that waited in
// memory) keep every write where it belongs: the data is the writes in
// order, from the start. Run under the race detector (CI does), this also
// checks that the write position is not read and moved unordered.
func TestPreallocateWhileWriting(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := Default.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Preallocate(f, 4096); err != nil {
		t.Fatal(err)
	}
	const writes, size = 200, 1000
	done := make(chan error, 1)
	go func() {
		for i := range writes {
			if _, err := f.Write(bytes.Repeat([]byte{byte(i)}, size)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range writes {
		if err := Preallocate(f, int64(4096+(i+1)*size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b := make([]byte, writes*size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	for i := range writes {
		if got := b[i*size : (i+1)*size]; !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, size)) {
			t.Fatalf("write %d is not at %d: %v...", i, i*size, got[:8])
		}
	}
}
