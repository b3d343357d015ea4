// The leader epoch history (leader-epoch-checkpoint.json): reading and
// writing it, the queries replication asks of it, and cutting it when the
// log is truncated or its start advances.
//
// The file is the JSON document writeEpochs writes whole and atomically
// (a new temporary file renamed over the old: a truncation, a trim, a new
// log), followed by the epochs started since, each appended as a line of
// its own: a newline, then the entry's JSON. A new epoch, the first
// append of every partition after a failover, so costs one write and one
// fsync of the file (or a share of one volume sync, Volume.StartEpochs)
// instead of a new file written, synced, renamed over the old one and its
// directory synced: creating and replacing files is what the disks here
// are slowest at. A crash can leave the last line torn; no proper prefix
// of a JSON object is one, so reading drops it (and rewrites the file
// without it). An older MoonMQ cannot read a file with appended lines and
// treats the history as lost.

package storage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
	// The document is the file's first JSON value, read as a value rather
	// than up to the first newline: a filesystem that makes an append's
	// new size durable before its bytes leaves zeros where the newline
	// was, and that damage belongs to the appended tail, not the document.
	// A file that does not start with one is a new log's, empty before
	// its first epoch was appended.
	var ef epochFile
	rest := b
	if len(b) > 0 && b[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(b))
		if err = dec.Decode(&ef); err == nil {
			rest = b[dec.InputOffset():]
			for i, e := range ef.Entries {
				if i > 0 && !epochFollows(ef.Entries[i-1], e) {
					err = errors.New("entries out of order")
					break
				}
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
	entries := ef.Entries
	torn := false
	for line := 1; len(rest) > 0; line++ {
		// Each appended entry is a newline and a JSON object. Entries are
		// decoded as values, not split at newlines, for the reason above:
		// zeros in place of a later append's newline must not cost the
		// whole entry before them.
		var e EpochEntry
		var n int
		if rest[0] != '\n' {
			err = errors.New("no newline before the entry")
		} else if e, n, err = decodeEpochEntry(rest[1:]); err == nil && len(entries) > 0 && !epochFollows(entries[len(entries)-1], e) {
			err = errors.New("out of order")
		}
		if err != nil {
			// A crash tore the last append (or the file is damaged from
			// there): the entries before it stand.
			l.logger.Warn("dropping the end of the leader epoch history", "file", epochFileName,
				"appended entry", line, "err", err)
			torn = true
			break
		}
		entries = append(entries, e)
		rest = rest[1+n:]
	}
	l.epochs = entries
	l.epochsOnDisk = true
	if torn {
		// Rewritten without the damaged end, so that later appends follow
		// a whole line.
		l.rewriteEpochsAtOpen()
	}
	return nil
}

// rewriteEpochsAtOpen writes the history whole after Open changed it. A
// failure (a disk full after the crash) does not stop the log from
// opening: a history not on disk whole is written before the next append
// (appendable), and until then the file's extra entries lie at or beyond
// the log's end, where the next Open drops them again.
func (l *Log) rewriteEpochsAtOpen() {
	if err := l.writeEpochs(l.epochs); err != nil {
		l.logger.Warn("cannot rewrite the leader epoch history; it is written before the next append",
			"file", epochFileName, "err", err)
	}
}

// epochFollows reports whether e may follow prev in a history.
func epochFollows(prev, e EpochEntry) bool {
	return e.Epoch > prev.Epoch && e.StartOffset >= prev.StartOffset
}

// decodeEpochEntry decodes the appended entry b starts with, which must
// hold both fields, and reports how many bytes it took.
func decodeEpochEntry(b []byte) (EpochEntry, int, error) {
	var e struct {
		Epoch       *int32 `json:"epoch"`
		StartOffset *int64 `json:"startOffset"`
	}
	if len(b) == 0 || b[0] != '{' {
		return EpochEntry{}, 0, errors.New("no entry after the newline")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&e); err != nil {
		return EpochEntry{}, 0, err
	}
	n := int(dec.InputOffset())
	if e.Epoch == nil || e.StartOffset == nil {
		return EpochEntry{}, 0, fmt.Errorf("incomplete entry %q", b[:n])
	}
	return EpochEntry{Epoch: *e.Epoch, StartOffset: *e.StartOffset}, n, nil
}

// writeEpochs replaces the history file with entries, synced. After a
// failure the file may be the old history, with or without lines appended
// since, or the new one not yet durable: the history is then not on disk,
// and appendable writes it again before any record is appended.
func (l *Log) writeEpochs(entries []EpochEntry) error {
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, epochFileName), encodeEpochs(entries)); err != nil {
		l.epochsOnDisk = false
		return err
	}
	l.epochsOnDisk = true
	l.observeEpochs(entries)
	return nil
}

// appendEpoch appends e to the history file, synced when sync is set
// (otherwise the caller's volume sync makes it durable). The file must
// hold the history whole, which appendable sees to before every append
// and epoch start; the caller holds amu.
func (l *Log) appendEpoch(e EpochEntry, sync bool) error {
	if !l.epochsOnDisk {
		return errors.New("storage: leader epoch history not on disk whole; appendable writes it first")
	}
	f, err := l.fs.OpenRW(filepath.Join(l.dir, epochFileName))
	if err != nil {
		return err
	}
	line, _ := json.Marshal(e)
	_, err = f.Write(append([]byte{'\n'}, line...))
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Part of the line may be in the file, or all of it undurable:
		// the history is written whole before the next append.
		l.epochsOnDisk = false
	}
	return err
}

func encodeEpochs(entries []EpochEntry) []byte {
	b, _ := json.Marshal(epochFile{Version: 1, Entries: entries})
	return b
}

// observeEpochs tells the observer that entries are now the durable
// history.
func (l *Log) observeEpochs(entries []EpochEntry) {
	if fn := l.epochObs.Load(); fn != nil {
		(*fn)(slices.Clone(entries))
	}
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
