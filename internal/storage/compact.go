package storage

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// cleanedSuffix marks the files of a segment that Compact is rewriting:
// <base>.log.cleaned, <base>.index.cleaned and <base>.timeindex.cleaned.
// Open deletes any it finds.
const cleanedSuffix = ".cleaned"

// DefaultDeleteRetentionMs is Kafka's default delete.retention.ms: how long
// a tombstone stays readable.
const DefaultDeleteRetentionMs = 86400000

// ErrCompactionAborted is returned by Compact when a concurrent truncation
// may have removed records that the pass relied on. Segments already
// swapped stay valid; a later pass starts afresh.
var ErrCompactionAborted = errors.New("storage: compaction aborted by a concurrent truncation")

// CompactOptions configure one Compact pass.
type CompactOptions struct {
	// DeleteRetentionMs: a tombstone (a record with a null value) is
	// removed once its batch's max timestamp is older than this, relative
	// to now. Negative keeps tombstones forever. Kafka's default is
	// DefaultDeleteRetentionMs; the zero value removes them at once.
	DeleteRetentionMs int64
	// MinCompactionLagMs: a closed segment is cleaned only when its max
	// timestamp is at least this old, and cleaning stops at the first
	// segment that is too new (so no record younger than this is
	// removed). Zero or negative disables the check.
	MinCompactionLagMs int64
	// MaxDecompressed caps the decompressed size of one batch
	// (recordbatch.Records); <= 0 selects 256 MiB.
	MaxDecompressed int
	// MaxOffset, when > 0, limits the pass to offsets below it: only
	// records below it supersede older ones, and only segments wholly
	// below it are cleaned. A replicated partition should pass its high
	// watermark, since records above it may still be truncated away
	// after the older records they superseded were removed. <= 0 means
	// the whole log.
	MaxOffset int64
}

// CompactStats describes one Compact pass. The record and byte counts cover
// the closed segments the pass examined.
type CompactStats struct {
	SegmentsExamined  int
	SegmentsRewritten int
	RecordsBefore     int64
	RecordsAfter      int64
	BytesBefore       int64
	BytesAfter        int64
}

// snapSeg is a segment as Compact saw it when the pass started. The file
// handle is captured then, because the segment's fields may be cleared
// concurrently by retention or truncation.
type snapSeg struct {
	s     *segment
	f     io.ReaderAt
	size  int64
	next  int64
	maxTs int64
}

// Compact cleans the log as Kafka does for cleanup.policy=compact. It builds
// a map from every key to the offset of its latest record over the whole
// log (the active segment included, so a key updated there is removed from
// older segments), then rewrites each closed segment keeping only:
//
//   - records whose offset is the latest of their key;
//   - records with a null key;
//   - tombstones, until older than DeleteRetentionMs.
//
// The active segment is never touched. Offsets are preserved: a rewritten
// batch keeps its base offset, its records' offsets, its original
// lastOffsetDelta, partition leader epoch, producer id, epoch and base
// sequence, attributes and codec, so the log gains gaps that readers skip
// (see Read). A batch left with no records is dropped; a segment left with
// no batches stays as an empty file holding a gap. Transactional and
// control batches are kept untouched and do not take part in the key map:
// the log does not know which transactions were aborted, and keeping too
// much is always safe. For the same reason empty batches of idempotent
// producers are not kept for their sequence numbers; the broker's producer
// state snapshots must not rely on finding them in a compacted log.
//
// Compact runs alongside reads and appends: it reads the segments without
// locks (closed segments never change, and it only reads the active one up
// to its size when the pass started), writes each cleaned segment to
// .cleaned files that it fsyncs, and then swaps it in while holding the
// append lock, publishing the new segment to readers atomically; readers
// see the old segment or the new, never a mix. Segments are swapped oldest
// first, each durably before the next, so a tombstone is only ever dropped
// after every older record of its key is durably gone. Concurrent Compact
// calls are serialized.
func (l *Log) Compact(now time.Time, opts CompactOptions) (CompactStats, error) {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	var st CompactStats
	maxDec := opts.MaxDecompressed
	if maxDec <= 0 {
		maxDec = maxDecompressed
	}
	if l.compactUnsynced {
		// Make the renames of the failed pass durable, so that a crash
		// cannot bring back segments from before it.
		if err := l.fs.SyncDir(l.dir); err != nil {
			return st, err
		}
		l.compactUnsynced = false
	}

	// Snapshot under amu, so that the truncation count and the segments
	// agree (Truncate counts itself before changing anything).
	l.amu.Lock()
	if err := l.writable(); err != nil {
		l.amu.Unlock()
		return st, err
	}
	gen := l.truncations.Load()
	l.mu.RLock()
	snap := make([]snapSeg, len(l.segs))
	for i, s := range l.segs {
		snap[i] = snapSeg{s: s, f: tailReader{&s.tail, s.log}, size: s.size, next: s.next, maxTs: s.maxTs}
	}
	end := l.end.Load()
	l.mu.RUnlock()
	l.amu.Unlock()

	limit := end
	if opts.MaxOffset > 0 {
		limit = min(limit, opts.MaxOffset)
	}
	var cleanable []snapSeg
	for _, ss := range snap[:len(snap)-1] {
		if ss.next > limit || opts.MinCompactionLagMs > 0 && ss.maxTs > now.UnixMilli()-opts.MinCompactionLagMs {
			break
		}
		cleanable = append(cleanable, ss)
	}
	if len(cleanable) == 0 {
		return st, nil
	}

	keys := map[string]int64{}
	for _, ss := range snap {
		if ss.s.base >= limit {
			break
		}
		err := forEachBatch(ss.f, ss.size, func(_ int64, h recordbatch.Header, body []byte) (bool, error) {
			if h.BaseOffset >= limit {
				return false, nil
			}
			if h.Control() || h.Transactional() {
				return true, nil
			}
			recs, err := recordbatch.Records(body, maxDec)
			if err != nil {
				return false, fmt.Errorf("storage: compact: batch at offset %d: %w", h.BaseOffset, err)
			}
			for _, r := range recs {
				if r.Key != nil && r.Offset < limit {
					keys[string(r.Key)] = r.Offset
				}
			}
			return true, nil
		})
		if err != nil {
			if skip, err := l.compactErr(err, gen, ss.s); !skip {
				return st, err
			}
			// Retention removed the segment: every older record went
			// with it, so the keys it held need no entry.
		}
	}

	horizon := int64(-1 << 63)
	if opts.DeleteRetentionMs >= 0 {
		horizon = now.UnixMilli() - opts.DeleteRetentionMs
	}
	for _, ss := range cleanable {
		st.SegmentsExamined++
		ns, err := l.cleanSegment(ss, keys, horizon, maxDec, &st)
		if err != nil {
			removeCleaned(l.fs, l.dir, ss.s.base)
			if skip, err := l.compactErr(err, gen, ss.s); !skip {
				return st, err
			}
			continue
		}
		if ns == nil {
			continue
		}
		swapped, err := l.swapCleaned(ss.s, ns, gen)
		if swapped {
			st.SegmentsRewritten++
		}
		if err != nil {
			l.compactUnsynced = true
			return st, err
		}
	}
	return st, nil
}

// compactErr classifies an error met while reading segment s: skip is true
// when s was removed concurrently (by retention or DeleteRecords), so the
// pass goes on without it.
func (l *Log) compactErr(err error, gen int64, s *segment) (skip bool, _ error) {
	if werr := l.writable(); werr != nil {
		return false, werr
	}
	if l.truncations.Load() != gen {
		return false, ErrCompactionAborted
	}
	l.mu.RLock()
	live := slices.Contains(l.segs, s)
	l.mu.RUnlock()
	if !live {
		return true, nil
	}
	return false, err
}

// forEachBatch calls fn with every batch in the first size bytes of f, in
// order, until fn returns false or an error. body is only valid during the
// call. A batch that is torn or fails its CRC is an error wrapping
// ErrCorrupt.
func forEachBatch(f io.ReaderAt, size int64, fn func(pos int64, h recordbatch.Header, body []byte) (bool, error)) error {
	sc := newScanner(f, size, scanBufSize)
	defer sc.release()
	var big []byte
	for pos := int64(0); pos < size; {
		h, err := sc.header(pos)
		if err != nil {
			return err
		}
		n := int64(h.Size())
		var body []byte
		if pos >= sc.bufPos && pos+n <= sc.bufPos+int64(sc.n) {
			body = sc.buf[pos-sc.bufPos : pos-sc.bufPos+n]
		} else {
			if int64(cap(big)) < n {
				big = make([]byte, n)
			}
			body = big[:n]
			if got, err := f.ReadAt(body, pos); got < len(body) {
				return shortRead(err, pos+int64(got))
			}
		}
		// Compaction re-encodes batches under a fresh CRC, which would make
		// damage in them undetectable: a bad batch stops the pass.
		if _, err := recordbatch.Check(body); err != nil {
			return fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, h.BaseOffset, err)
		}
		more, err := fn(pos, h, body)
		if err != nil || !more {
			return err
		}
		pos += n
	}
	return nil
}

// compactSyncEvery is how many bytes of a cleaned segment may be written
// before they are synced.
const compactSyncEvery = 8 << 20

// cleanSegment writes the cleaned copy of ss to .cleaned files and fsyncs
// them. It returns the new segment (its log file open, its indexes in
// memory and on disk), or nil when cleaning would change nothing, in which
// case it writes nothing.
func (l *Log) cleanSegment(ss snapSeg, keys map[string]int64, horizon int64, maxDec int, st *CompactStats) (*segment, error) {
	ns := &segment{base: ss.s.base, next: ss.s.base, maxTs: -1}
	var (
		out    vfs.File
		w      *bufio.Writer
		outPos int64
	)
	fail := func(err error) (*segment, error) {
		if out != nil {
			out.Close()
		}
		return nil, err
	}
	var syncedPos int64
	// emit adds a retained batch (with header h) to the cleaned segment.
	emit := func(h recordbatch.Header, b []byte) error {
		ie, te := ns.plan(outPos, h, l.index)
		ns.apply(outPos, h, ie, te)
		if w != nil {
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		outPos += int64(len(b))
		if w != nil && outPos-syncedPos >= compactSyncEvery {
			// Bounded dirty data: the produce path's volume sync
			// would otherwise write back the whole cleaned segment
			// before it could acknowledge anything.
			if err := w.Flush(); err != nil {
				return err
			}
			if err := out.Sync(); err != nil {
				return err
			}
			syncedPos = outPos
		}
		return nil
	}
	// start begins writing at the first change: the batches before pos are
	// kept verbatim, so they are copied as they are.
	start := func(pos int64) error {
		var err error
		if out, err = l.fs.Create(segName(l.dir, ss.s.base, logSuffix+cleanedSuffix)); err != nil {
			return err
		}
		w = bufio.NewWriterSize(out, 64<<10)
		if _, err := io.Copy(w, io.NewSectionReader(ss.f, 0, pos)); err != nil {
			return err
		}
		return nil
	}
	var keep []recordbatch.Record
	err := forEachBatch(ss.f, ss.size, func(pos int64, h recordbatch.Header, body []byte) (bool, error) {
		st.RecordsBefore += int64(h.RecordsCount)
		st.BytesBefore += int64(len(body))
		if h.Control() || h.Transactional() {
			st.RecordsAfter += int64(h.RecordsCount)
			return true, emit(h, body)
		}
		recs, err := recordbatch.Records(body, maxDec)
		if err != nil {
			return false, fmt.Errorf("storage: compact: batch at offset %d: %w", h.BaseOffset, err)
		}
		keep = keep[:0]
		for _, r := range recs {
			if r.Key != nil {
				latest, ok := keys[string(r.Key)]
				if ok && latest > r.Offset {
					continue // superseded
				}
				if r.Value == nil && h.MaxTimestamp < horizon {
					continue // expired tombstone
				}
			}
			keep = append(keep, r)
		}
		st.RecordsAfter += int64(len(keep))
		if len(keep) == len(recs) {
			return true, emit(h, body)
		}
		if w == nil {
			if err := start(pos); err != nil {
				return false, err
			}
		}
		if len(keep) == 0 {
			return true, nil
		}
		b, err := recordbatch.EncodeWithOffsets(recordbatch.BatchOptions{
			BaseOffset:    h.BaseOffset,
			LeaderEpoch:   h.PartitionLeaderEpoch,
			Codec:         h.Codec(),
			LogAppendTime: h.LogAppendTime(),
			ProducerID:    h.ProducerID,
			ProducerEpoch: h.ProducerEpoch,
			BaseSequence:  h.BaseSequence,
		}, keep, h.LastOffsetDelta)
		if err != nil {
			return false, fmt.Errorf("storage: compact: re-encoding batch at offset %d: %w", h.BaseOffset, err)
		}
		nh, err := recordbatch.ParseHeader(b)
		if err != nil {
			return false, err
		}
		return true, emit(nh, b)
	})
	st.BytesAfter += outPos
	if err != nil {
		return fail(err)
	}
	if w == nil {
		return nil, nil
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	// The offsets after the last kept batch up to the next segment are a
	// gap that still belongs to this segment.
	ns.next = ss.next
	ns.tindex = append(ns.tindex, ns.finishEntry())
	ns.log = out
	if err := writeCleanedIndexes(l.fs, l.dir, ns); err != nil {
		return fail(err)
	}
	return ns, nil
}

// writeCleanedIndexes writes and fsyncs the .cleaned index files of ns.
func writeCleanedIndexes(fs vfs.FS, dir string, ns *segment) error {
	return writeIndexFiles(fs, dir, ns.base, cleanedSuffix, ns.index, ns.tindex)
}

func removeCleaned(fs vfs.FS, dir string, base int64) {
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		_ = fs.Remove(segName(dir, base, suf+cleanedSuffix))
	}
}

// swapCleaned replaces old by its cleaned copy ns, on disk and in memory.
// It reports false (and discards ns) when old is gone or became the active
// segment.
//
// Crash safety. Open trusts a rolled segment's index files when they are
// structurally consistent with the log file (loadIndexes), which an index of
// the other version of the segment could well be: its positions would not
// fall on batch boundaries. So the old and new versions must never be paired
// on disk, whatever subset of unsynced directory changes a crash keeps:
//
//  1. remove the old index files, fsync the directory: from here a crash
//     leaves the old log without indexes, which Open rebuilds;
//  2. rename .log.cleaned over .log, fsync: the new log without indexes,
//     rebuilt likewise; until the fsync either log may survive, each
//     whole (each was fsynced) and each without an index;
//  3. rename the .cleaned indexes into place, fsync: either index may be
//     missing after a crash before the fsync, and is then rebuilt.
//
// Open deletes leftover .cleaned files. Readers use the in-memory indexes
// and the open file handle, so they are unaffected by the renames; the
// in-memory segment is swapped under mu once the new log file carries the
// segment's name.
func (l *Log) swapCleaned(old, ns *segment, gen int64) (bool, error) {
	pinned := false
	discard := func() {
		ns.log.Close()
		removeCleaned(l.fs, l.dir, ns.base)
		if pinned {
			// old stays, rolled (amu is held: nothing made it active).
			unpinFile(old.log)
		}
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	if err := l.writable(); err != nil {
		discard()
		return false, err
	}
	if l.truncations.Load() != gen {
		discard()
		return false, ErrCompactionAborted
	}
	l.mu.RLock()
	i := slices.Index(l.segs, old)
	l.mu.RUnlock()
	if i < 0 || i == len(l.segs)-1 {
		discard()
		return false, nil
	}
	// A pooled descriptor opened again after the rename below would find
	// the new file under old's name, with old's positions: old's stays
	// open until old is closed.
	if err := pinFile(old.log); err != nil {
		discard()
		return false, err
	}
	pinned = true
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if err := l.fs.Remove(segName(l.dir, old.base, suf)); err != nil && !errors.Is(err, errNotExist) {
			discard()
			return false, err
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		discard()
		return false, err
	}
	if err := l.fs.Rename(segName(l.dir, old.base, logSuffix+cleanedSuffix), segName(l.dir, old.base, logSuffix)); err != nil {
		discard()
		return false, err
	}
	// The segment's name now holds the new log, so memory follows at once,
	// whatever fails later.
	name := segName(l.dir, ns.base, logSuffix)
	ns.log = l.adopt(name, ns.log)
	unpinFile(ns.log)
	l.mu.Lock()
	l.segs[i] = ns
	l.mu.Unlock()
	old.closeFiles()
	if err := l.fs.SyncDir(l.dir); err != nil {
		removeCleaned(l.fs, l.dir, ns.base)
		return true, err
	}
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if err := l.fs.Rename(segName(l.dir, ns.base, suf+cleanedSuffix), segName(l.dir, ns.base, suf)); err != nil {
			removeCleaned(l.fs, l.dir, ns.base)
			return true, err
		}
	}
	return true, l.fs.SyncDir(l.dir)
}
