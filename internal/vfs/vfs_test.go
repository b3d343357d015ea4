package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

func TestMemCrashKeepsOnlySynced(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("d"); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenRW("d/a")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(" world"))
	// File creation not yet durable: the entry itself is lost.
	if _, err := m.Crash().Open("d/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unsynced create survived crash: %v", err)
	}
	if err := m.SyncDir("d"); err != nil {
		t.Fatal(err)
	}
	c := m.Crash()
	got, err := ReadFile(c, "d/a")
	if err != nil || string(got) != "hello" {
		t.Fatalf("got %q %v", got, err)
	}
	// Torn crash keeps a prefix of the unsynced tail.
	for seed := range uint64(20) {
		got, _ := ReadFile(m.CrashTorn(rand.New(rand.NewPCG(seed, 1))), "d/a")
		if !bytes.HasPrefix([]byte("hello world"), got) || len(got) < 5 {
			t.Fatalf("torn crash gave %q", got)
		}
	}
	// Truncate below the synced size then crash: the synced content returns.
	f.Truncate(2)
	got, _ = ReadFile(m.Crash(), "d/a")
	if string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
	// Unsynced remove is reverted; synced remove sticks.
	m.Remove("d/a")
	if _, err := m.Crash().Open("d/a"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("d")
	if _, err := m.Crash().Open("d/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("synced remove reverted")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	for _, fsys := range []FS{NewMem(), Default} {
		dir := "x"
		if fsys == Default {
			dir = t.TempDir()
		} else {
			fsys.MkdirAll(dir)
		}
		p := filepath.Join(dir, "state")
		if err := WriteFileAtomic(fsys, p, []byte("v1")); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(fsys, p, []byte("v2")); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(fsys, p)
		if err != nil || string(got) != "v2" {
			t.Fatalf("got %q %v", got, err)
		}
		if m, ok := fsys.(*MemFS); ok {
			got, _ := ReadFile(m.Crash(), p)
			if string(got) != "v2" {
				t.Fatalf("after crash got %q", got)
			}
		}
		names, _ := fsys.ReadDir(dir)
		if len(names) != 1 || names[0] != "state" {
			t.Fatalf("dir = %v", names)
		}
	}
}

func TestFailNextSync(t *testing.T) {
	m := NewMem()
	f, _ := m.Create("f")
	m.FailNext(OpSync, "f", ErrInjected)
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("got %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestOSFileAppends(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := Default.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte("abcdef"))
	f.Truncate(3)
	f.Write([]byte("XY"))
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "abcXY" {
		t.Fatalf("%q %v", buf, err)
	}
	if n, _ := f.Size(); n != 5 {
		t.Fatal(n)
	}
}
