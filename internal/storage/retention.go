// Retention and the log start offset (log-start-offset.json): deleting
// the oldest segments by time or size, DeleteRecords, and removing the
// segments wholly below the start offset.

package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/internal/vfs"
)

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
		return l.advanceStart(newStart)
	}
	return l.deleteBelowStart()
}

// advanceStart makes start the log start offset and removes the segments
// wholly below it. The start is persisted first, unless the disk is full:
// then the segments go first, which frees the space to persist it. A
// crash in between restarts the log at its first remaining segment's
// base, at or below start: records the caller meant to drop may come back
// (Kafka's own start-offset checkpoint lags the same way), none it kept
// is lost. The caller holds amu and smu.
func (l *Log) advanceStart(start int64) (int, error) {
	werr := l.writeStart(start)
	if werr != nil && !isSpaceError(werr) {
		return 0, werr
	}
	l.start.Store(start)
	n, err := l.deleteBelowStart()
	if werr != nil {
		if werr = l.writeStart(start); werr != nil {
			return n, fmt.Errorf("persist log start offset %d: %w", start, werr)
		}
	}
	return n, err
}

// isSpaceError reports a write that failed for want of space.
func isSpaceError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
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
	if _, err := l.advanceStart(before); err != nil {
		return l.start.Load(), err
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

type startFile struct {
	LogStartOffset int64 `json:"logStartOffset"`
}

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
