package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/status"
)

// newDiskHealth makes the monitor of the data directory's disk, wraps the
// broker's filesystem so that it sees every write and fsync, and exports
// its state.
func (b *Broker) newDiskHealth() {
	reserve := b.cfg.MinFreeDiskBytes
	switch reserve {
	case 0:
		reserve = -1 // diskhealth's automatic reserve
	case -1:
		reserve = 0
	}
	var stall time.Duration
	if b.cfg.FsyncStallMs > 0 {
		stall = time.Duration(b.cfg.FsyncStallMs) * time.Millisecond
	}
	b.disk = diskhealth.New(diskhealth.Config{Dir: b.cfg.DataDir, ReserveBytes: reserve, StallAfter: stall, Logger: b.log, Faults: b.diskFaults})
	b.fs = b.disk.FS(b.fs)
	d := b.disk
	gauge := func(name, help string, f func(diskhealth.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(d.Status()) })
	}
	flag := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	b.stats.reg.MustRegister(
		gauge("moonmq_disk_free_bytes", "Bytes free to the broker on the data directory's volume, as of the last poll.",
			func(s diskhealth.Status) float64 { return float64(s.FreeBytes) }),
		gauge("moonmq_disk_total_bytes", "Size of the data directory's volume.",
			func(s diskhealth.Status) float64 { return float64(s.TotalBytes) }),
		gauge("moonmq_disk_reserve_bytes", "Free bytes below which appends are refused (Server.MinFreeDiskBytes).",
			func(s diskhealth.Status) float64 { return float64(s.ReserveBytes) }),
		gauge("moonmq_disk_full", "1 while appends are refused for want of disk space.",
			func(s diskhealth.Status) float64 { return flag(s.Full) }),
		gauge("moonmq_disk_stalled", "1 while the disk counts as stalled (an fsync ran longer than Server.FsyncStallMs).",
			func(s diskhealth.Status) float64 { return flag(s.Stalled) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moonmq_disk_refused_appends_total", Help: "Appends refused because the disk was full."},
			func() float64 { return float64(d.Status().RefusedWrites) }),
	)
}

func (b *Broker) diskStats() status.Disk {
	s := b.disk.Status()
	return status.Disk{Full: s.Full, Stalled: s.Stalled, FreeBytes: s.FreeBytes, TotalBytes: s.TotalBytes,
		ReserveBytes: s.ReserveBytes, RefusedAppends: s.RefusedWrites, SlowestFsyncMs: s.SlowestSyncMs,
		FullEvents: s.FullEvents, StallEvents: s.StallEvents}
}

// storageFailure stops the broker after an error it must not outlive (a
// failed fsync: retrying one can report success for data the kernel
// already dropped), naming the file and the cause.
func (b *Broker) storageFailure(err error) {
	file := ""
	var pe *fs.PathError
	if errors.As(err, &pe) {
		file = pe.Path
	}
	b.log.Error("stopping the broker: unrecoverable storage error; the data on disk is intact up to the last successful fsync and is recovered at the next start",
		"file", file, "err", err, "exit_code", exitStorageFailure,
		"hint", "check the disk (dmesg, SMART); a replica's peers take over meanwhile")
	fmt.Fprintf(os.Stderr, "moonmq: unrecoverable storage error on %s: %v\n", file, err)
	os.Exit(exitStorageFailure)
}

// exitStorageFailure is the exit code after an unrecoverable storage
// error: EX_IOERR of sysexits(3).
const exitStorageFailure = 74

// fetchPause is why this replica's follower must not fetch: on a full disk
// every append would fail, so it stops and the leader takes it out of the
// ISR after IsrLagSeconds, rather than producers waiting on it.
func (r *replica) fetchPause() string {
	if r.b.disk.Full() {
		return "disk full"
	}
	return ""
}

// partitionLogLimiter lets a repeated per-partition failure be logged once
// per interval.
type partitionLogLimiter struct {
	mu   sync.Mutex
	last map[partitionKey]time.Time
}

type partitionKey struct {
	topic     string
	partition int32
}

// readFailLogEvery bounds how often a partition's failing reads are logged.
const readFailLogEvery = 30 * time.Second

func (l *partitionLogLimiter) due(topic string, partition int32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, now := partitionKey{topic, partition}, time.Now()
	if t, ok := l.last[k]; ok && now.Sub(t) < readFailLogEvery {
		return false
	}
	if l.last == nil {
		l.last = map[partitionKey]time.Time{}
	}
	l.last[k] = now
	return true
}
