// Truncation: cutting the log back to an offset, or emptying it and
// restarting it at an offset.

package storage

import (
	"slices"

	"github.com/moonmq/moonmq/internal/recordbatch"
)

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
	sc := newScanner(s, s.size, l.index+recordbatch.HeaderSize)
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
		// Before anything is cut: the segment is about to be written to
		// again, and failing here (out of descriptors) changes nothing.
		if err := pinFile(s.log); err != nil {
			return err
		}
		// A rolled segment becomes the active one, and compaction may
		// have left gaps in it. Finding out would take a scan of the
		// whole segment; the rebuild after the cut does that scan, and
		// the next checkpoint records its exact answer.
		gaps = newEnd
	}
	if err := l.persistBeforeCut(newEnd, true, gaps); err != nil {
		if i < len(l.segs)-1 {
			unpinFile(s.log) // still a rolled segment
		}
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
		// s is the active segment now, and its index files describe what
		// is about to be cut.
		removeIndexFiles(l.fs, l.dir, s.base)
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
// indexes in memory. The caller holds rpmu and mu.
func (l *Log) cutSegment(s *segment, pos int64) error {
	if err := s.flushTail(); err != nil {
		return err
	}
	s.alloc = 0
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
	l.end.Store(s.next)
	if s.next < l.durable.Load() {
		l.durable.Store(s.next)
	}
	return nil
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
