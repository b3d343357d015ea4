package diskhealth

import "golang.org/x/sys/unix"

func statfs(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	// Bavail, not Bfree: the blocks a process without privileges may
	// still use, which is what a write can count on.
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}
