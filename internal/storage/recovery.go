// Opening a log and recovering it: the scan of the active segment (and,
// with Options.VerifyAll, of every rolled one) that cuts a torn or damaged
// tail, the rebuild of missing or inconsistent indexes, and the
// RecoveryReport saying what was removed.

package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moonmq/moonmq/internal/vfs"
)

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
		if opts.Pool != nil {
			opts.FS = opts.Pool.FS()
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.IndexIntervalBytes <= 0 {
		opts.IndexIntervalBytes = defaultIndexBytes
	}
	l := &Log{dir: dir, fs: opts.FS, pool: opts.Pool, space: opts.Space, logger: opts.Logger.With("dir", dir), index: opts.IndexIntervalBytes}
	l.Reconfigure(opts.SegmentBytes, opts.RetentionMs, opts.RetentionBytes)
	if err := l.open(opts.VerifyAll); err != nil {
		for _, s := range l.segs {
			s.closeFiles()
		}
		return nil, err
	}
	return l, nil
}

func (l *Log) open(verifyAll bool) error {
	if err := l.fs.MkdirAll(l.dir); err != nil {
		return err
	}
	if err := l.fs.SyncDir(filepath.Dir(l.dir)); err != nil {
		return err
	}
	if id, err := vfs.VolumeID(l.fs, l.dir); err == nil {
		l.volume, l.onVolume = id, true
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
		f, err := l.openLogFile(base, i == len(bases)-1)
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
			// A new log: its epoch history's file, empty, so that the
			// first epoch is appended to it (epochs.go); the recovery
			// point's write below syncs the directory that holds it.
			if !l.epochsOnDisk && len(l.epochs) == 0 {
				if err := writeFile(l.fs, filepath.Join(l.dir, epochFileName), nil); err != nil {
					return err
				}
				l.epochsOnDisk = true
			}
			// Recording that it has no gaps lets the first recovery
			// check its offsets fully, before any checkpoint.
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
		l.rewriteEpochsAtOpen()
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
	return res, writeIndexFiles(l.fs, l.dir, s.base, "", s.index, s.tindex)
}

// recoverActive validates the last segment, truncates any torn or corrupt
// tail, rebuilds its indexes in memory and fsyncs it so that everything
// left is durable. It never reads the segment's index files, which a crash
// during a roll or an older version may have left, and removes them.
// prevEpoch is the epoch of the last batch before the segment
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
	if res.valid < fileSize && zeros(s.log, res.valid, min(fileSize, res.valid+zeroCheck)) {
		// Space reserved ahead of the appends (Log.reserve), or
		// a write whose data never reached the disk: nothing
		// was written there that could have been acknowledged.
		// The tail is cut either way; the check only keeps the
		// report from calling reserved space lost data.
		l.logger.Debug("cutting the zeros after the active segment's last batch",
			"base", s.base, "validBytes", res.valid, "zeroBytes", fileSize-res.valid)
		if err := s.log.Truncate(res.valid); err != nil {
			return err
		}
	} else if res.valid < fileSize {
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
	removeIndexFiles(l.fs, l.dir, s.base)
	return s.log.Sync()
}

// zeroCheck is how much of the active segment's tail recovery reads to
// tell reserved space from a torn write: reading all of it would read
// every busy partition's reservation on every start after a crash.
const zeroCheck = 64 << 10

// zeros reports whether f holds only zero bytes in [from, to).
func zeros(f vfs.File, from, to int64) bool {
	buf := make([]byte, min(to-from, 64<<10))
	for pos := from; pos < to; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-pos)], pos)
		for _, b := range buf[:n] {
			if b != 0 {
				return false
			}
		}
		if n == 0 || err != nil && !errors.Is(err, io.EOF) {
			return false
		}
		pos += int64(n)
	}
	return true
}

// cutDamaged truncates the log at the first bad batch of rolled segment i,
// which res describes: later segments are removed newest first (so that a
// crash part way leaves a prefix of the log), then the segment is cut and
// becomes the active one, its indexes rebuilt in memory (its index files
// go), all of it fsynced.
func (l *Log) cutDamaged(i int, res scanResult) error {
	s := l.segs[i]
	later := l.segs[i+1:]
	if err := pinFile(s.log); err != nil {
		return err
	}
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
	removeIndexFiles(l.fs, l.dir, s.base)
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
