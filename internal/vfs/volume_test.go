package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// TestMemVolumeSyncsEveryFile: a volume sync makes every file's content
// durable, through any handle, open or closed; what is written after it
// is not.
func TestMemVolumeSyncsEveryFile(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("v/a"); err != nil {
		t.Fatal(err)
	}
	a, _ := m.Create("v/a/one")
	b, _ := m.Create("v/two")
	if err := m.SyncDir("v/a"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("v"); err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("aa"))
	b.Write([]byte("bb"))
	b.Close()
	vol, _, err := vfs.OpenVolume(m, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Sync(); err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("lost"))
	c := m.Crash()
	for name, want := range map[string]string{"v/a/one": "aa", "v/two": "bb"} {
		got, err := vfs.ReadFile(c, name)
		if err != nil || string(got) != want {
			t.Errorf("%s after the crash: %q, %v; want %q", name, got, err, want)
		}
	}
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == "v" {
			return vfs.ErrInjected
		}
		return nil
	})
	if err := vol.Sync(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("failing volume sync: %v", err)
	}
}

// TestOSVolumeIDs: directories of one filesystem share a volume ID, and a
// volume sync of the OS filesystem succeeds.
func TestOSVolumeIDs(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	a, errA := vfs.VolumeID(vfs.Default, dir)
	b, errB := vfs.VolumeID(vfs.Default, sub)
	if errors.Is(errA, vfs.ErrNoVolume) {
		t.Skip("no volume sync on this platform")
	}
	if errA != nil || errB != nil || a != b {
		t.Fatalf("volume ids %d, %d (%v, %v); want one", a, b, errA, errB)
	}
	if _, err := vfs.VolumeID(vfs.Default, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("volume id of a missing directory: no error")
	}
	vol, _, err := vfs.OpenVolume(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	if err := vol.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestLossyVolumeWritesUnsynced: a LossyFS volume sync puts every file's
// unsynced bytes on disk, including a closed file's, but not a file whose
// Sync lies.
func TestLossyVolumeWritesUnsynced(t *testing.T) {
	l, err := vfs.FromTestEnv(vfs.LoseUnsyncedBrokenSync)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	open := filepath.Join(dir, "open.dat")
	closed := filepath.Join(dir, "closed.dat")
	lying := filepath.Join(dir, "segment.log")
	f, _ := l.Create(open)
	g, _ := l.Create(closed)
	h, _ := l.Create(lying)
	for _, w := range []vfs.File{f, g, h} {
		if _, err := w.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
	}
	g.Close()
	if got := onDisk(t, open); got != "" {
		t.Fatalf("before the sync %q is on disk", got)
	}
	vol, _, err := vfs.OpenVolume(l, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(t, open); got != "data" {
		t.Errorf("open file on disk: %q", got)
	}
	if got := onDisk(t, closed); got != "data" {
		t.Errorf("closed file on disk: %q", got)
	}
	if got := onDisk(t, lying); got != "" {
		t.Errorf("a file whose sync lies has %q on disk", got)
	}
	if got := readAll(t, f); string(got) != "data" {
		t.Errorf("read after the sync: %q", got)
	}
}
