package chaos

// The disk faults: a replica's disk fills up, stalls, or fails an fsync,
// injected below its broker's disk monitor through a file that every
// start of it reads (diskhealth.FaultsFileEnv).

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// diskFile is replica id's disk faults file.
func (in *injector) diskFile(id int) string {
	return filepath.Join(in.diskDir, fmt.Sprintf("replica-%d.disk-faults", id))
}

// Lines the broker logs (internal/diskhealth, internal/broker).
const (
	diskFullLine     = "disk health: disk full;"
	diskStallLine    = "disk health: fsync stalled"
	storageFatalLine = "unrecoverable storage error"
)

// diskFault runs a DiskFull, DiskStall or FsyncEIO step on r and says
// what the broker made of it.
func (in *injector) diskFault(s Step, r *testcluster.Replica, rng *rand.Rand) string {
	if in.diskDir == "" {
		return "skipped: the replicas were started without a disk faults file"
	}
	path := in.diskFile(r.ID)
	write := func(lines ...string) {
		if err := diskhealth.WriteFaults(path, lines...); err != nil {
			in.problem("writing the disk faults of replica %d: %v", r.ID, err)
		}
	}
	log := r.Log()
	switch s.Kind {
	case DiskFull:
		write("full")
		sleep(s.Hold)
		write()
		seen := strings.Count(r.Log(), diskFullLine) - strings.Count(log, diskFullLine)
		return fmt.Sprintf("writes fail with ENOSPC for %v; the broker logged the full disk %d time(s)", s.Hold.Round(time.Millisecond), seen)
	case DiskStall:
		d := time.Duration(1+rng.IntN(4)) * time.Second
		write(fmt.Sprintf("stall %v", d))
		sleep(s.Hold)
		write()
		seen := strings.Count(r.Log(), diskStallLine) > strings.Count(log, diskStallLine)
		return fmt.Sprintf("every fsync takes %v more for %v; stall logged: %v", d, s.Hold.Round(time.Millisecond), seen)
	case FsyncEIO:
		write("fsync-eio")
		// A broker fsyncs within moments under the workload; one that
		// does not (nothing to sync) is stopped by hand after the hold.
		exited := testcluster.Poll(s.Hold+5*time.Second, func() (bool, string) { return !r.Running(), "" }) == nil
		how := "exited by itself"
		if !exited {
			how = "did not fsync, killed"
			r.Kill()
		}
		stopped := strings.Count(r.Log(), storageFatalLine) > strings.Count(log, storageFatalLine)
		if exited && !stopped {
			in.problem("replica %d exited after a failed fsync without saying why (%q)", r.ID, storageFatalLine)
		}
		write()
		in.start(r)
		return fmt.Sprintf("fsync fails with EIO: %s (storage error logged: %v), started again", how, stopped)
	}
	return "unknown disk fault"
}

// problem records a failure of the harness itself.
func (in *injector) problem(format string, args ...any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.problems = append(in.problems, fmt.Sprintf("at %.1fs ", in.since().Seconds())+fmt.Sprintf(format, args...))
}
