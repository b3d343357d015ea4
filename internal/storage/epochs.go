// The leader epoch history (leader-epoch-checkpoint.json): reading and
// writing it, the queries replication asks of it, and cutting it when the
// log is truncated or its start advances.

package storage

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sort"

	"github.com/moonmq/moonmq/internal/vfs"
)

// EpochEntry records that leader epoch Epoch's first offset is StartOffset.
type EpochEntry struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"startOffset"`
}

type epochFile struct {
	Version int          `json:"version"`
	Entries []EpochEntry `json:"entries"`
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
