// Package storage owns the on-disk partition log: segment files of record
// batches stored exactly as produced (only baseOffset and
// partitionLeaderEpoch are set by the log; compaction rewrites the batches
// that lose records), their sparse offset and time indexes, the log start
// offset and the leader epoch history, together with crash recovery,
// truncation, retention and compaction.
//
// All file access goes through vfs.FS. The package knows nothing about the
// network protocol, topics or replication policy; it must not import the
// broker, protocol or config packages.
package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
}

// Log is one partition's log. Its methods are safe for concurrent use: any
// number of readers run alongside one appender; Sync does not block Append.
type Log struct {
	dir    string
	fs     vfs.FS
	logger *slog.Logger
	index  int

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
	// may follow an offset gap (see recoveryFile.GapsBelow); exact, while
	// the file may hold a larger, still safe, value.
	gapsBelow int64

	recovery RecoveryReport // fixed by Open
}

// EpochEntry records that leader epoch Epoch's first offset is StartOffset.
type EpochEntry struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"startOffset"`
}

type epochFile struct {
	Version int          `json:"version"`
	Entries []EpochEntry `json:"entries"`
}

type startFile struct {
	LogStartOffset int64 `json:"logStartOffset"`
}

// recoveryFile is the JSON form of recovery-point.json.
type recoveryFile struct {
	Version int `json:"version"`
	// Offset is the recovery point: every record below it was durable
	// when it was written (CheckpointRecoveryPoint), and truncations lower
	// it before they cut (Truncate, TruncateFullyAndStartAt). A log that
	// recovers to an end below it lost durable data.
	Offset int64 `json:"offset"`
	// GapsBelow: batches of the active segment whose base offset is below
	// it may follow an offset gap; from it on recovery requires each batch
	// to start where the previous one ended, which catches a flipped bit
	// in a base offset (no CRC covers it). Gaps come from compaction, which
	// only rewrites rolled segments, so the active segment has them only
	// when a truncation made a rolled segment the active one; this is
	// written before such a cut. Omitted when 0.
	GapsBelow int64 `json:"gapsBelow,omitempty"`
}

// RecoveryReport is what Open's recovery removed, and whether that loses
// data that had been durable. Log.Recovery returns it.
type RecoveryReport struct {
	// DroppedBytes is how many bytes recovery removed: a torn or corrupt
	// tail of the active segment, or (Options.VerifyAll, or a rolled
	// segment whose indexes had to be rebuilt) a damaged rolled segment
	// from its first bad batch on together with every later segment.
	DroppedBytes int64
	// LostFrom is the log end offset after recovery when DroppedBytes > 0
	// or Damaged: records from it on that the log held before are gone.
	// It is -1 otherwise.
	LostFrom int64
	// Damaged reports that recovery removed data that had been durable, so
	// something other than a crash destroyed it (a damaged disk, a bit
	// flip): a rolled segment was damaged; or, in the active segment, a
	// valid batch follows the first bad one (damage inside the data, not a
	// torn tail); or the recovered log end is below the recovery point
	// (CheckpointRecoveryPoint). A torn or corrupt last batch with no
	// recovery point beyond it is not Damaged: it may be a write that a
	// crash cut before it was fsynced. A replica whose log is Damaged must
	// not be elected on its own data.
	Damaged bool
	// Reason is one sentence saying why Damaged is set; empty otherwise.
	Reason string
}

// Open opens (creating if needed) the log in dir and recovers it: the active
// segment is scanned batch by batch (framing, CRC, the epoch rule, offsets
// contiguous), truncated at the first bad batch, and its indexes rebuilt;
// older segments' indexes are rebuilt when missing or inconsistent, and
// with Options.VerifyAll older segments are verified too. Damaged data never
// makes Open fail: it is removed and reported (Recovery).
func Open(dir string, opts Options) (*Log, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.IndexIntervalBytes <= 0 {
		opts.IndexIntervalBytes = defaultIndexBytes
	}
	l := &Log{dir: dir, fs: opts.FS, logger: opts.Logger.With("dir", dir), index: opts.IndexIntervalBytes}
	l.Reconfigure(opts.SegmentBytes, opts.RetentionMs, opts.RetentionBytes)
	if err := l.open(opts.VerifyAll); err != nil {
		for _, s := range l.segs {
			s.closeFiles()
		}
		return nil, err
	}
	return l, nil
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

func (l *Log) open(verifyAll bool) error {
	if err := l.fs.MkdirAll(l.dir); err != nil {
		return err
	}
	if err := l.fs.SyncDir(filepath.Dir(l.dir)); err != nil {
		return err
	}
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	var bases []int64
	have := map[int64]bool{}
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") || strings.HasSuffix(n, cleanedSuffix) {
			// An interrupted atomic write or compaction; see swapCleaned.
			l.fs.Remove(filepath.Join(l.dir, n))
			continue
		}
		if b, ok := parseSegName(n, logSuffix); ok {
			bases = append(bases, b)
			have[b] = true
		}
	}
	for _, n := range names {
		for _, suf := range []string{indexSuffix, timeIndexSuffix} {
			if b, ok := parseSegName(n, suf); ok && !have[b] {
				l.fs.Remove(filepath.Join(l.dir, n))
			}
		}
	}
	slices.Sort(bases)

	start, err := l.readStart()
	if err != nil {
		return err
	}
	if err := l.readEpochs(); err != nil {
		return err
	}
	if err := l.readRecoveryPoint(); err != nil {
		return err
	}

	for i, base := range bases {
		f, err := l.fs.OpenRW(segName(l.dir, base, logSuffix))
		if err != nil {
			return err
		}
		s := &segment{base: base, log: f, maxTs: -1}
		if s.size, err = f.Size(); err != nil {
			f.Close()
			return err
		}
		if i < len(bases)-1 {
			// An empty rolled segment is one that compaction emptied:
			// its offsets are a gap, which readers skip.
			s.next = bases[i+1]
		}
		l.segs = append(l.segs, s)
	}
	l.recovery.LostFrom = -1
	if len(l.segs) == 0 {
		s, err := l.createSegment(max(start, 0))
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s)
		l.gapsBelow = 0
		if !l.rpKnown {
			// A new log: recording that it has no gaps lets the first
			// recovery check its offsets fully, before any checkpoint.
			if err := l.writeRecoveryPoint(s.base, 0); err != nil {
				return err
			}
		}
	} else if err := l.recoverSegments(verifyAll); err != nil {
		return err
	}
	act := l.active()
	l.end.Store(act.next)
	l.durable.Store(act.next)
	start = max(start, l.segs[0].base)
	l.start.Store(start)
	// A log that ends below its start offset is empty from the start
	// offset on (see truncateFullyLocked), so that is its end.
	l.checkRecoveryPoint(max(act.next, start))
	if start > act.next {
		// The start offset was persisted but data beyond it was lost in a
		// crash: the log is empty from start. This is recovery, not a
		// truncation the broker asked for, so the recovery point stays.
		l.logger.Warn("log start offset is beyond the recovered log end; restarting the log there", "start", start, "end", act.next)
		if err := l.truncateFullyLocked(start, false); err != nil {
			return err
		}
	}
	if _, err := l.deleteBelowStart(); err != nil {
		return err
	}
	end := l.end.Load()
	cut := len(l.epochs)
	for cut > 0 && l.epochs[cut-1].StartOffset >= end {
		cut--
	}
	if cut != len(l.epochs) {
		l.epochs = l.epochs[:cut]
		return l.writeEpochs(l.epochs)
	}
	return nil
}

// checkRecoveryPoint completes the recovery report once the log end after
// recovery is known.
func (l *Log) checkRecoveryPoint(end int64) {
	r := &l.recovery
	if l.rpKnown && end < l.rpOffset {
		if !r.Damaged {
			r.Damaged = true
			r.Reason = fmt.Sprintf("the log ends at offset %d after recovery, below its recovery point %d: records that had been durable are gone", end, l.rpOffset)
		}
		l.logger.Error("recovered log ends below its recovery point: durable records were lost", "end", end, "recoveryPoint", l.rpOffset)
	}
	if r.Damaged || r.DroppedBytes > 0 {
		r.LostFrom = end
	}
}

// Recovery reports what Open's recovery removed and whether the log lost
// data that had been durable. It does not change after Open.
func (l *Log) Recovery() RecoveryReport { return l.recovery }

func parseSegName(name, suffix string) (int64, bool) {
	if len(name) != 20+len(suffix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	b, err := strconv.ParseInt(name[:20], 10, 64)
	return b, err == nil && b >= 0
}

// recoverSegments checks the segments found at Open (every one with
// verifyAll, else the active one) and truncates the log at the first bad
// batch, recording what it removed in l.recovery.
func (l *Log) recoverSegments(verifyAll bool) error {
	prev := int32(math.MinInt32)
	last := len(l.segs) - 1
	for i, s := range l.segs[:last] {
		if verifyAll {
			// Compaction leaves gaps in rolled segments, so only the
			// order of offsets is checked, and that the last batch ends
			// before the next segment begins.
			res, err := s.scan(s.size, scanRules{verify: true, epochs: l.epochs, prevEpoch: prev, gapsBelow: math.MaxInt64, limit: s.next}, nil)
			if err != nil {
				return err
			}
			if res.bad == "" {
				if err := l.checkLostTail(s, &res); err != nil {
					return err
				}
			}
			if res.bad != "" {
				return l.cutDamaged(i, res)
			}
			prev = res.lastEpoch
		}
		res, err := l.loadRolled(s)
		if err != nil {
			return err
		}
		if res.bad != "" {
			// Found while rebuilding the indexes: a hole here would look
			// like a compaction gap and be skipped by readers, so it is
			// handled as VerifyAll would.
			return l.cutDamaged(i, res)
		}
	}
	if !verifyAll {
		prev = math.MinInt32
	}
	return l.recoverActive(prev)
}

// checkLostTail sets res.bad when the time index of rolled segment s says
// that batches are missing from its end (lostTail); res is a scan of all of
// s.
func (l *Log) checkLostTail(s *segment, res *scanResult) error {
	tidx, err := vfs.ReadFile(l.fs, segName(l.dir, s.base, timeIndexSuffix))
	if err != nil && !errors.Is(err, errNotExist) {
		return err
	}
	if ts, lost := s.lostTail(tidx, res.maxTs); lost {
		res.bad = fmt.Sprintf("its time index records max timestamp %d, but its batches end at byte %d with max timestamp %d: batches are missing from its end", ts, res.valid, res.maxTs)
	}
	return nil
}

// loadRolled loads a rolled segment's indexes, rebuilding them when they do
// not match the log file. When the rebuild meets a bad batch it returns
// that scan's result (res.bad set) and leaves the files as they are.
func (l *Log) loadRolled(s *segment) (scanResult, error) {
	idx, err1 := vfs.ReadFile(l.fs, segName(l.dir, s.base, indexSuffix))
	tidx, err2 := vfs.ReadFile(l.fs, segName(l.dir, s.base, timeIndexSuffix))
	for _, err := range []error{err1, err2} {
		if err != nil && !errors.Is(err, errNotExist) {
			return scanResult{}, err
		}
	}
	if err1 == nil && err2 == nil && s.loadIndexes(idx, tidx) {
		return scanResult{}, nil
	}
	l.logger.Warn("rebuilding indexes of segment", "base", s.base)
	next := s.next
	rules := anyGaps
	rules.limit = next
	res, err := s.rebuild(rules, l.index)
	if err != nil || res.bad != "" {
		return res, err
	}
	// Compaction leaves gaps, so the last batch may end before next.
	s.next = next
	if ts, lost := s.lostTail(tidx, res.maxTs); lost {
		res.bad = fmt.Sprintf("its time index records max timestamp %d, but its batches end at byte %d with max timestamp %d: batches are missing from its end", ts, res.valid, res.maxTs)
		return res, nil
	}
	s.tindex = append(s.tindex, s.finishEntry())
	err = s.writeIndexFiles(l.fs, l.dir)
	for _, f := range []vfs.File{s.idx, s.tidx} {
		if err == nil {
			err = f.Sync()
		}
	}
	s.idx.Close()
	s.tidx.Close()
	s.idx, s.tidx = nil, nil
	return res, err
}

// recoverActive validates the last segment, truncates any torn or corrupt
// tail, rebuilds its indexes and fsyncs it so that everything left is
// durable. prevEpoch is the epoch of the last batch before the segment
// (math.MinInt32 when not known).
func (l *Log) recoverActive(prevEpoch int32) error {
	s := l.active()
	fileSize := s.size
	// l.rpGaps is where the file says gaps may be; MaxInt64 when there is
	// no file, as for a log from before recovery points: nothing then says
	// the segment is free of compaction gaps.
	res, err := s.rebuild(scanRules{verify: true, epochs: l.epochs, prevEpoch: prevEpoch, gapsBelow: l.rpGaps, limit: math.MaxInt64}, l.index)
	if err != nil {
		return err
	}
	l.gapsBelow = res.gapEnd
	if res.valid < fileSize {
		dropped := fileSize - res.valid
		l.recovery.DroppedBytes += dropped
		if validBatchFollows(s.log, res.valid, fileSize) {
			l.recovery.Damaged = true
			l.recovery.Reason = fmt.Sprintf("in the active segment %d a valid batch follows the bad one at byte %d (%s): the damage is inside data written whole, not a torn tail", s.base, res.valid, res.bad)
			l.logger.Error("truncating the active segment at a damaged batch that a valid batch follows",
				"base", s.base, "position", res.valid, "reason", res.bad, "lostFrom", res.next, "droppedBytes", dropped)
		} else {
			l.logger.Warn("truncating torn or corrupt tail of the active segment",
				"base", s.base, "validBytes", res.valid, "droppedBytes", dropped, "reason", res.bad)
		}
		if err := s.log.Truncate(res.valid); err != nil {
			return err
		}
	}
	if err := s.writeIndexFiles(l.fs, l.dir); err != nil {
		return err
	}
	return s.log.Sync()
}

// cutDamaged truncates the log at the first bad batch of rolled segment i,
// which res describes: later segments are removed newest first (so that a
// crash part way leaves a prefix of the log), then the segment is cut and
// becomes the active one, its indexes rebuilt, all of it fsynced.
func (l *Log) cutDamaged(i int, res scanResult) error {
	s := l.segs[i]
	later := l.segs[i+1:]
	// The file's size: an index rebuild may have lowered s.size already.
	size, err := s.log.Size()
	if err != nil {
		return err
	}
	dropped := size - res.valid
	for _, ls := range later {
		dropped += ls.size
	}
	// Where the log ended, for the report; the active segment's headers
	// are enough, and damage there does not matter any more.
	oldEnd := s.next
	if len(later) > 0 {
		last := later[len(later)-1]
		if r, err := last.scan(last.size, anyGaps, nil); err == nil && r.next > last.base {
			oldEnd = r.next
		} else {
			oldEnd = last.base
		}
	}
	// The segment keeps the gaps compaction may have left in it, which
	// recovery must allow once it is the active segment, even after a crash
	// part way from here.
	if err := l.persistBeforeCut(res.next, false, res.gapEnd); err != nil {
		return err
	}
	for j := len(later) - 1; j >= 0; j-- {
		later[j].closeFiles()
		if err := removeSegmentFiles(l.fs, l.dir, later[j].base); err != nil {
			return err
		}
	}
	l.segs = l.segs[:i+1]
	// The removals are durable before the cut: a cut segment followed by
	// the later ones again would be a hole in the log.
	if len(later) > 0 {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	if err := s.log.Truncate(res.valid); err != nil {
		return err
	}
	r, err := s.rebuild(anyGaps, l.index)
	if err != nil {
		return err
	}
	l.gapsBelow = r.gapEnd
	if err := s.writeIndexFiles(l.fs, l.dir); err != nil {
		return err
	}
	if err := s.log.Sync(); err != nil {
		return err
	}
	rep := &l.recovery
	rep.DroppedBytes += dropped
	rep.Damaged = true
	rep.Reason = fmt.Sprintf("rolled segment %d is damaged at byte %d (%s): the log was cut at offset %d, losing offsets %d to %d", s.base, res.valid, res.bad, s.next, s.next, oldEnd-1)
	l.logger.Error("rolled segment is damaged; truncating the log there",
		"base", s.base, "position", res.valid, "reason", res.bad, "lostFrom", s.next, "lostTo", oldEnd-1,
		"droppedBytes", dropped, "segmentsRemoved", len(later))
	return nil
}

func (l *Log) createSegment(base int64) (*segment, error) {
	s := &segment{base: base, next: base, maxTs: -1}
	var err error
	if s.log, err = l.fs.Create(segName(l.dir, base, logSuffix)); err != nil {
		return nil, err
	}
	if err = s.writeIndexFiles(l.fs, l.dir); err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

func (l *Log) readStart() (int64, error) {
	b, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, startFileName))
	if errors.Is(err, errNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var sf startFile
	if err := json.Unmarshal(b, &sf); err != nil || sf.LogStartOffset < 0 {
		// Damaged data must not stop the log from opening; the first
		// segment's base is the start offset then.
		l.logger.Error("ignoring unreadable log start offset file", "file", startFileName, "err", err)
		return 0, nil
	}
	return sf.LogStartOffset, nil
}

func (l *Log) writeStart(start int64) error {
	b, _ := json.Marshal(startFile{LogStartOffset: start})
	return vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, startFileName), b)
}

func (l *Log) readEpochs() error {
	b, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, epochFileName))
	if errors.Is(err, errNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var ef epochFile
	if err = json.Unmarshal(b, &ef); err == nil {
		for i, e := range ef.Entries {
			if i > 0 && (e.Epoch <= ef.Entries[i-1].Epoch || e.StartOffset < ef.Entries[i-1].StartOffset) {
				err = errors.New("entries out of order")
				break
			}
		}
	}
	if err != nil {
		// Damaged data must not stop the log from opening: the history is
		// lost, as if the file were missing (the replication layer
		// discards and recopies a log with records but no history).
		l.logger.Error("ignoring unreadable leader epoch history", "file", epochFileName, "err", err)
		return nil
	}
	l.epochs = ef.Entries
	return nil
}

// readRecoveryPoint reads recovery-point.json. A missing file leaves the
// recovery point unknown; so does an unreadable one, with a warning.
func (l *Log) readRecoveryPoint() error {
	l.rpKnown, l.rpOffset, l.rpGaps = false, 0, math.MaxInt64
	b, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, recoveryFileName))
	if errors.Is(err, errNotExist) {
		return nil
	}
	if err == nil {
		var rf recoveryFile
		if err = json.Unmarshal(b, &rf); err == nil && (rf.Version != 1 || rf.Offset < 0 || rf.GapsBelow < 0) {
			err = fmt.Errorf("unexpected content %q", b)
		}
		if err == nil {
			l.rpKnown, l.rpOffset, l.rpGaps = true, rf.Offset, rf.GapsBelow
			return nil
		}
	}
	l.logger.Warn("ignoring unreadable recovery point file; the recovery point is unknown", "file", recoveryFileName, "err", err)
	return nil
}

// writeRecoveryPoint replaces recovery-point.json. The caller holds rpmu
// (or is Open).
func (l *Log) writeRecoveryPoint(offset, gaps int64) error {
	b, _ := json.Marshal(recoveryFile{Version: 1, Offset: offset, GapsBelow: gaps})
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, recoveryFileName), b); err != nil {
		return err
	}
	l.rpKnown, l.rpOffset, l.rpGaps = true, offset, gaps
	return nil
}

// persistBeforeCut makes recovery-point.json safe for a cut after which the
// log ends at newEnd and the active segment may have gaps below gaps: with
// lower, the recovery point must not exceed newEnd (a crash during a cut
// asked for must not look like lost data), and the file must allow those
// gaps. It writes only when the file does not say so already. The caller
// holds rpmu (or is Open).
func (l *Log) persistBeforeCut(newEnd int64, lower bool, gaps int64) error {
	offset, write := l.rpOffset, false
	if lower && l.rpKnown && newEnd < offset {
		offset, write = newEnd, true
	}
	// Without a file, recovery allows gaps anywhere already.
	if l.rpKnown && gaps > l.rpGaps {
		write = true
	}
	if !write {
		return nil
	}
	return l.writeRecoveryPoint(offset, gaps)
}

// CheckpointRecoveryPoint records DurableEnd() as the log's recovery point
// in recovery-point.json (written atomically), so that a later Open can
// tell whether its recovery removed data that had been durable
// (RecoveryReport.Damaged). It writes only when the file would change, so
// calling it often is cheap; call it every few seconds and at clean
// shutdown (after a final Sync). It never lowers the recovery point: only
// Truncate and TruncateFullyAndStartAt do, before they cut. So a log that
// Open found Damaged keeps a recovery point above its end, and stays
// Damaged across restarts, until it is truncated below that point or has
// grown past it again.
func (l *Log) CheckpointRecoveryPoint() error {
	l.rpmu.Lock()
	defer l.rpmu.Unlock()
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	activeBase := l.active().base
	l.mu.RUnlock()
	offset := l.durable.Load()
	if l.rpKnown {
		offset = max(offset, l.rpOffset)
	}
	gaps := l.gapsBelow
	if gaps <= activeBase {
		// The segment that had the gaps has been rolled.
		gaps = 0
	}
	if l.rpKnown && offset == l.rpOffset && gaps == l.rpGaps {
		return nil
	}
	return l.writeRecoveryPoint(offset, gaps)
}

func (l *Log) writeEpochs(entries []EpochEntry) error {
	b, _ := json.Marshal(epochFile{Version: 1, Entries: entries})
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, epochFileName), b); err != nil {
		return err
	}
	if fn := l.epochObs.Load(); fn != nil {
		(*fn)(slices.Clone(entries))
	}
	return nil
}

// SetEpochObserver registers fn to be called with a copy of the epoch
// history each time a changed history has been written durably (an epoch
// added, the history truncated, trimmed from the start or emptied). fn
// runs with the log locked: it must be quick and must not call the log.
// nil unregisters.
func (l *Log) SetEpochObserver(fn func([]EpochEntry)) {
	if fn == nil {
		l.epochObs.Store(nil)
		return
	}
	l.epochObs.Store(&fn)
}

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
// baseOffset and partitionLeaderEpoch; the base offset must equal the log
// end offset. A batch from a newer epoch extends the epoch history.
func (l *Log) AppendReplica(batch []byte) error {
	h, err := recordbatch.Check(batch)
	if err != nil || h.LastOffsetDelta < 0 {
		return fmt.Errorf("%w: %v", ErrInvalidBatch, err)
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	if end := l.end.Load(); h.BaseOffset != end {
		return fmt.Errorf("%w: base offset %d, log end %d", ErrOffsetMismatch, h.BaseOffset, end)
	}
	return l.appendLocked(batch, h)
}

func (l *Log) appendLocked(batch []byte, h recordbatch.Header) error {
	l.mu.RLock()
	closed, failed := l.closed, l.failed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if failed != nil {
		return failed
	}
	epoch, latest := h.PartitionLeaderEpoch, l.LatestEpoch()
	if latest >= 0 && epoch < latest {
		// Also a batch without an epoch (-1) once the history has one:
		// epochs never decrease along the log, and recovery relies on it.
		return fmt.Errorf("%w: %d < %d", ErrStaleEpoch, epoch, latest)
	}
	if epoch > latest {
		// Persisted before the batch is written, so the history is
		// durable before the batch can be acknowledged as durable (and
		// recovery can check the batch's epoch against it).
		entries := append(slices.Clip(l.epochs), EpochEntry{Epoch: epoch, StartOffset: h.BaseOffset})
		if err := l.writeEpochs(entries); err != nil {
			return err
		}
		l.mu.Lock()
		l.epochs = entries
		l.mu.Unlock()
	}
	s := l.active()
	if s.size > 0 && (s.size+int64(len(batch)) > l.segmentBytes.Load() || h.LastOffset()+1-s.base > math.MaxUint32) {
		if err := l.roll(); err != nil {
			return err
		}
		s = l.active()
	}
	pos := s.size
	ie, te := s.plan(pos, h, l.index)
	if _, err := s.log.Write(batch); err != nil {
		return l.undoWrite(s, pos, err)
	}
	if ie != nil {
		if _, err := s.idx.Write(encodeIndex(*ie)); err != nil {
			return l.undoWrite(s, pos, err)
		}
	}
	if te != nil {
		if _, err := s.tidx.Write(encodeTime(*te)); err != nil {
			return l.undoWrite(s, pos, err)
		}
	}
	l.mu.Lock()
	s.apply(pos, h, ie, te)
	l.end.Store(s.next)
	l.mu.Unlock()
	return nil
}

// undoWrite cuts a partially written batch back off so the file matches the
// published state; if even that fails, the log refuses further writes.
func (l *Log) undoWrite(s *segment, pos int64, cause error) error {
	if err := s.log.Truncate(pos); err != nil {
		l.fail(fmt.Errorf("storage: cannot undo a failed write: %w (after %w)", err, cause))
		return cause
	}
	// The index files may hold an entry the memory does not; rewriting
	// them keeps the two consistent.
	if err := s.writeIndexFiles(l.fs, l.dir); err != nil {
		l.fail(fmt.Errorf("storage: cannot rewrite indexes after a failed write: %w", err))
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
// sealed segment and its indexes are fsynced before the new segment exists,
// so after any crash every segment but the last is complete.
func (l *Log) roll() error {
	old := l.active()
	fin := old.finishEntry()
	if _, err := old.tidx.Write(encodeTime(fin)); err != nil {
		return l.undoWrite(old, old.size, err)
	}
	for _, f := range []vfs.File{old.log, old.idx, old.tidx} {
		if err := f.Sync(); err != nil {
			l.fail(err)
			return err
		}
	}
	ns, err := l.createSegment(old.next)
	if err != nil {
		return err
	}
	old.idx.Close()
	old.tidx.Close()
	l.mu.Lock()
	old.tindex = append(old.tindex, fin)
	old.idx, old.tidx = nil, nil
	l.segs = append(l.segs, ns)
	if old.next > l.durable.Load() {
		l.durable.Store(old.next)
	}
	l.mu.Unlock()
	return nil
}

// Sync fsyncs the active segment and returns the offset below which every
// record is durable. Concurrent Appends proceed while it runs. After a
// failed fsync every later Sync fails too: the kernel may have dropped the
// dirty pages, so a later success would be a lie.
func (l *Log) Sync() (int64, error) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.mu.RLock()
	if l.closed || l.failed != nil {
		err := l.failed
		if l.closed {
			err = ErrClosed
		}
		l.mu.RUnlock()
		return l.durable.Load(), err
	}
	end := l.end.Load()
	seg := l.active()
	pos := seg.size
	l.mu.RUnlock()
	if l.durable.Load() >= end {
		return l.durable.Load(), nil
	}
	if err := seg.log.Sync(); err != nil {
		l.fail(err)
		return l.durable.Load(), err
	}
	l.syncedSeg, l.syncedPos = seg, pos
	l.mu.Lock()
	if end > l.durable.Load() {
		l.durable.Store(end)
	}
	d := l.durable.Load()
	l.mu.Unlock()
	return d, nil
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
		sc := newScanner(s.log, s.size, l.index+recordbatch.HeaderSize)
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
		var buf []byte
		if int64(cap(dst)) >= want {
			buf = dst[:want]
		} else {
			buf = make([]byte, want)
		}
		if sc.bufPos >= 0 && pos >= sc.bufPos && pos+want <= sc.bufPos+int64(sc.n) {
			// The scan already read these bytes; skip a second read.
			copy(buf, sc.buf[pos-sc.bufPos:])
		} else if n, err := s.log.ReadAt(buf, pos); n < len(buf) {
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
	sc := newScanner(s.log, s.size, scanBufSize)
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
			if n, err := s.log.ReadAt(body, pos); n < len(body) {
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

// Truncate removes every record at offset >= offset. The cut falls on a
// batch boundary, so a batch holding offset is removed whole. The epoch
// history is cut to match, and the recovery point is lowered first when
// the new end is below it. The truncation is durable when Truncate returns.
func (l *Log) Truncate(offset int64) error {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.rpmu.Lock()
	defer l.rpmu.Unlock()
	l.smu.Lock()
	defer l.smu.Unlock()
	l.syncedSeg = nil // the synced bytes may be cut
	if err := l.writable(); err != nil {
		return err
	}
	if offset >= l.end.Load() {
		return nil
	}
	l.truncations.Add(1)
	if offset < l.start.Load() {
		return l.truncateFullyLocked(offset, true)
	}
	i := l.segIndex(offset)
	s := l.segs[i]
	sc := newScanner(s.log, s.size, l.index+recordbatch.HeaderSize)
	pos, _, ok, err := sc.find(s.lookup(offset), offset)
	sc.release()
	if err != nil {
		return err
	}
	if !ok {
		pos = s.size
	}
	newEnd, err := s.endAt(pos, l.index)
	if err != nil {
		return err
	}
	gaps := min(l.gapsBelow, newEnd)
	if i < len(l.segs)-1 {
		// A rolled segment becomes the active one, and compaction may
		// have left gaps in it. Finding out would take a scan of the
		// whole segment; the rebuild after the cut does that scan, and
		// the next checkpoint records its exact answer.
		gaps = newEnd
	}
	if err := l.persistBeforeCut(newEnd, true, gaps); err != nil {
		return err
	}
	// Remove later segments newest first, so a crash part way leaves a
	// prefix of the log.
	doomed := slices.Clone(l.segs[i+1:])
	l.mu.Lock()
	l.segs = l.segs[:i+1]
	l.mu.Unlock()
	for j := len(doomed) - 1; j >= 0; j-- {
		doomed[j].closeFiles()
		if err := removeSegmentFiles(l.fs, l.dir, doomed[j].base); err != nil {
			l.fail(err)
			return err
		}
	}
	if len(doomed) > 0 {
		// Durable before the cut: the cut segment followed by the later
		// segments again after a crash would be a hole in the log.
		if err := l.fs.SyncDir(l.dir); err != nil {
			l.fail(err)
			return err
		}
	}
	l.mu.Lock()
	err = l.cutSegment(s, pos)
	l.mu.Unlock()
	if err != nil {
		l.fail(err)
		return err
	}
	if err := s.log.Sync(); err != nil {
		l.fail(err)
		return err
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		l.fail(err)
		return err
	}
	if l.end.Load() < l.start.Load() {
		// The cut batch began before the start offset.
		return l.truncateFullyLocked(l.start.Load(), true)
	}
	return l.truncateEpochs(l.end.Load())
}

// cutSegment truncates s (now the last segment) at pos and rebuilds its
// indexes. The caller holds rpmu and mu.
func (l *Log) cutSegment(s *segment, pos int64) error {
	if err := s.log.Truncate(pos); err != nil {
		return err
	}
	// New bytes will be written above pos; they are not dropped yet.
	s.uncached = min(s.uncached, pos)
	res, err := s.rebuild(anyGaps, l.index)
	if err != nil {
		return err
	}
	l.gapsBelow = res.gapEnd
	if err := s.writeIndexFiles(l.fs, l.dir); err != nil {
		return err
	}
	l.end.Store(s.next)
	if s.next < l.durable.Load() {
		l.durable.Store(s.next)
	}
	return nil
}

func (l *Log) truncateEpochs(end int64) error {
	l.mu.Lock()
	cut := len(l.epochs)
	for cut > 0 && l.epochs[cut-1].StartOffset >= end {
		cut--
	}
	changed := cut != len(l.epochs)
	l.epochs = slices.Clip(l.epochs[:cut])
	entries := l.epochs
	l.mu.Unlock()
	if !changed {
		return nil
	}
	return l.writeEpochs(entries)
}

// TruncateFullyAndStartAt discards the whole log and restarts it empty at
// offset, which becomes both the start and the end offset (a follower whose
// fetch offset fell out of the leader's range does this). A recovery point
// above offset is lowered first.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.rpmu.Lock()
	defer l.rpmu.Unlock()
	l.smu.Lock()
	defer l.smu.Unlock()
	l.syncedSeg = nil // the synced bytes may be cut
	if err := l.writable(); err != nil {
		return err
	}
	return l.truncateFullyLocked(offset, true)
}

// truncateFullyLocked empties the log and restarts it at offset. With
// lowerRP, a recovery point above offset is lowered first; Open's recovery
// passes false, since its cuts are what the recovery point judges. The
// caller holds amu, rpmu and smu (or is Open).
func (l *Log) truncateFullyLocked(offset int64, lowerRP bool) error {
	l.truncations.Add(1)
	if err := l.persistBeforeCut(offset, lowerRP, 0); err != nil {
		return err
	}
	// The start offset goes first: if we crash part way, recovery sees a
	// start beyond the data and finishes the job.
	if err := l.writeStart(offset); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for j := len(l.segs) - 1; j >= 0; j-- {
		l.segs[j].closeFiles()
		if err := removeSegmentFiles(l.fs, l.dir, l.segs[j].base); err != nil {
			l.segs = l.segs[:j]
			l.failLocked(err)
			return err
		}
	}
	l.segs = nil
	ns, err := l.createSegment(offset)
	if err != nil {
		l.failLocked(err)
		return err
	}
	l.segs = []*segment{ns}
	l.gapsBelow = 0
	l.start.Store(offset)
	l.end.Store(offset)
	l.durable.Store(offset)
	if len(l.epochs) > 0 {
		l.epochs = nil
		return l.writeEpochs(nil)
	}
	return nil
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

// DeleteRecords advances the log start offset to before (KIP-107), removing
// segments that lie wholly below it; it returns the new start offset.
func (l *Log) DeleteRecords(before int64) (int64, error) {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.smu.Lock()
	defer l.smu.Unlock()
	if err := l.writable(); err != nil {
		return l.start.Load(), err
	}
	if before > l.end.Load() || before < 0 {
		return l.start.Load(), fmt.Errorf("%w: %d beyond log end %d", ErrOffsetOutOfRange, before, l.end.Load())
	}
	if before <= l.start.Load() {
		return l.start.Load(), nil
	}
	if err := l.writeStart(before); err != nil {
		return l.start.Load(), err
	}
	l.start.Store(before)
	if _, err := l.deleteBelowStart(); err != nil {
		return before, err
	}
	return before, nil
}

// deleteBelowStart removes the segments (never the active one) that hold
// only offsets below the start offset, and trims the epoch history. The
// start offset must already be persisted.
func (l *Log) deleteBelowStart() (int, error) {
	start := l.start.Load()
	n := 0
	for n < len(l.segs)-1 && l.segs[n+1].base <= start {
		n++
	}
	doomed := slices.Clone(l.segs[:n])
	l.mu.Lock()
	l.segs = slices.Clone(l.segs[n:])
	l.mu.Unlock()
	for _, s := range doomed {
		s.closeFiles()
		if err := removeSegmentFiles(l.fs, l.dir, s.base); err != nil {
			return n, err
		}
	}
	return n, l.trimEpochsFromStart(start)
}

// trimEpochsFromStart drops epoch entries wholly below start and moves the
// start of the one spanning it, as Kafka does, so lookups never answer with
// offsets below the log start.
func (l *Log) trimEpochsFromStart(start int64) error {
	l.mu.Lock()
	i := 0
	for i+1 < len(l.epochs) && l.epochs[i+1].StartOffset <= start {
		i++
	}
	changed := i > 0 || len(l.epochs) > 0 && l.epochs[0].StartOffset < start
	if !changed {
		l.mu.Unlock()
		return nil
	}
	entries := slices.Clone(l.epochs[i:])
	entries[0].StartOffset = max(entries[0].StartOffset, start)
	l.epochs = entries
	l.mu.Unlock()
	return l.writeEpochs(entries)
}

// EnforceRetention deletes the oldest segments (never the active one) whose
// max timestamp is older than the retention time, or while the log would
// stay at or above the retention size without them, and advances the start
// offset past them. It returns how many segments were removed.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.smu.Lock()
	defer l.smu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	retMs, retBytes := l.retentionMs.Load(), l.retentionBytes.Load()
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	n := 0
	for ; n < len(l.segs)-1; n++ {
		s := l.segs[n]
		byTime := retMs >= 0 && s.maxTs < now.UnixMilli()-retMs
		bySize := retBytes >= 0 && total-s.size >= retBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
	}
	if n == 0 {
		return 0, nil
	}
	if newStart := l.segs[n].base; newStart > l.start.Load() {
		if err := l.writeStart(newStart); err != nil {
			return 0, err
		}
		l.start.Store(newStart)
	}
	return l.deleteBelowStart()
}

// LatestEpoch is the newest leader epoch in the history, or -1.
func (l *Log) LatestEpoch() int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.epochs) == 0 {
		return -1
	}
	return l.epochs[len(l.epochs)-1].Epoch
}

// EpochStartOffset returns the first offset of epoch, if the history has it.
func (l *Log) EpochStartOffset(epoch int32) (int64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, e := range l.epochs {
		if e.Epoch == epoch {
			return e.StartOffset, true
		}
	}
	return 0, false
}

// EpochHistory returns a copy of the epoch history, oldest first.
func (l *Log) EpochHistory() []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.epochs)
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch (KIP-101, KIP-279): the
// largest known epoch <= epoch, and its end offset, which is the start
// offset of the next epoch or the log end offset for the latest. When epoch
// is older than every known epoch (or the history is empty) it returns
// -1, -1.
func (l *Log) EndOffsetForEpoch(epoch int32) (foundEpoch int32, endOffset int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := sort.Search(len(l.epochs), func(i int) bool { return l.epochs[i].Epoch > epoch }) - 1
	if i < 0 {
		return -1, -1
	}
	if i == len(l.epochs)-1 {
		return l.epochs[i].Epoch, l.end.Load()
	}
	return l.epochs[i].Epoch, l.epochs[i+1].StartOffset
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
		errs = append(errs, l.active().log.Sync())
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
