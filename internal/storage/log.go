// Package storage owns the on-disk partition log: segment files of record
// batches stored exactly as produced (only baseOffset and
// partitionLeaderEpoch are set by the log; compaction rewrites the batches
// that lose records), their sparse offset and time indexes, the log start
// offset, the recovery point and the leader epoch history, together with
// crash recovery, truncation, retention and compaction.
//
// All file access goes through vfs.FS. An active segment holds one
// descriptor (its log file: its indexes are in memory until it rolls); with
// Options.Pool, rolled segments' files hold one only while a bounded pool
// shared by every log lets them. The package knows nothing about the
// network protocol, topics or replication policy; it must not import the
// broker, protocol or config packages.
package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// Errors returned by Log.
var (
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	ErrClosed           = errors.New("storage: log closed")
	ErrInvalidBatch     = errors.New("storage: invalid batch")
	ErrStaleEpoch       = errors.New("storage: leader epoch older than the latest in the log")
	ErrOffsetMismatch   = errors.New("storage: replica batch does not start at the log end offset")
	// ErrCorrupt is wrapped by the errors of reads (Read, OffsetForTimestamp,
	// MaxTimestamp, Truncate, Compact) that meet a batch that is torn or
	// corrupt: a header that does not parse, a length running past the
	// file, a failed CRC, offsets going backwards, or a file shorter than
	// the log knew it. Recovery removes such batches from the active
	// segment at Open, and from every segment with Options.VerifyAll; an
	// older segment damaged later, or without VerifyAll, makes reads of the
	// damaged range fail with it.
	ErrCorrupt = errors.New("storage: segment corrupt")
)

var errNotExist = fs.ErrNotExist

const (
	epochFileName    = "leader-epoch-checkpoint.json"
	startFileName    = "log-start-offset.json"
	recoveryFileName = "recovery-point.json"

	defaultSegmentBytes = 1 << 30
	defaultIndexBytes   = 4096
	// maxDecompressed bounds the memory one timestamp lookup may use to
	// decode a compressed batch.
	maxDecompressed = 256 << 20
)

// Options configure a Log.
type Options struct {
	FS                 vfs.FS // default vfs.Default
	SegmentBytes       int64  // roll when the active segment would exceed it (default 1 GiB, at most 2 GiB-1)
	IndexIntervalBytes int    // bytes between sparse index entries (default 4096)
	// RetentionMs and RetentionBytes: -1 = unlimited. Their zero values
	// mean "retain nothing beyond the active segment", so set them.
	RetentionMs    int64
	RetentionBytes int64
	Logger         *slog.Logger
	// VerifyAll makes Open verify every rolled segment as it always
	// verifies the active one (framing, CRC, the epoch rule, offsets only
	// increasing, nothing past the next segment's base), reading all the
	// data. At the first bad batch the log is truncated there: that
	// segment is cut and becomes the active one, and every later segment
	// is removed (see RecoveryReport). Without it only the active segment
	// is verified, and damage in an older segment shows later as reads
	// failing with ErrCorrupt. The broker sets it on every start: a clean
	// stop says nothing about what happened to the files afterwards.
	VerifyAll bool
	// Pool, if set, holds the log files of rolled segments, which are read
	// only now and then: their descriptors are opened when a read needs
	// them and closed when the pool needs room for others, so that
	// thousands of logs do not hold a descriptor per segment. The active
	// segment's file stays open (pinned) while it is active. The pool must
	// open files of FS (FS defaults to the pool's). One pool is meant to
	// be shared by every log of a process. nil keeps every segment's file
	// open.
	Pool *vfs.Pool
	// Space, if set, is asked before every append and may refuse it: a
	// disk without room (diskhealth.Monitor), whose error the append
	// returns, with nothing written.
	Space interface{ CheckWrite() error }
}

// Log is one partition's log. Its methods are safe for concurrent use: any
// number of readers run alongside one appender; Sync does not block Append.
type Log struct {
	dir    string
	fs     vfs.FS
	pool   *vfs.Pool // nil: every segment's file stays open
	space  interface{ CheckWrite() error }
	logger *slog.Logger
	index  int
	// volume identifies the filesystem holding dir (vfs.VolumeID), when
	// onVolume: a Volume with that ID may sync the log (Volume.Sync).
	volume   uint64
	onVolume bool

	segmentBytes   atomic.Int64
	retentionMs    atomic.Int64
	retentionBytes atomic.Int64

	// Lock order: amu, then smu, then mu. amu serializes everything that
	// writes (appends, truncation, retention); smu serializes Sync with
	// whatever closes files; mu guards the published state readers see.
	amu sync.Mutex
	smu sync.Mutex
	mu  sync.RWMutex

	segs   []*segment
	epochs []EpochEntry
	// epochsOnDisk: the history file holds exactly epochs, whole and
	// durable (or durable with the volume sync under way), so a new epoch
	// may be appended to it (epochs.go). When it is false (no file yet, a
	// failed write, a damaged end read back) the file may be stale or end
	// in a line no entry stands for, and appendable writes it whole before
	// a record is appended: a record must never reach the disk beside a
	// history that would make recovery cut it. Under amu.
	epochsOnDisk bool
	// epochObs, if set, sees every epoch history written (SetEpochObserver).
	epochObs atomic.Pointer[func([]EpochEntry)]
	closed   bool
	failed   error // sticky: after a failed fsync the page cache state is unknown

	start   atomic.Int64
	end     atomic.Int64
	durable atomic.Int64
	// syncedSeg and syncedPos (guarded by smu): the last Sync made
	// syncedSeg's log file durable up to byte syncedPos.
	syncedSeg *segment
	syncedPos int64

	// cmu serializes Compact calls and guards compactUnsynced, set when a
	// pass failed after renaming files but maybe before fsyncing the
	// directory. truncations counts truncations (under amu), so that
	// Compact can tell that records its key map relies on may be gone.
	cmu             sync.Mutex
	compactUnsynced bool
	truncations     atomic.Int64

	// rpmu serializes writing recovery-point.json with the truncations
	// that must lower it before they cut (lock order: amu, rpmu, smu,
	// mu), so that a checkpoint cannot write a point taken before a cut
	// after it. It guards the fields below.
	rpmu sync.Mutex
	// rpKnown, rpOffset, rpGaps: what recovery-point.json holds. When it
	// is missing or unreadable, rpKnown is false and rpGaps is
	// math.MaxInt64 (on disk nothing says the active segment has no gaps).
	rpKnown  bool
	rpOffset int64
	rpGaps   int64
	// gapsBelow: batches of the active segment with a base offset below it
	// may follow an offset gap (see recoveryFile.GapsBelow); exact after
	// Open and truncations, a safe upper bound after AllowGaps, and the
	// file may hold a larger, still safe, value.
	gapsBelow int64

	recovery RecoveryReport // fixed by Open
}

// Reconfigure changes the segment size and retention limits at runtime. A
// segmentBytes <= 0 selects the default.
func (l *Log) Reconfigure(segmentBytes, retentionMs, retentionBytes int64) {
	if segmentBytes <= 0 {
		segmentBytes = defaultSegmentBytes
	}
	// Index positions are uint32 and must stay clear of overflow.
	segmentBytes = min(segmentBytes, math.MaxInt32)
	l.segmentBytes.Store(segmentBytes)
	l.retentionMs.Store(retentionMs)
	l.retentionBytes.Store(retentionBytes)
}

// createSegment creates an empty active segment at base. Its indexes are
// in memory only until it rolls.
func (l *Log) createSegment(base int64) (*segment, error) {
	s := &segment{base: base, next: base, maxTs: -1}
	var err error
	name := segName(l.dir, base, logSuffix)
	if s.log, err = l.fs.Create(name); err != nil {
		return nil, err
	}
	s.log = l.adopt(name, s.log)
	if err = l.fs.SyncDir(l.dir); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

// openLogFile opens the log file of the segment at base, found at Open. A
// rolled segment's file goes into the pool (when there is one), opened
// there as it is first used; the active one's is opened now, pinned.
func (l *Log) openLogFile(base int64, active bool) (vfs.File, error) {
	name := segName(l.dir, base, logSuffix)
	if l.pool != nil && !active {
		return l.pool.Open(name), nil
	}
	f, err := l.fs.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return l.adopt(name, f), nil
}

// adopt hands the open file of an active segment to the pool, pinned: the
// segment keeps one file handle for its whole life, while whoever read
// it before it rolled (Sync, which runs beside Append; Compact's snapshot)
// may still use it after, when the pool may close and reopen its
// descriptor.
func (l *Log) adopt(name string, f vfs.File) vfs.File {
	if l.pool == nil {
		return f
	}
	return l.pool.Adopt(name, f)
}

// pinFile keeps f's descriptor open, outside the pool's limit, while its
// segment is the active one (or its name is about to be taken over); a
// file not from a pool is always open.
func pinFile(f vfs.File) error {
	if p, ok := f.(*vfs.PoolFile); ok {
		return p.Pin()
	}
	return nil
}

// unpinFile lets the pool close f's descriptor when it needs room.
func unpinFile(f vfs.File) {
	if p, ok := f.(*vfs.PoolFile); ok {
		p.Unpin()
	}
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// Append assigns the next offset to batch, rewriting its baseOffset and
// partitionLeaderEpoch in place, and appends it. The batch must already be
// validated (recordbatch.Split). The data is not synced; see Sync. An epoch
// older than the latest in the history (-1 too, once the history has an
// epoch) fails with ErrStaleEpoch: epochs never decrease along the log.
func (l *Log) Append(batch []byte, epoch int32) (int64, error) {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil || h.Size() != len(batch) || h.LastOffsetDelta < 0 {
		return 0, fmt.Errorf("%w: %v", ErrInvalidBatch, err)
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	base := l.end.Load()
	recordbatch.SetBaseOffset(batch, base)
	recordbatch.SetPartitionLeaderEpoch(batch, epoch)
	h.BaseOffset, h.PartitionLeaderEpoch = base, epoch
	if err := l.appendLocked(batch, h); err != nil {
		return 0, err
	}
	return base, nil
}

// AppendReplica appends a batch fetched from the leader, keeping its
// baseOffset and partitionLeaderEpoch. The base offset must equal the log
// end offset, or lie above it and below what AllowGaps allowed (the
// leader's compaction removed whole batches there). A batch from a newer
// epoch extends the epoch history.
func (l *Log) AppendReplica(batch []byte) error {
	h, err := recordbatch.Check(batch)
	if err != nil || h.LastOffsetDelta < 0 {
		return fmt.Errorf("%w: %v", ErrInvalidBatch, err)
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	switch end := l.end.Load(); {
	case h.BaseOffset < end:
		return fmt.Errorf("%w: base offset %d, log end %d", ErrOffsetMismatch, h.BaseOffset, end)
	case h.BaseOffset > end && h.BaseOffset >= l.gapsBelow:
		return fmt.Errorf("%w: base offset %d leaves a gap after the log end %d that AllowGaps did not allow", ErrOffsetMismatch, h.BaseOffset, end)
	}
	return l.appendLocked(batch, h)
}

// AllowGaps lets AppendReplica leave an offset gap before batches whose
// base offset is below below: a follower copying a leader whose compaction
// removed whole batches. Recovery then accepts those gaps in the active
// segment, so recovery-point.json says so (durably) before any such batch
// is written. Calling it once per fetch response with the leader's log end
// keeps that to one small write per response, not one per gap.
func (l *Log) AllowGaps(below int64) error {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.rpmu.Lock()
	defer l.rpmu.Unlock()
	if below <= l.gapsBelow {
		return nil
	}
	if err := l.persistBeforeCut(l.end.Load(), false, below); err != nil {
		return err
	}
	l.gapsBelow = below
	return nil
}

// appendable reports why the log cannot take an append now (closed,
// failed, or its disk too full), if it cannot; the caller holds amu.
func (l *Log) appendable() error {
	if err := l.writable(); err != nil {
		return err
	}
	if l.space != nil {
		if err := l.space.CheckWrite(); err != nil {
			return err
		}
	}
	if !l.epochsOnDisk {
		if err := l.writeEpochs(l.EpochHistory()); err != nil {
			return fmt.Errorf("storage: cannot write the leader epoch history: %w", err)
		}
	}
	return nil
}

// startEpochLocked extends the epoch history with epoch starting at
// start when epoch is newer than its latest; the caller holds amu and has
// checked appendable, which leaves the history's file whole. It is
// persisted before a batch of the epoch is written, so the history is
// durable before the batch can be acknowledged as durable (and recovery
// can check the batch's epoch against it).
func (l *Log) startEpochLocked(epoch int32, start int64) error {
	latest := l.LatestEpoch()
	if latest >= 0 && epoch < latest {
		// Also a batch without an epoch (-1) once the history has one:
		// epochs never decrease along the log, and recovery relies on it.
		return fmt.Errorf("%w: %d < %d", ErrStaleEpoch, epoch, latest)
	}
	if epoch <= latest {
		return nil
	}
	e := EpochEntry{Epoch: epoch, StartOffset: start}
	entries := append(slices.Clip(l.epochs), e)
	if err := l.appendEpoch(e, true); err != nil {
		return err
	}
	l.observeEpochs(entries)
	l.mu.Lock()
	l.epochs = entries
	l.mu.Unlock()
	return nil
}

// StartEpoch persists that leader epoch epoch starts at offset at, ahead
// of the append of the epoch's first batch there, which then has nothing
// to persist. Each new epoch costs the history a line appended and an
// fsync: a request or fetch answer that starts an epoch on many
// partitions (the first after a failover, or on a new topic) calls this
// for them at once rather than leaving each append to do it in turn. It
// does nothing unless at is the log's end and epoch is newer than the
// history's latest; the append checks and persists as ever.
func (l *Log) StartEpoch(epoch int32, at int64) error {
	l.amu.Lock()
	defer l.amu.Unlock()
	if ok, err := l.epochStartDueLocked(epoch, at); !ok {
		return err
	}
	return l.startEpochLocked(epoch, at)
}

// epochStartDueLocked reports whether StartEpoch(epoch, at) has an epoch
// start to persist; the caller holds amu.
func (l *Log) epochStartDueLocked(epoch int32, at int64) (bool, error) {
	if at != l.end.Load() || epoch <= l.LatestEpoch() {
		return false, nil
	}
	if err := l.appendable(); err != nil {
		return false, err
	}
	return true, nil
}

func (l *Log) appendLocked(batch []byte, h recordbatch.Header) error {
	if err := l.appendable(); err != nil {
		return err
	}
	if err := l.startEpochLocked(h.PartitionLeaderEpoch, h.BaseOffset); err != nil {
		return err
	}
	s := l.active()
	if s.size > 0 && (s.size+int64(len(batch)) > l.segmentBytes.Load() || h.LastOffset()+1-s.base > math.MaxUint32) {
		if err := l.roll(); err != nil {
			return err
		}
		s = l.active()
	}
	pos := s.size
	if end := pos + int64(len(batch)); end > s.alloc && end >= reserveFrom && !s.noReserve {
		l.reserve(s, end)
	}
	ie, te := s.plan(pos, h, l.index)
	if pos+int64(len(batch)) > s.alloc || !s.tail.add(batch, pos) {
		if err := s.flushTail(); err != nil {
			l.fail(err)
			return err
		}
		if _, err := s.log.Write(batch); err != nil {
			return l.undoWrite(s, pos, err)
		}
	}
	l.mu.Lock()
	s.apply(pos, h, ie, te)
	l.end.Store(s.next)
	l.mu.Unlock()
	return nil
}

// Space is reserved ahead of a busy active segment's appends, so that the
// fsync after an append need not record a new file size: a third less time
// per fsync on this project's disks (vfs.Preallocator). A segment
// reserves once it holds reserveFrom bytes; each reservation adds a quarter
// of what it holds, between reserveMin and reserveMax, so a partition that
// holds little reserves nothing and none reserves more than a quarter of
// its active segment or reserveMax.
const (
	reserveFrom = 64 << 10
	reserveMin  = 16 << 10
	reserveMax  = 4 << 20
)

// reserve reserves space in s's file beyond end, the end of the batch
// about to be written; the caller holds amu. The zeros beyond the data are
// never read (readers stop at size), are cut when the segment rolls or the
// log closes, and recovery cuts them after a crash (recoverActive).
func (l *Log) reserve(s *segment, end int64) {
	want := end + min(max(end/4, reserveMin), reserveMax)
	want = min(want, max(l.segmentBytes.Load(), end))
	if want <= end {
		return
	}
	if err := vfs.Preallocate(s.log, want); err != nil {
		s.noReserve = true
		if !errors.Is(err, vfs.ErrNoPreallocate) {
			l.logger.Info("cannot reserve space ahead of the active segment's appends; appending without", "base", s.base, "err", err)
		}
		return
	}
	s.alloc = want
}

// trimReserved cuts s's file back to its data, before it rolls or closes.
func (s *segment) trimReserved() error {
	if err := s.flushTail(); err != nil {
		return err
	}
	if s.alloc <= s.size {
		return nil
	}
	if err := s.log.Truncate(s.size); err != nil {
		return err
	}
	s.alloc = 0
	return nil
}

// undoWrite cuts a partially written batch back off so the file matches the
// published state; if even that fails, the log refuses further writes.
func (l *Log) undoWrite(s *segment, pos int64, cause error) error {
	s.alloc = 0
	if err := s.log.Truncate(pos); err != nil {
		l.fail(fmt.Errorf("storage: cannot undo a failed write: %w (after %w)", err, cause))
	}
	return cause
}

func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

func (l *Log) failLocked(err error) {
	if l.failed == nil {
		l.failed = err
	}
}

// roll seals the active segment and starts a new one at the log end. The
// sealed segment and its index files (written here, from memory) are
// fsynced, and their names too, before the new segment exists, so after
// any crash every segment but the last is complete. A failure before the
// new segment exists leaves the old one active, with nothing on disk that
// recovery would trust (an active segment's index files are never read),
// so only a failed fsync of the log file fails the log.
func (l *Log) roll() error {
	old := l.active()
	// A rolled segment ends with its last batch: recovery takes anything
	// after it for damage.
	if err := old.trimReserved(); err != nil {
		return err
	}
	if err := old.log.Sync(); err != nil {
		l.fail(err)
		return err
	}
	tindex := append(slices.Clip(old.tindex), old.finishEntry())
	if err := writeIndexFiles(l.fs, l.dir, old.base, "", old.index, tindex); err != nil {
		return err
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return err
	}
	ns, err := l.createSegment(old.next)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old.tindex = tindex
	l.segs = append(l.segs, ns)
	if old.next > l.durable.Load() {
		l.durable.Store(old.next)
	}
	l.mu.Unlock()
	unpinFile(old.log)
	return nil
}

// Sync fsyncs the active segment and returns the offset below which every
// record is durable. Concurrent Appends proceed while it runs. After a
// failed fsync every later Sync fails too: the kernel may have dropped the
// dirty pages, so a later success would be a lie.
func (l *Log) Sync() (int64, error) {
	l.smu.Lock()
	defer l.smu.Unlock()
	sp, err := l.syncPointLocked()
	if err != nil || sp.seg == nil {
		return l.durable.Load(), err
	}
	if err := sp.seg.flushTail(); err != nil {
		l.fail(err)
		return l.durable.Load(), err
	}
	if err := sp.seg.log.Sync(); err != nil {
		l.fail(err)
		return l.durable.Load(), err
	}
	return l.syncedLocked(sp), nil
}

// syncPoint is what a sync begun now makes durable: the active segment's
// file up to pos, and so the log up to end.
type syncPoint struct {
	seg      *segment // nil: nothing to sync
	pos, end int64
	mark     uint64 // the file's vfs.SyncMark, for a volume sync
}

// syncPointLocked returns what a sync must cover; the caller holds smu.
func (l *Log) syncPointLocked() (syncPoint, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return syncPoint{}, ErrClosed
	}
	if l.failed != nil {
		return syncPoint{}, l.failed
	}
	end := l.end.Load()
	if l.durable.Load() >= end {
		return syncPoint{}, nil
	}
	seg := l.active()
	return syncPoint{seg: seg, pos: seg.size, end: end}, nil
}

// syncedLocked records that the sync of sp succeeded and returns the
// durable end; the caller holds smu.
func (l *Log) syncedLocked(sp syncPoint) int64 {
	l.syncedSeg, l.syncedPos = sp.seg, sp.pos
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp.end > l.durable.Load() {
		l.durable.Store(sp.end)
	}
	return l.durable.Load()
}

// DropCache asks the operating system to evict the cached pages of the
// log's durable bytes, except the newest keep bytes of the active segment
// (the page being appended to stays cached, so an append never has to
// read it back). A follower calls it after each Sync: it serves no reads,
// and on a virtual machine the copy into never-touched page-cache memory
// costs several times the copy into pages the kernel just freed
// (docs/BENCHMARKS.md). Reads still work; they go to the disk.
func (l *Log) DropCache(keep int64) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed || len(l.segs) == 0 {
		return
	}
	last := len(l.segs) - 1
	for i, s := range l.segs {
		limit := s.size // a rolled segment was synced whole when it rolled
		if i == last {
			limit = 0
			if l.syncedSeg == s {
				limit = min(l.syncedPos, s.size) - keep
			}
		}
		if limit > s.uncached {
			// Best effort: failing advice changes nothing.
			_ = vfs.DropCache(s.log, s.uncached, limit-s.uncached)
			s.uncached = limit
		}
	}
}

// Dirty reports whether some appended data is not yet durable.
func (l *Log) Dirty() bool { return l.durable.Load() < l.end.Load() }

// EndOffset is the log end offset: the offset the next record gets.
func (l *Log) EndOffset() int64 { return l.end.Load() }

// DurableEnd is the offset below which every record has been fsynced.
func (l *Log) DurableEnd() int64 { return l.durable.Load() }

// StartOffset is the log start offset: the first readable offset.
func (l *Log) StartOffset() int64 { return l.start.Load() }

// Size is the total size of all segment files in bytes.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// SegmentCount is the number of segments, including the active one.
func (l *Log) SegmentCount() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}

// Dir is the directory holding the log.
func (l *Log) Dir() string { return l.dir }

// Read returns whole stored batches, starting with the one that holds
// offset (or, when offset fell into a gap that compaction left, the first
// batch after it: the first whose last offset is >= offset), totalling at
// most maxBytes, except that the first batch is always returned whole even
// when larger (KIP-74). No batch whose base offset is
// >= limit (the high watermark) is returned. At the end of the log (or of
// the readable range) it returns nil, nil. Reads of offsets below the start
// offset or above the end offset fail with ErrOffsetOutOfRange.
func (l *Log) Read(offset int64, maxBytes int, limit int64) ([]byte, error) {
	return l.ReadInto(nil, offset, maxBytes, limit)
}

// ReadInto is Read into dst's memory when its capacity is enough, so that
// a caller serving many reads (the replication leader) can reuse buffers
// instead of allocating and zeroing megabytes per read. The result aliases
// dst then; dst must not be reused while the result is in use.
func (l *Log) ReadInto(dst []byte, offset int64, maxBytes int, limit int64) ([]byte, error) {
	return l.ReadAlloc(func(n int) []byte {
		if cap(dst) >= n {
			return dst[:n]
		}
		return make([]byte, n)
	}, offset, maxBytes, limit)
}

// ReadAlloc is Read into memory from alloc, which is asked at most once,
// for exactly the bytes the read needs, and must return a buffer of that
// length. The result, when not empty, is a prefix of that buffer; a read
// that finds nothing to return does not call alloc.
func (l *Log) ReadAlloc(alloc func(n int) []byte, offset int64, maxBytes int, limit int64) ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	if offset < l.start.Load() || offset > l.end.Load() {
		return nil, fmt.Errorf("%w: %d not in [%d, %d]", ErrOffsetOutOfRange, offset, l.start.Load(), l.end.Load())
	}
	if offset == l.end.Load() {
		return nil, nil
	}
	for i := l.segIndex(offset); i < len(l.segs); i++ {
		s := l.segs[i]
		if s.size == 0 || offset >= s.next {
			continue
		}
		sc := newScanner(s, s.size, l.index+recordbatch.HeaderSize)
		defer sc.release()
		pos, h, ok, err := sc.find(s.lookup(offset), offset)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if h.BaseOffset >= limit {
			return nil, nil
		}
		stop := s.size
		if limit < s.next {
			// Bound the read at the first batch at or past limit, so a
			// lagging high watermark does not make us read maxBytes.
			lp, lh, ok, err := sc.find(s.lookup(limit), limit)
			if err != nil {
				return nil, err
			}
			if ok {
				if lh.BaseOffset < limit {
					lp += int64(lh.Size())
				}
				stop = lp
			}
		}
		want := min(max(int64(maxBytes), int64(h.Size())), stop-pos)
		buf := alloc(int(want))
		if sc.bufPos >= 0 && pos >= sc.bufPos && pos+want <= sc.bufPos+int64(sc.n) {
			// The scan already read these bytes; skip a second read.
			copy(buf, sc.buf[pos-sc.bufPos:])
		} else if n, err := s.ReadAt(buf, pos); n < len(buf) {
			return nil, shortRead(err, pos+int64(n))
		}
		return trimBatches(buf, limit)
	}
	return nil, nil
}

// trimBatches cuts buf after its last whole, intact batch with base below
// limit; the first batch is always kept. Intact means a correct CRC and
// offsets that increase: reads must not hand out damaged data (an older
// segment is only verified at Open with Options.VerifyAll), so a first
// batch that is not intact is an error wrapping ErrCorrupt, and a later one
// ends the result (the read that starts there fails).
func trimBatches(buf []byte, limit int64) ([]byte, error) {
	n := 0
	next := int64(math.MinInt64)
	for n+recordbatch.LengthOverhead <= len(buf) {
		if n > 0 && recordbatch.BaseOffset(buf[n:]) >= limit {
			break
		}
		sz := recordbatch.LengthOverhead + int(int32(be32(buf[n+8:])))
		var h recordbatch.Header
		var err error
		if sz < recordbatch.HeaderSize || n+sz > len(buf) {
			if n > 0 && sz >= recordbatch.HeaderSize {
				break // maxBytes ends the read inside this batch
			}
			err = fmt.Errorf("batch length field %d", sz-recordbatch.LengthOverhead)
		} else if h, err = recordbatch.Check(buf[n : n+sz]); err == nil && (h.BaseOffset < next || h.LastOffsetDelta < 0) {
			err = fmt.Errorf("base offset %d, lastOffsetDelta %d after offset %d", h.BaseOffset, h.LastOffsetDelta, next-1)
		}
		if err != nil {
			if n == 0 {
				return nil, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, recordbatch.BaseOffset(buf), err)
			}
			break
		}
		next = h.LastOffset() + 1
		n += sz
	}
	return buf[:n], nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// segIndex returns the index of the segment that would hold offset.
func (l *Log) segIndex(offset int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset })
	return max(i-1, 0)
}

// OffsetForTimestamp finds the first record (at or after the start offset)
// whose timestamp is >= ts, for ListOffsets. ok is false when there is none.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, ok bool, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, false, ErrClosed
	}
	for _, s := range l.segs {
		if s.maxTs < ts || s.next <= l.start.Load() {
			continue
		}
		off, t, ok, err := l.searchSegment(s, ts)
		if err != nil || ok {
			return off, t, ok, err
		}
	}
	return 0, 0, false, nil
}

// MaxTimestamp returns the record with the largest timestamp (the first
// such record on ties), for ListOffsets with timestamp -3.
func (l *Log) MaxTimestamp() (offset, timestamp int64, ok bool, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, false, ErrClosed
	}
	var best *segment
	for _, s := range l.segs {
		if s.size > 0 && s.next > l.start.Load() && (best == nil || s.maxTs > best.maxTs) {
			best = s
		}
	}
	if best == nil {
		return 0, 0, false, nil
	}
	return l.searchSegment(best, best.maxTs)
}

// searchSegment finds the first record in s with timestamp >= ts: the time
// index gives a starting position, batch max timestamps pick the batch, and
// decoding the batch picks the record.
func (l *Log) searchSegment(s *segment, ts int64) (int64, int64, bool, error) {
	start := l.start.Load()
	sc := newScanner(s, s.size, scanBufSize)
	defer sc.release()
	var body []byte
	for pos := s.timeLookup(ts); pos < s.size; {
		h, err := sc.header(pos)
		if err != nil {
			return 0, 0, false, err
		}
		if h.MaxTimestamp >= ts && h.LastOffset() >= start {
			if cap(body) < h.Size() {
				body = make([]byte, h.Size())
			}
			body = body[:h.Size()]
			if n, err := s.ReadAt(body, pos); n < len(body) {
				return 0, 0, false, shortRead(err, pos+int64(n))
			}
			if _, err := recordbatch.Check(body); err != nil {
				return 0, 0, false, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, h.BaseOffset, err)
			}
			recs, err := recordbatch.Records(body, maxDecompressed)
			if err != nil {
				return 0, 0, false, fmt.Errorf("storage: batch at offset %d: %w", h.BaseOffset, err)
			}
			for _, r := range recs {
				if r.Timestamp >= ts && r.Offset >= start {
					return r.Offset, r.Timestamp, true, nil
				}
			}
		}
		pos += int64(h.Size())
	}
	return 0, 0, false, nil
}

// writable reports why the log cannot be written, if it cannot.
func (l *Log) writable() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	return l.failed
}

// Close fsyncs the active segment and closes every file. Further calls
// fail with ErrClosed.
func (l *Log) Close() error {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.smu.Lock()
	defer l.smu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	if l.failed == nil && len(l.segs) > 0 {
		errs = append(errs, l.active().trimReserved(), l.active().log.Sync())
	}
	for _, s := range l.segs {
		errs = append(errs, s.closeFiles())
	}
	return errors.Join(errs...)
}

// Delete closes the log and removes its directory (DeleteTopics).
func (l *Log) Delete() error {
	// A failure to sync on close does not matter: the data is going away.
	_ = l.Close()
	if err := l.fs.RemoveAll(l.dir); err != nil {
		return err
	}
	return l.fs.SyncDir(filepath.Dir(l.dir))
}
