package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// LoseUnsyncedEnv names the environment variable that switches a broker
// process to a LossyFS (see FromTestEnv). It exists for the fault harness
// (internal/chaos): a SIGKILL of such a process loses exactly what a power
// cut would. Never set it in production.
const LoseUnsyncedEnv = "MOONMQ_TEST_LOSE_UNSYNCED"

// Values of LoseUnsyncedEnv that FromTestEnv accepts.
const (
	// LoseUnsynced keeps unsynced writes in memory; Sync makes them
	// durable.
	LoseUnsynced = "1"
	// LoseUnsyncedBrokenSync is LoseUnsynced with a lying fsync for
	// segment files (names ending in ".log"): Sync reports success and
	// writes nothing, so every record of the process's run is lost when it
	// is killed. It is a deliberately broken build that the fault
	// harness's own tests use to show that its checker catches lost
	// acknowledged records.
	LoseUnsyncedBrokenSync = "broken-fsync"
)

// FromTestEnv returns the filesystem the value of LoseUnsyncedEnv asks
// for: nil for an empty value, an error for an unknown one.
func FromTestEnv(value string) (*LossyFS, error) {
	switch value {
	case "":
		return nil, nil
	case LoseUnsynced:
		return NewLossy(), nil
	case LoseUnsyncedBrokenSync:
		l := NewLossy()
		l.lieSync = func(name string) bool { return strings.HasSuffix(name, ".log") }
		return l, nil
	default:
		return nil, fmt.Errorf("%s=%q: want %q or %q", LoseUnsyncedEnv, value, LoseUnsynced, LoseUnsyncedBrokenSync)
	}
}

// LossyFS is the operating system's filesystem with a page cache of its own
// in process memory: bytes written to a file stay in memory until the file
// is synced, so when the process is killed everything that was not fsynced
// is gone, as after a power cut, while a process that lives on reads what
// it wrote (and so does a file closed and opened again). Directory
// operations (create, rename, remove) reach the disk at once.
//
// Simplifications, each in the direction of keeping more than a real disk
// could: a truncation is durable at once (a power cut could bring the cut
// bytes back), and a created file's directory entry survives without a
// SyncDir (empty). The storage layer appends only, which keeps the model
// exact for what it writes.
type LossyFS struct {
	mu    sync.Mutex
	nodes map[string]*lossyNode // by absolute path; files open or holding unsynced bytes
	// lieSync, if set, names files whose Sync claims success and keeps
	// the bytes in memory only.
	lieSync func(name string) bool
}

// NewLossy returns a LossyFS over the operating system's filesystem.
func NewLossy() *LossyFS { return &LossyFS{nodes: map[string]*lossyNode{}} }

// lossyNode is one file's state: its bytes on disk and the unsynced tail
// after them. Every handle of the file shares it, as handles of one inode
// share the kernel's page cache.
type lossyNode struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	disk    int64  // bytes on disk
	pending []byte // appended after disk, not yet synced
	refs    int
	mapped  bool // still in LossyFS.nodes under path
}

// Unsynced reports how many bytes the filesystem holds in memory only.
func (l *LossyFS) Unsynced() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, nd := range l.nodes {
		nd.mu.Lock()
		n += int64(len(nd.pending))
		nd.mu.Unlock()
	}
	return n
}

func absPath(name string) (string, error) { return filepath.Abs(name) }

// open returns name's node with one more reference, opening the file with
// flag if it has no node yet. trunc empties the file (and its cache).
func (l *LossyFS) open(name string, create, trunc bool) (*lossyNode, error) {
	p, err := absPath(name)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	nd := l.nodes[p]
	if nd == nil {
		flag := os.O_RDWR
		if create {
			flag |= os.O_CREATE
		}
		if trunc {
			flag |= os.O_TRUNC
		}
		f, err := os.OpenFile(p, flag, 0o644)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		nd = &lossyNode{path: p, f: f, disk: fi.Size(), mapped: true}
		l.nodes[p] = nd
	} else if trunc {
		nd.mu.Lock()
		err := nd.f.Truncate(0)
		if err == nil {
			nd.disk, nd.pending = 0, nil
		}
		nd.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	nd.refs++
	return nd, nil
}

// Create opens name read-write, creating it or emptying it.
func (l *LossyFS) Create(name string) (File, error) {
	nd, err := l.open(name, true, true)
	if err != nil {
		return nil, err
	}
	return &lossyFile{fs: l, nd: nd, name: name}, nil
}

// OpenRW opens name read-write, creating it if needed.
func (l *LossyFS) OpenRW(name string) (File, error) {
	nd, err := l.open(name, true, false)
	if err != nil {
		return nil, err
	}
	return &lossyFile{fs: l, nd: nd, name: name}, nil
}

// Open opens name for reading; it sees the unsynced bytes of other
// handles.
func (l *LossyFS) Open(name string) (File, error) {
	nd, err := l.open(name, false, false)
	if err != nil {
		return nil, err
	}
	return &lossyFile{fs: l, nd: nd, name: name, readOnly: true}, nil
}

// unmapLocked forgets the nodes at p, or below p with below; their
// handles go on working on the unlinked file. l.mu is held.
func (l *LossyFS) unmapLocked(p string, below bool) {
	for k, nd := range l.nodes {
		if k == p || (below && strings.HasPrefix(k, p+string(filepath.Separator))) {
			delete(l.nodes, k)
			nd.mu.Lock()
			nd.mapped = false
			if nd.refs == 0 {
				nd.f.Close()
			}
			nd.mu.Unlock()
		}
	}
}

// Remove removes a file or an empty directory; unsynced bytes go with it.
func (l *LossyFS) Remove(name string) error {
	p, err := absPath(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.Remove(p); err != nil {
		return err
	}
	l.unmapLocked(p, false)
	return nil
}

// RemoveAll removes name and everything below it.
func (l *LossyFS) RemoveAll(name string) error {
	p, err := absPath(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	l.unmapLocked(p, true)
	return nil
}

// Rename replaces newname with oldname; oldname's unsynced bytes (and
// those of files below it, for a directory) move with it.
func (l *LossyFS) Rename(oldname, newname string) error {
	op, err := absPath(oldname)
	if err != nil {
		return err
	}
	np, err := absPath(newname)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.Rename(op, np); err != nil {
		return err
	}
	if op == np {
		return nil
	}
	l.unmapLocked(np, true)
	moved := map[string]*lossyNode{}
	for k, nd := range l.nodes {
		var to string
		switch {
		case k == op:
			to = np
		case strings.HasPrefix(k, op+string(filepath.Separator)):
			to = np + k[len(op):]
		default:
			continue
		}
		delete(l.nodes, k)
		nd.mu.Lock()
		nd.path = to
		nd.mu.Unlock()
		moved[to] = nd
	}
	for k, nd := range moved {
		l.nodes[k] = nd
	}
	return nil
}

// MkdirAll creates dir and any missing parents.
func (l *LossyFS) MkdirAll(dir string) error { return Default.MkdirAll(dir) }

// ReadDir returns the sorted names of dir's entries.
func (l *LossyFS) ReadDir(dir string) ([]string, error) { return Default.ReadDir(dir) }

// SyncDir fsyncs dir.
func (l *LossyFS) SyncDir(dir string) error { return Default.SyncDir(dir) }

type lossyFile struct {
	fs       *LossyFS
	nd       *lossyNode
	name     string
	readOnly bool
	closed   bool
}

var errLossyClosed = errors.New("vfs: file already closed")

func (f *lossyFile) Write(b []byte) (int, error) {
	if f.closed {
		return 0, errLossyClosed
	}
	if f.readOnly {
		return 0, fmt.Errorf("vfs: write %s: opened read-only", f.name)
	}
	f.nd.mu.Lock()
	f.nd.pending = append(f.nd.pending, b...)
	f.nd.mu.Unlock()
	return len(b), nil
}

func (f *lossyFile) ReadAt(p []byte, off int64) (int, error) {
	if f.closed {
		return 0, errLossyClosed
	}
	if off < 0 {
		return 0, fmt.Errorf("vfs: read %s at negative offset", f.name)
	}
	nd := f.nd
	nd.mu.Lock()
	defer nd.mu.Unlock()
	n := 0
	if off < nd.disk {
		want := p
		if rest := nd.disk - off; int64(len(want)) > rest {
			want = want[:rest]
		}
		m, err := nd.f.ReadAt(want, off)
		n += m
		if m < len(want) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
	if n < len(p) {
		if at := off + int64(n) - nd.disk; at < int64(len(nd.pending)) {
			n += copy(p[n:], nd.pending[at:])
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *lossyFile) Sync() error {
	if f.closed {
		return errLossyClosed
	}
	if f.fs.lieSync != nil && f.fs.lieSync(f.name) {
		return nil
	}
	f.nd.mu.Lock()
	defer f.nd.mu.Unlock()
	return f.nd.syncLocked()
}

// syncLocked writes nd's unsynced bytes and fsyncs them; the caller holds
// nd.mu.
func (nd *lossyNode) syncLocked() error {
	if len(nd.pending) > 0 {
		if _, err := nd.f.WriteAt(nd.pending, nd.disk); err != nil {
			return err
		}
	}
	if err := nd.f.Sync(); err != nil {
		return err
	}
	nd.disk += int64(len(nd.pending))
	// A new slice, so that memory held by a long unsynced run is freed.
	nd.pending = nil
	return nil
}

func (f *lossyFile) Truncate(size int64) error {
	if f.closed {
		return errLossyClosed
	}
	if size < 0 {
		return fmt.Errorf("vfs: truncate %s to %d", f.name, size)
	}
	nd := f.nd
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if size >= nd.disk {
		keep := size - nd.disk
		if keep <= int64(len(nd.pending)) {
			nd.pending = nd.pending[:keep]
		} else {
			nd.pending = append(nd.pending, make([]byte, keep-int64(len(nd.pending)))...)
		}
		return nil
	}
	if err := nd.f.Truncate(size); err != nil {
		return err
	}
	nd.disk, nd.pending = size, nil
	return nil
}

func (f *lossyFile) Size() (int64, error) {
	if f.closed {
		return 0, errLossyClosed
	}
	f.nd.mu.Lock()
	defer f.nd.mu.Unlock()
	return f.nd.disk + int64(len(f.nd.pending)), nil
}

// Close releases the handle. Unsynced bytes stay in memory (a closed file
// keeps its page cache), so a later Open sees them and a later Sync of
// any handle still writes them.
func (f *lossyFile) Close() error {
	if f.closed {
		return errLossyClosed
	}
	f.closed = true
	l, nd := f.fs, f.nd
	l.mu.Lock()
	defer l.mu.Unlock()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.refs--
	if nd.refs > 0 || (nd.mapped && len(nd.pending) > 0) {
		return nil
	}
	if nd.mapped && l.nodes[nd.path] == nd {
		delete(l.nodes, nd.path)
	}
	nd.mapped = false
	return nd.f.Close()
}

// VolumeID implements VolumeFS: the volume of the operating system's
// filesystem under the files.
func (l *LossyFS) VolumeID(dir string) (uint64, error) {
	if v, ok := Default.(VolumeFS); ok {
		return v.VolumeID(dir)
	}
	return 0, ErrNoVolume
}

// OpenVolume implements VolumeFS. Its Sync writes out and fsyncs the
// unsynced bytes of every file of the LossyFS (whatever their volume: the
// model keeps more, never less, than a real disk would), except those
// whose Sync lies.
func (l *LossyFS) OpenVolume(dir string) (Volume, error) {
	if _, err := l.VolumeID(dir); err != nil {
		return nil, err
	}
	return lossyVolume{l, dir}, nil
}

type lossyVolume struct {
	l   *LossyFS
	dir string
}

func (v lossyVolume) Sync() error {
	l := v.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, nd := range l.nodes {
		if l.lieSync != nil && l.lieSync(p) {
			continue
		}
		nd.mu.Lock()
		var err error
		if len(nd.pending) > 0 { // what is on disk was fsynced when written
			err = nd.syncLocked()
		}
		if err == nil && nd.refs == 0 {
			// Kept open only for its unsynced bytes, as Close says.
			delete(l.nodes, p)
			nd.mapped = false
			err = nd.f.Close()
		}
		nd.mu.Unlock()
		if err != nil {
			return volumeError(v.dir, err)
		}
	}
	return nil
}

func (lossyVolume) Close() error { return nil }
