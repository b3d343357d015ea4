package vfs

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"

	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Op names a MemFS operation for error injection.
type Op int

// Operations that a MemFS hook can fail.
const (
	OpCreate Op = iota
	OpOpen
	OpWrite
	OpSync
	OpTruncate
	OpRemove
	OpRename
	OpMkdir
	OpReadDir
	OpSyncDir
)

// Hook is consulted before every MemFS operation; a non-nil result makes the
// operation fail with that error and have no effect.
type Hook func(op Op, name string) error

// ErrInjected is a convenient error for hooks to return.
var ErrInjected = errors.New("vfs: injected error")

// MemFS is an in-memory FS that tracks, separately from what readers see,
// what would survive a power loss: file contents up to their last Sync, and
// directory entries as of the last SyncDir of their parent. Directories
// themselves are durable as soon as they are created, a simplification the
// storage layer does not depend on.
type MemFS struct {
	mu   sync.Mutex
	live map[string]*memNode // current directory entries (files), by clean path
	dur  map[string]*memNode // directory entries as of the last SyncDir
	dirs map[string]bool
	hook Hook
}

type memNode struct {
	data []byte
	// durable is the content that survives a crash. appendOnly records that
	// data still starts with durable, so a torn crash may keep a prefix of
	// the unsynced tail.
	durable    []byte
	appendOnly bool
}

// NewMem returns an empty in-memory filesystem.
func NewMem() *MemFS {
	return &MemFS{live: map[string]*memNode{}, dur: map[string]*memNode{}, dirs: map[string]bool{}}
}

// SetHook installs h (nil removes it).
func (m *MemFS) SetHook(h Hook) {
	m.mu.Lock()
	m.hook = h
	m.mu.Unlock()
}

// FailNext makes the next operation op on a name containing substr (any name
// when substr is empty) fail with err; later operations succeed.
func (m *MemFS) FailNext(op Op, substr string, err error) {
	var once sync.Once
	m.SetHook(func(o Op, name string) error {
		if o != op || !strings.Contains(name, substr) {
			return nil
		}
		var out error
		once.Do(func() { out = err })
		return out
	})
}

// Crash returns the filesystem as it would be found after a power loss:
// every file holds only its synced bytes and only synced directory entries
// exist. The receiver is left untouched, and files open on it keep working
// on the old state.
func (m *MemFS) Crash() *MemFS { return m.crash(nil) }

// CrashTorn is like Crash but models torn writes: a file whose unsynced
// changes were only appends keeps a random prefix of them.
func (m *MemFS) CrashTorn(rng *rand.Rand) *MemFS { return m.crash(rng) }

func (m *MemFS) crash(rng *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := NewMem()
	maps.Copy(out.dirs, m.dirs)
	copied := map[*memNode]*memNode{}
	for name, n := range m.dur {
		c, ok := copied[n]
		if !ok {
			content := n.durable
			if rng != nil && n.appendOnly && len(n.data) > len(n.durable) {
				content = n.data[:len(n.durable)+rng.IntN(len(n.data)-len(n.durable)+1)]
			}
			c = &memNode{data: slices.Clone(content), durable: slices.Clone(content), appendOnly: true}
			copied[n] = c
		}
		out.live[name] = c
		out.dur[name] = c
	}
	return out
}

func clean(name string) string { return filepath.Clean(name) }

func (m *MemFS) check(op Op, name string) error {
	if m.hook != nil {
		if err := m.hook(op, name); err != nil {
			return &fs.PathError{Op: opName[op], Path: name, Err: err}
		}
	}
	return nil
}

var opName = map[Op]string{OpCreate: "create", OpOpen: "open", OpWrite: "write", OpSync: "sync",
	OpTruncate: "truncate", OpRemove: "remove", OpRename: "rename", OpMkdir: "mkdir",
	OpReadDir: "readdir", OpSyncDir: "syncdir"}

func (m *MemFS) dirExists(dir string) bool {
	return dir == "." || dir == "/" || m.dirs[dir]
}

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

func (m *MemFS) open(name string, op Op, create, trunc, readOnly bool) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(op, name); err != nil {
		return nil, err
	}
	n, ok := m.live[name]
	if !ok {
		if !create {
			return nil, notExist("open", name)
		}
		if !m.dirExists(filepath.Dir(name)) {
			return nil, notExist("open", name)
		}
		if m.dirs[name] {
			return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("is a directory")}
		}
		n = &memNode{appendOnly: true}
		m.live[name] = n
	} else if trunc {
		n.data = nil
		n.appendOnly = len(n.durable) == 0
	}
	return &memFile{fs: m, n: n, name: name, readOnly: readOnly}, nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) { return m.open(name, OpCreate, true, true, false) }

// OpenRW implements FS.
func (m *MemFS) OpenRW(name string) (File, error) { return m.open(name, OpOpen, true, false, false) }

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, OpOpen, false, false, true) }

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpRemove, name); err != nil {
		return err
	}
	if _, ok := m.live[name]; ok {
		delete(m.live, name)
		return nil
	}
	if m.dirs[name] {
		prefix := name + "/"
		for k := range m.live {
			if strings.HasPrefix(k, prefix) {
				return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
			}
		}
		for k := range m.dirs {
			if strings.HasPrefix(k, prefix) {
				return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
			}
		}
		delete(m.dirs, name)
		return nil
	}
	return notExist("remove", name)
}

// RemoveAll implements FS. Removed directories vanish durably at once (as
// directories are durable at creation); the files in them vanish from the
// durable state too, since nothing can reach them any more.
func (m *MemFS) RemoveAll(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpRemove, name); err != nil {
		return err
	}
	prefix := name + "/"
	for k := range m.live {
		if k == name || strings.HasPrefix(k, prefix) {
			delete(m.live, k)
		}
	}
	for k := range m.dur {
		if strings.HasPrefix(k, prefix) {
			delete(m.dur, k)
		}
	}
	for k := range m.dirs {
		if k == name || strings.HasPrefix(k, prefix) {
			delete(m.dirs, k)
		}
	}
	return nil
}

// Rename implements FS for files.
func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpRename, oldname); err != nil {
		return err
	}
	n, ok := m.live[oldname]
	if !ok {
		return notExist("rename", oldname)
	}
	if !m.dirExists(filepath.Dir(newname)) {
		return notExist("rename", newname)
	}
	delete(m.live, oldname)
	m.live[newname] = n
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpMkdir, dir); err != nil {
		return err
	}
	for d := dir; d != "." && d != "/"; d = filepath.Dir(d) {
		if _, ok := m.live[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: errors.New("not a directory")}
		}
		m.dirs[d] = true
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	if !m.dirExists(dir) {
		return nil, notExist("readdir", dir)
	}
	var names []string
	for k := range m.live {
		if filepath.Dir(k) == dir {
			names = append(names, filepath.Base(k))
		}
	}
	for k := range m.dirs {
		if filepath.Dir(k) == dir && k != dir {
			names = append(names, filepath.Base(k))
		}
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements FS: the durable entries of dir become its live ones.
func (m *MemFS) SyncDir(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpSyncDir, dir); err != nil {
		return err
	}
	if !m.dirExists(dir) {
		return notExist("syncdir", dir)
	}
	for k := range m.dur {
		if filepath.Dir(k) == dir {
			delete(m.dur, k)
		}
	}
	for k, n := range m.live {
		if filepath.Dir(k) == dir {
			m.dur[k] = n
		}
	}
	return nil
}

type memFile struct {
	fs       *MemFS
	n        *memNode
	name     string
	readOnly bool
	closed   bool
}

var errClosed = errors.New("vfs: file already closed")

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("negative offset")}
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: os.ErrPermission}
	}
	if err := f.fs.check(OpWrite, f.name); err != nil {
		return 0, err
	}
	f.n.data = append(f.n.data, p...)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	if err := f.fs.check(OpSync, f.name); err != nil {
		return err
	}
	f.n.sync()
	return nil
}

// sync makes n's content durable; the caller holds MemFS.mu.
func (n *memNode) sync() {
	if n.appendOnly && len(n.data) >= len(n.durable) {
		// Append rather than copy the whole file so that frequent syncs of a
		// growing file stay linear.
		n.durable = append(n.durable, n.data[len(n.durable):]...)
	} else {
		n.durable = slices.Clone(n.data)
	}
	n.appendOnly = true
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	if f.readOnly {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: os.ErrPermission}
	}
	if err := f.fs.check(OpTruncate, f.name); err != nil {
		return err
	}
	if size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: errors.New("negative size")}
	}
	n := f.n
	if size <= int64(len(n.data)) {
		n.data = n.data[:size:size]
	} else {
		n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	}
	if size < int64(len(n.durable)) {
		n.appendOnly = false
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	f.closed = true
	return nil
}

// VolumeID implements VolumeFS: a MemFS is one volume.
func (m *MemFS) VolumeID(dir string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirExists(clean(dir)) {
		return 0, notExist("stat", dir)
	}
	return 1, nil
}

// OpenVolume implements VolumeFS. Its Sync makes every file's content
// durable, as a Sync of each would, and consults the hook as OpSync on
// the directory it was opened on; directory entries stay as they were.
func (m *MemFS) OpenVolume(dir string) (Volume, error) {
	if _, err := m.VolumeID(dir); err != nil {
		return nil, err
	}
	return memVolume{m, clean(dir)}, nil
}

type memVolume struct {
	m   *MemFS
	dir string
}

func (v memVolume) Sync() error {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpSync, v.dir); err != nil {
		return volumeError(v.dir, err)
	}
	seen := map[*memNode]bool{}
	for _, nodes := range []map[string]*memNode{m.live, m.dur} {
		for _, n := range nodes {
			if !seen[n] {
				seen[n] = true
				n.sync()
			}
		}
	}
	return nil
}

func (memVolume) Close() error { return nil }
