// The recovery point (recovery-point.json): the offset below which every
// record was durable, which tells Open's recovery whether what it removed
// had been durable, and how far back the active segment may hold the
// offset gaps that compaction leaves.

package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/moonmq/moonmq/internal/vfs"
)

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
	// when a truncation made a rolled segment the active one, or when a
	// follower copies batches across the gaps its leader's compaction left
	// (AllowGaps); this is written before such a cut or append. Omitted
	// when 0.
	GapsBelow int64 `json:"gapsBelow,omitempty"`
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
	b := encodeRecoveryPoint(offset, gaps)
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, recoveryFileName), b); err != nil {
		return err
	}
	l.rpKnown, l.rpOffset, l.rpGaps = true, offset, gaps
	return nil
}

func encodeRecoveryPoint(offset, gaps int64) []byte {
	b, _ := json.Marshal(recoveryFile{Version: 1, Offset: offset, GapsBelow: gaps})
	return b
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
	offset, gaps, due, err := l.checkpointDueLocked()
	if err != nil || !due {
		return err
	}
	return l.writeRecoveryPoint(offset, gaps)
}

// checkpointDueLocked says what a checkpoint would write, and whether it
// would change the file; the caller holds rpmu.
func (l *Log) checkpointDueLocked() (offset, gaps int64, due bool, err error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, 0, false, ErrClosed
	}
	activeBase := l.active().base
	l.mu.RUnlock()
	offset = l.durable.Load()
	if l.rpKnown {
		offset = max(offset, l.rpOffset)
	}
	gaps = l.gapsBelow
	if gaps <= activeBase {
		// The segment that had the gaps has been rolled.
		gaps = 0
	}
	due = !l.rpKnown || offset != l.rpOffset || gaps != l.rpGaps
	return offset, gaps, due, nil
}
