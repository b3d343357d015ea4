// Package diskhealth owns the broker's judgement of its data disk: whether
// it is full, so that appends are refused until space returns, and whether
// it stalls, an fsync having taken longer than a bound. It learns both from
// the filesystem the storage layer writes through (FS wraps it, so every
// failed write and every fsync passes by) and from statfs(2) of the data
// directory, polled by Run, which also sees space come back, and read
// again by a writer whose bytes may have reached the reserve. It logs each
// change once, and while a fault lasts once per LogEvery, so a full disk
// does not flood the log.
//
// It refuses nothing by itself: storage asks CheckWrite before an append
// (one atomic load), the broker maps ErrDiskFull to KAFKA_STORAGE_ERROR,
// and the replication layer reads Degraded to hand leadership to a healthy
// replica and to stop a follower fetching what it cannot store. It touches
// no file of its own and imports only vfs of the project.
package diskhealth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrDiskFull is what CheckWrite returns while the disk is full. It
// matches syscall.ENOSPC with errors.Is, as a write's own failure does.
var ErrDiskFull error = diskFullError{}

type diskFullError struct{}

func (diskFullError) Error() string {
	return "disk full: writes are refused until space is freed on the data directory's volume"
}

func (diskFullError) Is(target error) bool { return target == syscall.ENOSPC }

// IsSpaceError reports whether err is a write failing for want of space
// (ENOSPC, or EDQUOT: a quota is as full as a disk).
func IsSpaceError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Config configures a Monitor.
type Config struct {
	// Dir is the data directory; statfs reads its volume.
	Dir string
	// ReserveBytes: while less than this is free, appends are refused, so
	// that the small files a log needs to recover and to truncate can
	// still be written. Negative: 5% of the volume, at most 1 GiB.
	ReserveBytes int64
	// StallAfter: an fsync running longer than this makes the disk
	// stalled. 0: never.
	StallAfter time.Duration
	// Interval is how often Run polls statfs and looks for stalled
	// fsyncs. Default 1 s.
	Interval time.Duration
	// LogEvery bounds how often a lasting fault is logged. Default 30 s.
	LogEvery time.Duration
	Logger   *slog.Logger
	// Statfs reads the volume's free (available to this process) and
	// total bytes; nil reads the real one (tests replace it).
	Statfs func(dir string) (free, total int64, err error)
	// Faults, if set, are injected below the monitor (FaultsFileEnv):
	// into the filesystem FS wraps and into Statfs.
	Faults *Faults
}

// Monitor is the disk's health. Safe for concurrent use; Run's goroutine
// belongs to whoever calls it.
type Monitor struct {
	cfg Config
	log *slog.Logger

	full    atomic.Bool
	stalled atomic.Bool
	free    atomic.Int64
	total   atomic.Int64
	reserve atomic.Int64
	refused atomic.Int64

	// written counts bytes written or preallocated since the last statfs;
	// once it passes budget, the writer reads statfs itself (spent). A
	// poll a second apart lets a fast writer run through the whole reserve
	// and leave nothing for the Raft state and the files recovery needs;
	// a budget of a quarter of the room above the reserve makes the
	// checks denser as the disk fills, and each is a real reading, so a
	// write into space reserved earlier never makes the disk look full.
	written atomic.Int64
	budget  atomic.Int64
	reading atomic.Bool

	mu                      sync.Mutex
	fullSince               time.Time
	lastFullLog             time.Time
	lastStatfsLog           time.Time
	lastBeginLog            time.Time
	lastResumeLog           time.Time
	fullByWrite             bool                 // the full state began with a failed write
	syncs                   map[uint64]time.Time // in-flight fsyncs by id: when each began
	nextSync                uint64
	slowAt                  time.Time     // when an fsync last ran over the bound
	slowest                 time.Duration // longest fsync since the stall began
	stallSince              time.Time
	fullEvents, stallEvents int64
}

// New returns a Monitor that has not polled yet: the disk counts as
// healthy until a write fails or Run's first poll says otherwise.
func New(cfg Config) *Monitor {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Statfs == nil {
		cfg.Statfs = statfs
	}
	if cfg.Faults != nil {
		cfg.Statfs = cfg.Faults.Statfs(cfg.Statfs)
	}
	m := &Monitor{cfg: cfg, log: cfg.Logger, syncs: map[uint64]time.Time{}}
	m.reserve.Store(max(cfg.ReserveBytes, 0))
	m.budget.Store(math.MaxInt64) // until statfs has been read
	return m
}

// CheckWrite returns ErrDiskFull while the disk is full, nil otherwise.
func (m *Monitor) CheckWrite() error {
	if m.full.Load() {
		m.refused.Add(1)
		return ErrDiskFull
	}
	return nil
}

// Observe looks at the result of a write: a space error makes the disk
// full at once (the next poll sees when space returns).
func (m *Monitor) Observe(err error) {
	if err == nil || !IsSpaceError(err) || m.full.Load() {
		return
	}
	if free, total, serr := m.cfg.Statfs(m.cfg.Dir); serr == nil {
		m.free.Store(free)
		m.total.Store(total)
	}
	m.setFull(fmt.Sprintf("a write failed: %v", err), true)
}

// minBudget bounds how often writes near a full disk read statfs: at most
// once per this many bytes.
const minBudget = 64 << 10

// spent counts n bytes written or reserved on the volume and reads statfs
// when they may have brought free space down to the reserve.
func (m *Monitor) spent(n int64) {
	if n <= 0 || m.written.Add(n) < m.budget.Load() {
		return
	}
	if !m.reading.CompareAndSwap(false, true) {
		return // another writer is reading it
	}
	defer m.reading.Store(false)
	m.pollSpace()
}

// Full reports whether appends are refused for want of space.
func (m *Monitor) Full() bool { return m.full.Load() }

// Degraded names what keeps this disk from taking writes well ("" when
// nothing does): a leader with a degraded disk hands leadership to a
// healthy replica, and a follower stops fetching while its disk is full.
func (m *Monitor) Degraded() string {
	switch {
	case m.full.Load():
		return "disk full"
	case m.stalled.Load():
		return "fsync stalled"
	}
	return ""
}

// Status is the disk's health for /stats.
type Status struct {
	Full          bool  `json:"full"`
	Stalled       bool  `json:"stalled"`
	FreeBytes     int64 `json:"free_bytes"`
	TotalBytes    int64 `json:"total_bytes"`
	ReserveBytes  int64 `json:"reserve_bytes"`
	RefusedWrites int64 `json:"refused_writes"`
	// SlowestSyncMs is the longest fsync of the current (or last) stall.
	SlowestSyncMs int64 `json:"slowest_sync_ms"`
	FullEvents    int64 `json:"full_events"`
	StallEvents   int64 `json:"stall_events"`
}

// Status reports the disk's health.
func (m *Monitor) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Status{
		Full: m.full.Load(), Stalled: m.stalled.Load(),
		FreeBytes: m.free.Load(), TotalBytes: m.total.Load(), ReserveBytes: m.reserve.Load(),
		RefusedWrites: m.refused.Load(), SlowestSyncMs: m.slowest.Milliseconds(),
		FullEvents: m.fullEvents, StallEvents: m.stallEvents,
	}
}

// Run polls statfs and watches in-flight fsyncs every Interval until ctx
// ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	m.Poll()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Poll()
		}
	}
}

// Poll reads statfs once and judges the fsyncs in flight (Run calls it
// every Interval; tests call it directly).
func (m *Monitor) Poll() {
	m.pollSpace()
	m.pollStall(time.Now())
}

// due reports whether a line last logged at *last may be logged again
// (LogEvery has passed), and if so marks it logged now. The caller holds
// mu.
func (m *Monitor) due(last *time.Time) bool {
	if time.Since(*last) < m.cfg.LogEvery {
		return false
	}
	*last = time.Now()
	return true
}

// resumeAt is how much must be free before appends resume: more than the
// reserve, so that a disk on the edge does not flip every poll.
func (m *Monitor) resumeAt() int64 {
	r := m.reserve.Load()
	return r + max(r, 1<<20)
}

func (m *Monitor) pollSpace() {
	free, total, err := m.cfg.Statfs(m.cfg.Dir)
	if err != nil {
		m.written.Store(0) // writers ask again a budget later, not every write
		m.mu.Lock()
		due := m.due(&m.lastStatfsLog)
		m.mu.Unlock()
		if due && !errors.Is(err, errUnsupported) {
			m.log.Warn("disk health: cannot read the data directory's free space; a full disk is noticed only when a write fails", "dir", m.cfg.Dir, "err", err)
		}
		return
	}
	m.free.Store(free)
	m.total.Store(total)
	if m.cfg.ReserveBytes < 0 {
		m.reserve.Store(min(total/20, 1<<30))
	}
	m.written.Store(0)
	m.budget.Store(max((free-m.reserve.Load())/4, minBudget))
	switch {
	case !m.full.Load() && free < m.reserve.Load():
		m.setFull(fmt.Sprintf("free space %d bytes is below the reserve of %d", free, m.reserve.Load()), false)
	case m.full.Load() && free >= m.resumeAt() && m.mayResume():
		m.mu.Lock()
		since := m.fullSince
		m.full.Store(false)
		due := m.due(&m.lastResumeLog)
		m.mu.Unlock()
		if due {
			m.log.Info("disk health: space is free again; appends resume",
				"dir", m.cfg.Dir, "free_bytes", free, "total_bytes", total,
				"full_for", time.Since(since).Round(time.Millisecond).String(), "refused_writes", m.refused.Load())
		}
	case m.full.Load():
		m.mu.Lock()
		due := m.due(&m.lastFullLog)
		since := m.fullSince
		m.mu.Unlock()
		if due {
			m.log.Warn("disk health: disk still full; appends are refused with KAFKA_STORAGE_ERROR, reads are served",
				"dir", m.cfg.Dir, "free_bytes", free, "resume_at_free_bytes", m.resumeAt(),
				"full_for", time.Since(since).Round(time.Second).String(), "refused_writes", m.refused.Load(),
				"hint", "free space on the volume (retention, DeleteRecords, deleting topics) or grow it; appends resume by themselves")
		}
	}
}

// writeFullHold is how long a disk that a failed write made full stays
// so although statfs shows room: a quota (EDQUOT) or exhausted inodes do
// not show in free bytes, and without the hold such a disk would flip
// between full and not every poll.
const writeFullHold = 10 * time.Second

// mayResume reports whether statfs may end the current full state.
func (m *Monitor) mayResume() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.fullByWrite || time.Since(m.fullSince) >= writeFullHold
}

// setFull makes the disk full for cause; byWrite says a failed write found
// it (see writeFullHold).
func (m *Monitor) setFull(cause string, byWrite bool) {
	m.mu.Lock()
	if m.full.Load() {
		m.mu.Unlock()
		return
	}
	m.full.Store(true)
	m.fullSince, m.lastFullLog, m.fullByWrite = time.Now(), time.Now(), byWrite
	m.fullEvents++
	// A disk that keeps filling up again is said to be full once per
	// LogEvery; full_events counts every time.
	due := m.due(&m.lastBeginLog)
	m.mu.Unlock()
	if !due {
		return
	}
	m.log.Error("disk health: disk full; appends are refused with KAFKA_STORAGE_ERROR until space is freed, reads are served",
		"dir", m.cfg.Dir, "cause", cause, "free_bytes", m.free.Load(), "reserve_bytes", m.reserve.Load(),
		"hint", "free space on the volume (retention, DeleteRecords, deleting topics) or grow it; appends resume by themselves")
}

// syncBegin records an fsync starting and returns its id for syncEnd.
func (m *Monitor) syncBegin() uint64 {
	m.mu.Lock()
	m.nextSync++
	id := m.nextSync
	m.syncs[id] = time.Now()
	m.mu.Unlock()
	return id
}

// syncEnd records the end of fsync id.
func (m *Monitor) syncEnd(id uint64) {
	m.mu.Lock()
	began := m.syncs[id]
	delete(m.syncs, id)
	m.mu.Unlock()
	if d := time.Since(began); m.cfg.StallAfter > 0 && d > m.cfg.StallAfter {
		m.slow(time.Now(), d)
	}
}

func (m *Monitor) slow(now time.Time, d time.Duration) {
	m.mu.Lock()
	m.slowAt = now
	m.slowest = max(m.slowest, d)
	began := !m.stalled.Load()
	if began {
		m.stalled.Store(true)
		m.stallSince = now
		m.slowest = d
		m.stallEvents++
	}
	m.mu.Unlock()
	if began {
		m.log.Error("disk health: fsync stalled; this replica hands leadership to a healthy one if it can",
			"dir", m.cfg.Dir, "fsync_running_ms", d.Milliseconds(), "bound_ms", m.cfg.StallAfter.Milliseconds())
	}
}

// stallClears is how long fsyncs must keep under the bound before a stall
// is over: a disk that stalls now and then stays degraded meanwhile.
const stallClears = 10 * time.Second

func (m *Monitor) pollStall(now time.Time) {
	if m.cfg.StallAfter <= 0 {
		return
	}
	m.mu.Lock()
	var oldest time.Duration
	for _, began := range m.syncs {
		oldest = max(oldest, now.Sub(began))
	}
	m.mu.Unlock()
	if oldest > m.cfg.StallAfter {
		m.slow(now, oldest)
		return
	}
	if !m.stalled.Load() {
		return
	}
	m.mu.Lock()
	over := now.Sub(m.slowAt) >= stallClears
	if over {
		m.stalled.Store(false)
	}
	since, slowest := m.stallSince, m.slowest
	m.mu.Unlock()
	if over {
		m.log.Info("disk health: fsyncs are fast again", "dir", m.cfg.Dir,
			"stalled_for", now.Sub(since).Round(time.Millisecond).String(), "slowest_fsync_ms", slowest.Milliseconds())
	}
}
