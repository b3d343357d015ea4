//go:build linux

package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

func (osFS) VolumeID(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, err
	}
	return st.Dev, nil
}

// OpenVolume keeps a descriptor of dir for the volume's life: syncfs(2)
// reports the writeback errors of the filesystem since the descriptor it
// is called on was opened, so one descriptor opened before the writes
// hears of every failure among them.
func (osFS) OpenVolume(dir string) (Volume, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return osVolume{d}, nil
}

type osVolume struct{ d *os.File }

func (v osVolume) Sync() error {
	if err := unix.Syncfs(int(v.d.Fd())); err != nil {
		return volumeError(v.d.Name(), err)
	}
	return nil
}

func (v osVolume) Close() error { return v.d.Close() }
