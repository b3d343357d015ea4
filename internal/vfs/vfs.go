// Package vfs owns the small filesystem abstraction that MoonMQ's storage
// layer writes through, so that tests can substitute an in-memory
// filesystem that simulates power loss (every byte not yet fsynced is lost)
// and injects I/O errors, and Pool, which bounds the descriptors that many
// rarely read files hold.
//
// The package knows nothing about logs, segments or Kafka; it must not
// import other MoonMQ packages.
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// File is an open file. Writes always append at the current end of the
// file: the storage layer never overwrites bytes in place, and modelling
// only appends keeps the crash simulation in MemFS exact.
type File interface {
	io.ReaderAt
	io.Writer
	// Sync makes every byte written so far durable.
	Sync() error
	// Truncate changes the size of the file; later writes append at the
	// new end.
	Truncate(size int64) error
	// Size reports the current size of the file in bytes.
	Size() (int64, error)
	// Close releases the file.
	Close() error
}

// FS is the set of filesystem operations the storage layer needs.
type FS interface {
	// Create opens name read-write, creating it or truncating it.
	Create(name string) (File, error)
	// OpenRW opens name read-write, creating it if needed; writes append.
	OpenRW(name string) (File, error)
	// Open opens name read-only.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it; a missing name is not
	// an error.
	RemoveAll(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string) error
	// ReadDir returns the sorted names of the entries of dir.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the creations, removals and renames of dir's entries
	// durable.
	SyncDir(dir string) error
}

// CacheDropper is implemented by files whose pages the operating system
// caches and can be asked to evict (the OS filesystem on Linux).
type CacheDropper interface {
	// DropCache evicts the cached pages of [off, off+n) that are clean. It
	// is advice: it changes no content and may do nothing.
	DropCache(off, n int64) error
}

// DropCache evicts f's cached pages of [off, off+n) when f supports it
// (CacheDropper) and does nothing otherwise.
func DropCache(f File, off, n int64) error {
	if d, ok := f.(CacheDropper); ok && n > 0 {
		return d.DropCache(off, n)
	}
	return nil
}

// Preallocator is implemented by files that can reserve disk space ahead
// of their writes (the OS filesystem on Linux).
type Preallocator interface {
	// Preallocate makes the file at least size bytes long, the bytes
	// beyond what was written reading as zeros, without moving where the
	// next write lands. Size then reports the allocated length, not the
	// written one; Truncate ends both at its size.
	Preallocate(size int64) error
}

// ErrNoPreallocate is Preallocate's answer for a file that cannot do it.
var ErrNoPreallocate = errors.New("vfs: the file cannot preallocate")

// Preallocate grows f to size as Preallocator says, or returns
// ErrNoPreallocate.
func Preallocate(f File, size int64) error {
	if p, ok := f.(Preallocator); ok {
		return p.Preallocate(size)
	}
	return ErrNoPreallocate
}

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

// osFile is an OS file. Writes append (O_APPEND) until the first
// Preallocate; from then on the file's end is past the data, so the file
// keeps the write position itself (pos) and writes there. Writes do not
// overlap, but they need not all come from the goroutine that reserves: a
// segment's appender reserves while a reader or a sync writes the appends
// that waited in memory (storage's tail), so mu orders them.
type osFile struct {
	*os.File
	rc syscall.RawConn // the descriptor, for the calls os.File lacks

	mu         sync.Mutex
	positional bool
	pos        int64
}

func newOSFile(f *os.File) (File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &osFile{File: f, rc: rc}, nil
}

func (f *osFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.positional {
		return f.File.Write(p)
	}
	n, err := f.writeAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *osFile) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.File.Truncate(size)
	if err == nil && f.positional {
		f.pos = size
	}
	return err
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// O_APPEND makes every write land at the end even after a Truncate, which
// is the contract File promises.
func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return newOSFile(f)
}

func (osFS) OpenRW(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return newOSFile(f)
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return newOSFile(f)
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) RemoveAll(name string) error          { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFileAtomic replaces path with data such that, after a crash, path
// holds either its old content or data, never a mix: the data is written to
// a temporary file and fsynced before the rename, and the directory is
// fsynced after it so the rename itself survives.
func WriteFileAtomic(fs FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		// Best effort: a leftover temp file is harmless but untidy.
		_ = fs.Remove(tmp)
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
}

// ReadFile returns the whole content of name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}
