package vfs

import (
	"errors"
	"fmt"
)

// A Volume makes every write to the files of one filesystem durable in a
// single call (syncfs(2) on Linux). With thousands of files dirty, one
// fsync per file pays for a journal commit and a device flush each; a
// volume sync writes them all back and pays for one (docs/BENCHMARKS.md,
// "10,000 partitions").
//
// A volume sync is relied on for file contents only: directory entries are
// made durable with SyncDir, as before.
type Volume interface {
	// Sync makes durable every write made before it began to any file of
	// the volume, through any descriptor. It fails if writing back any
	// file of the volume failed since the Volume was opened, whichever
	// process wrote it: it cannot say which file's data was lost, so a
	// caller must treat every file it relied on the sync for as failed.
	Sync() error
	// Close releases the volume.
	Close() error
}

// VolumeFS is implemented by filesystems that can sync a volume whole.
type VolumeFS interface {
	// VolumeID identifies the volume holding dir: one Sync of a Volume
	// opened on any directory with the same ID covers dir's files.
	VolumeID(dir string) (uint64, error)
	// OpenVolume opens the volume holding dir.
	OpenVolume(dir string) (Volume, error)
}

// ErrNoVolume is returned by filesystems (or wrappers of them) that cannot
// sync a volume whole; their files are synced one by one.
var ErrNoVolume = errors.New("vfs: the filesystem cannot sync a volume whole")

// VolumeID is fs's VolumeID of dir, or ErrNoVolume.
func VolumeID(fs FS, dir string) (uint64, error) {
	if v, ok := fs.(VolumeFS); ok {
		return v.VolumeID(dir)
	}
	return 0, ErrNoVolume
}

// OpenVolume opens fs's volume holding dir and returns it with its ID, or
// fails with ErrNoVolume.
func OpenVolume(fs FS, dir string) (Volume, uint64, error) {
	v, ok := fs.(VolumeFS)
	if !ok {
		return nil, 0, ErrNoVolume
	}
	id, err := v.VolumeID(dir)
	if err != nil {
		return nil, 0, err
	}
	vol, err := v.OpenVolume(dir)
	if err != nil {
		return nil, 0, err
	}
	return vol, id, nil
}

// A volume sync leaves a file's own descriptor unaware that its writes are
// durable; files that track unsynced writes (PoolFile, which keeps a dirty
// file's descriptor open until a sync) implement syncTracker so that the
// sync can tell them.
type syncTracker interface {
	// syncMark is taken before a volume sync begins.
	syncMark() uint64
	// syncedTo is told, after the sync succeeded, the mark taken before.
	syncedTo(mark uint64)
}

// SyncMark is taken from f before a volume sync that f's durability will
// rest on, and given to SyncedTo once the sync has succeeded.
func SyncMark(f File) uint64 {
	if t, ok := f.(syncTracker); ok {
		return t.syncMark()
	}
	return 0
}

// SyncedTo tells f that a volume sync begun at mark succeeded.
func SyncedTo(f File, mark uint64) {
	if t, ok := f.(syncTracker); ok {
		t.syncedTo(mark)
	}
}

// volumeError names the volume in a failed sync.
func volumeError(dir string, err error) error {
	return fmt.Errorf("sync of the volume holding %s: %w", dir, err)
}
