package diskhealth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/vfs"
)

// FaultsFileEnv names the environment variable that makes a broker
// process read disk faults to inject from a file (FaultsFromTestEnv). It
// exists for tests and the fault harness (internal/chaos); never set it in
// production. The file holds one fault per line, re-read at most every
// 100 ms; an empty or missing file is a healthy disk:
//
//	full             statfs reports no space, and writes fail with ENOSPC
//	                 unless they land in blocks the file reserved
//	stall DURATION   every fsync first sleeps DURATION
//	fsync-eio        every fsync fails with EIO
//	read-eio SUBSTR  reads of files whose path holds SUBSTR fail with EIO
const FaultsFileEnv = "MOONMQ_TEST_DISK_FAULTS_FILE"

// Faults are injected disk faults, as the file FaultsFileEnv names says.
type Faults struct {
	path string

	mu      sync.Mutex
	readAt  time.Time
	full    bool
	stall   time.Duration
	syncEIO bool
	readEIO []string
}

// FaultsFromTestEnv returns the faults of the file value names, or nil for
// an empty value. A file that does not parse is an error at start, and
// ignored later (the last faults read stay).
func FaultsFromTestEnv(value string) (*Faults, error) {
	if value == "" {
		return nil, nil
	}
	f := &Faults{path: value}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readLocked(); err != nil {
		return nil, fmt.Errorf("%s=%q: %w", FaultsFileEnv, value, err)
	}
	return f, nil
}

// WriteFaults replaces the faults file at path with lines (none: a healthy
// disk), whole, so a reader never sees half of it.
func WriteFaults(path string, lines ...string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (f *Faults) current() (full bool, stall time.Duration, syncEIO bool, readEIO []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.readAt) >= 100*time.Millisecond {
		_ = f.readLocked()
	}
	return f.full, f.stall, f.syncEIO, f.readEIO
}

func (f *Faults) readLocked() error {
	f.readAt = time.Now()
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return err
	}
	var full, syncEIO bool
	var stall time.Duration
	var readEIO []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "full" && len(fields) == 1:
			full = true
		case fields[0] == "fsync-eio" && len(fields) == 1:
			syncEIO = true
		case fields[0] == "stall" && len(fields) == 2:
			d, err := time.ParseDuration(fields[1])
			if err != nil {
				return fmt.Errorf("disk faults file %s: %q: %w", f.path, line, err)
			}
			stall = d
		case fields[0] == "read-eio" && len(fields) == 2:
			readEIO = append(readEIO, fields[1])
		default:
			return fmt.Errorf("disk faults file %s: unknown fault %q", f.path, line)
		}
	}
	f.full, f.stall, f.syncEIO, f.readEIO = full, stall, syncEIO, readEIO
	return nil
}

// Statfs wraps a statfs: while the disk is "full" no space is free.
func (f *Faults) Statfs(inner func(string) (int64, int64, error)) func(string) (int64, int64, error) {
	return func(dir string) (int64, int64, error) {
		free, total, err := inner(dir)
		if full, _, _, _ := f.current(); full && err == nil {
			free = 0
		}
		return free, total, err
	}
}

// FS wraps fsys with the faults.
func (f *Faults) FS(fsys vfs.FS) vfs.FS { return faultyFS{FS: fsys, f: f} }

type faultyFS struct {
	vfs.FS
	f *Faults
}

func (w faultyFS) space(op, name string) error {
	if full, _, _, _ := w.f.current(); full {
		return &fs.PathError{Op: op, Path: name, Err: syscall.ENOSPC}
	}
	return nil
}

func (w faultyFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, f: w.f, name: name}, nil
}

func (w faultyFS) Create(name string) (vfs.File, error) {
	if err := w.space("open", name); err != nil {
		return nil, err
	}
	file, err := w.FS.Create(name)
	return w.wrap(name, file, err)
}

func (w faultyFS) OpenRW(name string) (vfs.File, error) {
	file, err := w.FS.OpenRW(name)
	return w.wrap(name, file, err)
}

func (w faultyFS) Open(name string) (vfs.File, error) {
	file, err := w.FS.Open(name)
	return w.wrap(name, file, err)
}

func (w faultyFS) SyncDir(dir string) error {
	if err := syncFault(w.f, dir); err != nil {
		return err
	}
	return w.FS.SyncDir(dir)
}

// faultyFile is a file on the faulty disk. While the disk is "full" it
// refuses what a full ext4 volume refuses: writes that need new blocks
// and reservations of them. Writes into blocks the file has already
// reserved (Preallocate) succeed, as they do on a real full disk, so it
// keeps the file's write position and reserved end to tell them apart.
type faultyFile struct {
	vfs.File
	f    *Faults
	name string

	mu         sync.Mutex // the file's writer and its readers' flushes write
	positional bool       // reserved once: pos and reserved are kept
	pos        int64      // where the next write lands
	reserved   int64      // the end of the blocks reserved
}

func (f *faultyFile) full(op string) error {
	return &fs.PathError{Op: op, Path: f.name, Err: syscall.ENOSPC}
}

func (f *faultyFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if full, _, _, _ := f.f.current(); full && (!f.positional || f.pos+int64(len(p)) > f.reserved) {
		return 0, f.full("write")
	}
	n, err := f.File.Write(p)
	f.pos += int64(n)
	return n, err
}

// Preallocate passes vfs.Preallocator through; a "full" disk refuses to
// reserve blocks beyond those the file has.
func (f *faultyFile) Preallocate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos := f.pos
	if !f.positional {
		n, err := f.File.Size() // the written end until the first reservation
		if err != nil {
			return err
		}
		pos = n
	}
	if full, _, _, _ := f.f.current(); full && size > max(f.reserved, pos) {
		return f.full("fallocate")
	}
	if err := vfs.Preallocate(f.File, size); err != nil {
		return err
	}
	f.positional, f.pos, f.reserved = true, pos, max(f.reserved, size)
	return nil
}

func (f *faultyFile) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.File.Truncate(size)
	if err == nil && f.positional {
		f.pos, f.reserved = size, min(f.reserved, size)
	}
	return err
}

func (f *faultyFile) Sync() error {
	if err := syncFault(f.f, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if _, _, _, readEIO := f.f.current(); len(readEIO) > 0 {
		for _, s := range readEIO {
			if strings.Contains(f.name, s) {
				return 0, &fs.PathError{Op: "read", Path: f.name, Err: syscall.EIO}
			}
		}
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) DropCache(off, n int64) error { return vfs.DropCache(f.File, off, n) }

func syncFault(f *Faults, name string) error {
	_, stall, syncEIO, _ := f.current()
	if stall > 0 {
		time.Sleep(stall)
	}
	if syncEIO {
		return &fs.PathError{Op: "sync", Path: name, Err: syscall.EIO}
	}
	return nil
}

// VolumeID and OpenVolume pass vfs.VolumeFS through; a volume's sync
// stalls and fails as a file's does.
func (w faultyFS) VolumeID(dir string) (uint64, error) { return vfs.VolumeID(w.FS, dir) }

func (w faultyFS) OpenVolume(dir string) (vfs.Volume, error) {
	v, _, err := vfs.OpenVolume(w.FS, dir)
	if err != nil {
		return nil, err
	}
	return faultyVolume{Volume: v, f: w.f, dir: dir}, nil
}

type faultyVolume struct {
	vfs.Volume
	f   *Faults
	dir string
}

func (v faultyVolume) Sync() error {
	if err := syncFault(v.f, v.dir); err != nil {
		return err
	}
	return v.Volume.Sync()
}
