// Package state owns the local copy of every store partition: a Pebble
// engine per backend (on disk, or on Pebble's in-memory filesystem for
// in-memory stores), the key layout that puts many store partitions in one
// engine, the per-task write buffer that is applied only after Kafka
// accepted the transaction, and the applied changelog offset of each store
// partition, written in the same atomic batch as the data it describes.
//
// The changelog topic is the durable log, so the engine runs without a
// write-ahead log: after a crash it reopens at its last flush, a state that
// is always a prefix of the changelog up to the offsets stored with it.
// Flush is the checkpoint.
//
// It does not talk to Kafka: the runtime decides when a buffer is applied
// and what offsets it carries.
package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Data keys are dataTag | store | 0 | partition (4 bytes) | key; offset
// keys are offsetTag | store | 0 | partition. Store names hold no NUL.
const (
	dataTag   = 'd'
	offsetTag = 'o'
)

// Engine is one Pebble database holding many store partitions.
type Engine struct {
	db     *pebble.DB
	memory bool
	dir    string
}

// OpenDisk opens (or creates) the engine in dir.
func OpenDisk(dir string) (*Engine, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := pebble.NewCache(64 << 20)
	// Open takes its own reference to the cache; ours ends here.
	defer c.Unref()
	db, err := pebble.Open(dir, diskOptions(c))
	if err != nil {
		return nil, fmt.Errorf("open state store %s: %w (if it is damaged, remove the directory: it is rebuilt from the changelog)", dir, err)
	}
	return &Engine{db: db, dir: dir}, nil
}

// diskOptions: no WAL (the changelog is the log); a block cache and
// memtables larger than Pebble's defaults (8 MB, 4 MB), because every
// processed record reads its key first and the benchmark's profile spent
// a quarter of its time in reads that missed the cache.
func diskOptions(c *pebble.Cache) *pebble.Options {
	return &pebble.Options{DisableWAL: true, Logger: quietLogger{}, Cache: c, MemTableSize: 16 << 20}
}

// OpenMemory opens an engine that lives in memory only; it starts empty
// every time, so its partitions restore from the changelog's start.
func OpenMemory() (*Engine, error) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), DisableWAL: true, Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	return &Engine{db: db, memory: true}, nil
}

// Memory reports whether the engine forgets everything on close.
func (e *Engine) Memory() bool { return e.memory }

// Close closes the engine without flushing: what was not flushed is
// replayed from the changelog at the next start.
func (e *Engine) Close() error { return e.db.Close() }

// Flush writes everything applied so far to disk, with its offsets: the
// checkpoint a restart resumes from. midway, when set, is called while the
// flush runs (the kill tests die there).
func (e *Engine) Flush(midway ...func()) error {
	if e.memory {
		return nil
	}
	done, err := e.db.AsyncFlush()
	if err != nil {
		return err
	}
	for _, f := range midway {
		f()
	}
	<-done
	return nil
}

// DiskUsage is the engine's size on disk in bytes.
func (e *Engine) DiskUsage() uint64 {
	return e.db.Metrics().DiskSpaceUsage()
}

// Partition is one store's partition inside an engine.
type Partition struct {
	e      *Engine
	Store  string
	Part   int32
	prefix []byte // data key prefix
	offKey []byte
}

// Partition returns the handle of store's partition p.
func (e *Engine) Partition(store string, p int32) *Partition {
	mk := func(tag byte) []byte {
		k := make([]byte, 0, len(store)+6)
		k = append(k, tag)
		k = append(k, store...)
		k = append(k, 0)
		return binary.BigEndian.AppendUint32(k, uint32(p))
	}
	return &Partition{e: e, Store: store, Part: p, prefix: mk(dataTag), offKey: mk(offsetTag)}
}

// Engine is the engine holding the partition.
func (p *Partition) Engine() *Engine { return p.e }

func (p *Partition) key(k []byte) []byte {
	out := make([]byte, 0, len(p.prefix)+len(k))
	return append(append(out, p.prefix...), k...)
}

// upper returns the smallest key after every key with prefix.
func upper(prefix []byte) []byte {
	u := bytes.Clone(prefix)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] < 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	return nil
}

// Offset is the last changelog offset applied to the partition; ok is
// false when none was (a new or wiped partition).
func (p *Partition) Offset() (off int64, ok bool, err error) {
	v, c, err := p.e.db.Get(p.offKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return -1, false, nil
	}
	if err != nil {
		return -1, false, err
	}
	defer c.Close()
	if len(v) != 8 {
		return -1, false, fmt.Errorf("store %s partition %d: damaged offset record", p.Store, p.Part)
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// Empty reports whether the partition holds no data.
func (p *Partition) Empty() (bool, error) {
	it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: p.prefix, UpperBound: upper(p.prefix)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// Wipe removes the partition's data and offset, so it restores from the
// changelog's start.
func (p *Partition) Wipe() error {
	b := p.e.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(p.prefix, upper(p.prefix), nil); err != nil {
		return err
	}
	if err := b.Delete(p.offKey, nil); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// Get reads the committed value of key (never a buffered write).
func (p *Partition) Get(key []byte) ([]byte, bool, error) {
	return get(p.e.db, p.key(key))
}

type getter interface {
	Get([]byte) ([]byte, io.Closer, error)
}

func get(g getter, k []byte) ([]byte, bool, error) {
	v, c, err := g.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	c.Close()
	return out, true, nil
}

// Scan calls fn for each committed key in [lower, upper) in order (nil
// bounds are open) until fn returns false.
func (p *Partition) Scan(lower, upperK []byte, fn func(k, v []byte) bool) error {
	return scan(p.e.db, p, lower, upperK, false, fn)
}

// DeleteRange removes the committed keys of the partition in [lower,
// upper) (nil bounds are open) at once, outside any transaction. It does
// not move the partition's offset: it is meant for data that a function of
// the restored state says is dead (expired window segments after a
// restore), so doing it again, or not at all before a crash, changes
// nothing a reader may rely on.
func (p *Partition) DeleteRange(lower, upperK []byte) error {
	lo, hi := p.bounds(lower, upperK)
	return p.e.db.DeleteRange(lo, hi, pebble.NoSync)
}

// bounds turns a range of store keys into engine keys inside the
// partition.
func (p *Partition) bounds(lower, upperK []byte) (lo, hi []byte) {
	lo, hi = p.prefix, upper(p.prefix)
	if lower != nil {
		lo = p.key(lower)
	}
	if upperK != nil {
		hi = p.key(upperK)
	}
	return lo, hi
}

type iterable interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func scan(src iterable, p *Partition, lower, upperK []byte, reverse bool, fn func(k, v []byte) bool) error {
	lo, hi := p.bounds(lower, upperK)
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	n := len(p.prefix)
	if reverse {
		for ok := it.Last(); ok; ok = it.Prev() {
			if !fn(it.Key()[n:], it.Value()) {
				break
			}
		}
	} else {
		for ok := it.First(); ok; ok = it.Next() {
			if !fn(it.Key()[n:], it.Value()) {
				break
			}
		}
	}
	return it.Error()
}

// PrefixEnd is the exclusive upper bound of the keys starting with prefix
// (nil when there is none).
func PrefixEnd(prefix []byte) []byte { return upper(prefix) }

// Restorer applies changelog records to partitions during restore, in
// batches, each carrying the offset it reaches.
type Restorer struct {
	e *Engine
	b *pebble.Batch
	n int
	// offsets reached per partition, written once per batch at Commit.
	offsets map[*Partition]int64
}

// NewRestorer starts a restore batch on e.
func (e *Engine) NewRestorer() *Restorer {
	return &Restorer{e: e, b: e.db.NewBatch(), offsets: map[*Partition]int64{}}
}

// Apply records one changelog record (value nil: a tombstone) at offset.
func (r *Restorer) Apply(p *Partition, key, value []byte, offset int64) error {
	var err error
	if value == nil {
		err = r.b.Delete(p.key(key), nil)
	} else {
		err = r.b.Set(p.key(key), value, nil)
	}
	if err != nil {
		return err
	}
	r.n++
	r.offsets[p] = offset
	return nil
}

// SetOffset records that p has reached offset without a data record (a
// transaction marker or a compacted gap at the end).
func (r *Restorer) SetOffset(p *Partition, offset int64) error {
	r.offsets[p] = offset
	return nil
}

// Pending is the number of records in the current batch.
func (r *Restorer) Pending() int { return r.n }

// Commit applies the batch and starts a new one.
func (r *Restorer) Commit() error {
	for p, off := range r.offsets {
		if err := r.b.Set(p.offKey, binary.BigEndian.AppendUint64(nil, uint64(off)), nil); err != nil {
			return err
		}
	}
	clear(r.offsets)
	if err := r.b.Commit(pebble.NoSync); err != nil {
		return err
	}
	r.b.Close()
	r.b, r.n = r.e.db.NewBatch(), 0
	return nil
}

// Close discards what was not committed.
func (r *Restorer) Close() { r.b.Close() }

// Txn buffers one task's writes for one Kafka transaction. Reads through it
// see its own writes over the committed state. Apply makes them visible;
// Discard drops them (an aborted or fenced transaction).
//
// A Txn starts unindexed: it keeps only the latest write per key, in a
// map, which costs far less than the skiplist of an indexed batch (a store
// update on the hot path is a read and a write of the same key), and Apply
// hands Pebble one write per key however often the key changed. The first
// range read over pending writes, or range deletion, moves the writes into
// an indexed batch for the rest of the transaction, so that Pebble merges
// them with the committed state in key order.
type Txn struct {
	e       *Engine
	b       *pebble.Batch
	indexed bool
	latest  map[string][]byte // unindexed: the latest write per full key (nil: deleted)
	offsets map[*Partition]int64
	writes  int
}

// NewTxn starts an empty buffer.
func (e *Engine) NewTxn() *Txn {
	return &Txn{e: e, b: e.db.NewBatch(), latest: map[string][]byte{}, offsets: map[*Partition]int64{}}
}

// Get reads key, seeing this buffer's writes.
func (t *Txn) Get(p *Partition, key []byte) ([]byte, bool, error) {
	fk := p.key(key)
	if t.indexed {
		return get(t.b, fk)
	}
	if v, ok := t.latest[string(fk)]; ok {
		return v, v != nil, nil
	}
	return get(t.e.db, fk)
}

// Put buffers a write. The Txn keeps value until Apply or Discard: the
// caller must not change it.
func (t *Txn) Put(p *Partition, key, value []byte) error {
	t.writes++
	fk := p.key(key)
	if !t.indexed {
		t.latest[string(fk)] = value
		return nil
	}
	return t.b.Set(fk, value, nil)
}

// Delete buffers a deletion.
func (t *Txn) Delete(p *Partition, key []byte) error {
	t.writes++
	fk := p.key(key)
	if !t.indexed {
		t.latest[string(fk)] = nil
		return nil
	}
	return t.b.Delete(fk, nil)
}

// DeleteRange buffers the deletion of every key of p in [lower, upper)
// (nil bounds are open). Reads through the buffer stop seeing them at
// once; the committed state loses them at Apply. Window and session stores
// drop expired segments with it.
func (t *Txn) DeleteRange(p *Partition, lower, upperK []byte) error {
	if err := t.index(); err != nil {
		return err
	}
	lo, hi := p.bounds(lower, upperK)
	t.writes++
	return t.b.DeleteRange(lo, hi, nil)
}

// Scan iterates [lower, upper) over the buffer and the committed state.
func (t *Txn) Scan(p *Partition, lower, upperK []byte, reverse bool, fn func(k, v []byte) bool) error {
	if !t.indexed && len(t.latest) == 0 {
		return scan(t.e.db, p, lower, upperK, reverse, fn)
	}
	if err := t.index(); err != nil {
		return err
	}
	return scan(t.b, p, lower, upperK, reverse, fn)
}

// index moves the buffered writes into an indexed batch.
func (t *Txn) index() error {
	if t.indexed {
		return nil
	}
	ib := t.e.db.NewIndexedBatch()
	if err := writeLatest(ib, t.latest); err != nil {
		ib.Close()
		return err
	}
	t.b.Close()
	t.b, t.indexed = ib, true
	clear(t.latest)
	return nil
}

func writeLatest(b *pebble.Batch, latest map[string][]byte) error {
	for k, v := range latest {
		var err error
		if v == nil {
			err = b.Delete([]byte(k), nil)
		} else {
			err = b.Set([]byte(k), v, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// SetOffset records the changelog offset the buffer's writes to p reach.
func (t *Txn) SetOffset(p *Partition, offset int64) {
	if cur, ok := t.offsets[p]; !ok || offset > cur {
		t.offsets[p] = offset
	}
}

// Writes is the number of writes buffered.
func (t *Txn) Writes() int { return t.writes }

// Apply writes the buffer and its offsets atomically and starts a new,
// empty buffer.
func (t *Txn) Apply() error {
	if !t.indexed {
		if err := writeLatest(t.b, t.latest); err != nil {
			return err
		}
	}
	for p, off := range t.offsets {
		if err := t.b.Set(p.offKey, binary.BigEndian.AppendUint64(nil, uint64(off)), nil); err != nil {
			return err
		}
	}
	if !t.b.Empty() {
		if err := t.b.Commit(pebble.NoSync); err != nil {
			return err
		}
	}
	t.reset()
	return nil
}

// Discard drops the buffer.
func (t *Txn) Discard() { t.reset() }

func (t *Txn) reset() {
	t.b.Close()
	t.b, t.indexed = t.e.db.NewBatch(), false
	clear(t.latest)
	clear(t.offsets)
	t.writes = 0
}

// Close releases the buffer.
func (t *Txn) Close() { t.b.Close() }

// Dir is where a disk engine lives.
func (e *Engine) Dir() string { return e.dir }

// DiskDir is the engine directory of an application under the state dir.
func DiskDir(stateDir, appID string) string { return filepath.Join(stateDir, appID, "pebble") }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
