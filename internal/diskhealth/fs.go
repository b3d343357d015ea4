package diskhealth

import (
	"errors"

	"github.com/moonmq/moonmq/internal/vfs"
)

// errUnsupported: statfs cannot be read on this platform.
var errUnsupported = errors.New("free space is read on Linux only")

// FS wraps fsys so that m sees every write's failure and times every
// fsync (files' and directories'). It changes no result (beyond the
// injected Faults, which it sees like real ones).
func (m *Monitor) FS(fsys vfs.FS) vfs.FS {
	if m.cfg.Faults != nil {
		fsys = m.cfg.Faults.FS(fsys)
	}
	return watchedFS{FS: fsys, m: m}
}

type watchedFS struct {
	vfs.FS
	m *Monitor
}

func (w watchedFS) wrap(f vfs.File, err error) (vfs.File, error) {
	w.m.Observe(err)
	if err != nil {
		return nil, err
	}
	return watchedFile{File: f, m: w.m}, nil
}

func (w watchedFS) Create(name string) (vfs.File, error) { return w.wrap(w.FS.Create(name)) }
func (w watchedFS) OpenRW(name string) (vfs.File, error) { return w.wrap(w.FS.OpenRW(name)) }
func (w watchedFS) Open(name string) (vfs.File, error)   { return w.wrap(w.FS.Open(name)) }

func (w watchedFS) Rename(oldname, newname string) error {
	err := w.FS.Rename(oldname, newname)
	w.m.Observe(err)
	return err
}

func (w watchedFS) MkdirAll(dir string) error {
	err := w.FS.MkdirAll(dir)
	w.m.Observe(err)
	return err
}

func (w watchedFS) SyncDir(dir string) error {
	id := w.m.syncBegin()
	err := w.FS.SyncDir(dir)
	w.m.syncEnd(id)
	w.m.Observe(err)
	return err
}

type watchedFile struct {
	vfs.File
	m *Monitor
}

func (f watchedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.m.Observe(err)
	f.m.spent(int64(n))
	return n, err
}

func (f watchedFile) Sync() error {
	id := f.m.syncBegin()
	err := f.File.Sync()
	f.m.syncEnd(id)
	f.m.Observe(err)
	return err
}

// Preallocate passes vfs.Preallocator through. A refused reservation is
// not counted against the disk: the log then appends without one, and the
// writes themselves report a disk that is full.
//
// It counts as spending what the file grows by, so that reserving ahead
// of appends cannot take the volume past its reserve unseen.
func (f watchedFile) Preallocate(size int64) error {
	had, err := f.File.Size() // preallocation lengthens the file
	if err != nil {
		had = 0
	}
	if err := vfs.Preallocate(f.File, size); err != nil {
		return err
	}
	f.m.spent(size - had)
	return nil
}

// DropCache passes the page-cache advice through (vfs.CacheDropper).
func (f watchedFile) DropCache(off, n int64) error { return vfs.DropCache(f.File, off, n) }

// VolumeID and OpenVolume pass vfs.VolumeFS through; the volume's syncs
// are timed and their failures seen as a file's are.
func (w watchedFS) VolumeID(dir string) (uint64, error) { return vfs.VolumeID(w.FS, dir) }

func (w watchedFS) OpenVolume(dir string) (vfs.Volume, error) {
	v, _, err := vfs.OpenVolume(w.FS, dir)
	if err != nil {
		return nil, err
	}
	return watchedVolume{Volume: v, m: w.m}, nil
}

type watchedVolume struct {
	vfs.Volume
	m *Monitor
}

func (v watchedVolume) Sync() error {
	id := v.m.syncBegin()
	err := v.Volume.Sync()
	v.m.syncEnd(id)
	v.m.Observe(err)
	return err
}
