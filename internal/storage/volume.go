package storage

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/moonmq/moonmq/internal/vfs"
)

// Volume syncs the logs of one filesystem together: one volume sync
// (vfs.Volume, syncfs(2)) instead of one fsync per log, which is what a
// group commit over thousands of dirty partitions needs (see Sync).
type Volume struct {
	v  vfs.Volume
	id uint64

	// mu serializes the volume's syncs and guards failed. syncfs(2)
	// reports a writeback error once per descriptor, to whichever sync
	// checks first, so a failure seen by one sync must fail every later
	// one (failed is sticky, as a Log's is after a failed fsync), and two
	// syncs may not run at once: the one that did not hear of the error
	// could return success for data that was lost.
	mu     sync.Mutex
	failed error
}

// sync is one volume sync; after a failure every later one fails too.
func (v *Volume) sync() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed != nil {
		return v.failed
	}
	v.failed = v.v.Sync()
	return v.failed
}

// OpenVolume opens the volume holding dir, which must exist. It fails with
// vfs.ErrNoVolume when fs cannot sync a volume whole.
func OpenVolume(fs vfs.FS, dir string) (*Volume, error) {
	v, id, err := vfs.OpenVolume(fs, dir)
	if err != nil {
		return nil, err
	}
	return &Volume{v: v, id: id}, nil
}

// Settle syncs the volume for no log in particular, right after it is
// opened: a writeback error from before the volume was opened (another
// program's, or a past run's) is reported once, here, and not to the
// first Sync, which would fail logs it has nothing to do with.
func (v *Volume) Settle() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.v.Sync()
}

// Close releases the volume.
func (v *Volume) Close() error { return v.v.Close() }

// SyncResult is one log's outcome of Volume.Sync: what its Log.Sync would
// have returned.
type SyncResult struct {
	Durable int64
	Err     error
}

// Sync makes every log durable up to its end, as a Log.Sync of each would,
// and returns each log's result in order. The logs on the volume share one
// volume sync; any other log is synced on its own. If the volume sync
// fails, every log it covered fails as after a failed fsync: the volume
// does not say whose data was lost.
//
// While the volume syncs, it holds the sync lock of each log it covers,
// as Log.Sync holds its one: nothing closes, truncates or trims a log
// under a sync in flight. Appends go on.
func (v *Volume) Sync(logs []*Log) []SyncResult {
	res := make([]SyncResult, len(logs))
	on, rest, twins := v.split(logs)
	for _, i := range rest {
		res[i].Durable, res[i].Err = logs[i].Sync()
	}
	type due struct {
		i  int
		sp syncPoint
	}
	var todo []due
	for _, i := range on {
		l := logs[i]
		l.smu.Lock()
		defer l.smu.Unlock()
		sp, err := l.syncPointLocked()
		if err != nil || sp.seg == nil {
			res[i] = SyncResult{l.durable.Load(), err}
			continue
		}
		if err := sp.seg.flushTail(); err != nil {
			l.fail(err)
			res[i] = SyncResult{l.durable.Load(), err}
			continue
		}
		sp.mark = vfs.SyncMark(sp.seg.log)
		todo = append(todo, due{i, sp})
	}
	if len(todo) > 0 {
		err := v.sync()
		for _, d := range todo {
			l := logs[d.i]
			if err != nil {
				l.fail(err)
				res[d.i] = SyncResult{l.durable.Load(), err}
				continue
			}
			vfs.SyncedTo(d.sp.seg.log, d.sp.mark)
			res[d.i] = SyncResult{l.syncedLocked(d.sp), nil}
		}
	}
	for _, t := range twins {
		res[t[0]] = res[t[1]]
	}
	return res
}

// split sorts out the logs v covers, in the one order in which callers
// holding several logs' locks take them (by directory), so that two such
// callers cannot deadlock. rest are the logs on other filesystems; a log
// listed more than once is in on once, and twins pairs each repeat's
// index with the one in on.
func (v *Volume) split(logs []*Log) (on, rest []int, twins [][2]int) {
	var all []int
	for i, l := range logs {
		if l.onVolume && l.volume == v.id {
			all = append(all, i)
		} else {
			rest = append(rest, i)
		}
	}
	slices.SortFunc(all, func(a, b int) int { return strings.Compare(logs[a].dir, logs[b].dir) })
	for _, i := range all {
		if n := len(on); n > 0 && logs[on[n-1]] == logs[i] {
			twins = append(twins, [2]int{i, on[n-1]})
			continue
		}
		on = append(on, i)
	}
	return on, rest, twins
}

// CheckpointRecoveryPoints is Log.CheckpointRecoveryPoint for many logs,
// returning each one's error in order, at the cost of one volume sync
// instead of two fsyncs per file: with thousands of partitions taking
// writes, their checkpoints every few seconds were most of the broker's
// disk time.
//
// Each due file is written beside its name, the volume synced, and the
// file renamed over the old one. The directory is not synced: the
// checkpoint only ever raises the recovery point (or narrows where gaps
// are allowed), so a crash that loses the rename leaves the older file,
// whose lower point is still true. What must be on disk before a cut
// (Log.persistBeforeCut) is still written and synced on its own.
func (v *Volume) CheckpointRecoveryPoints(logs []*Log) []error {
	errs := make([]error, len(logs))
	on, rest, twins := v.split(logs)
	for _, i := range rest {
		errs[i] = logs[i].CheckpointRecoveryPoint()
	}
	type due struct {
		i            int
		offset, gaps int64
		tmp, name    string
	}
	var todo []due
	for _, i := range on {
		l := logs[i]
		l.rpmu.Lock()
		defer l.rpmu.Unlock()
		offset, gaps, ok, err := l.checkpointDueLocked()
		if err != nil || !ok {
			errs[i] = err
			continue
		}
		name := filepath.Join(l.dir, recoveryFileName)
		d := due{i: i, offset: offset, gaps: gaps, tmp: name + ".tmp", name: name}
		if errs[i] = writeFile(l.fs, d.tmp, encodeRecoveryPoint(offset, gaps)); errs[i] == nil {
			todo = append(todo, d)
		}
	}
	if len(todo) > 0 {
		err := v.sync()
		for _, d := range todo {
			l := logs[d.i]
			if errs[d.i] = err; err == nil {
				errs[d.i] = l.fs.Rename(d.tmp, d.name)
			}
			if errs[d.i] == nil {
				l.rpKnown, l.rpOffset, l.rpGaps = true, d.offset, d.gaps
				continue
			}
			_ = l.fs.Remove(d.tmp) // best effort: Open removes leftovers too
		}
	}
	for _, t := range twins {
		errs[t[0]] = errs[t[1]]
	}
	return errs
}

// EpochStart asks StartEpochs to persist that leader epoch Epoch starts
// at offset At of Log, as Log.StartEpoch(Epoch, At) would.
type EpochStart struct {
	Log   *Log
	Epoch int32
	At    int64
}

// StartEpochs is Log.StartEpoch for many logs, returning each one's error
// in order, at the cost of one volume sync in all instead of an fsync per
// log: after a failover every partition's first append starts the new
// epoch, on the leader and again on each follower, and with a thousand
// partitions those fsyncs were most of the failover's time.
//
// Each due epoch is appended to its log's history file (epochs.go) and the
// volume synced once: as with Log.StartEpoch, an epoch is in the durable
// history before any batch of it can be acknowledged, whichever sync later
// makes the batch durable. A log without a history file to append to has
// its history written whole, as StartEpoch does. Each log's append lock
// is held throughout (taken in the one order, by directory), so no
// append, truncation or retention changes a history meanwhile.
func (v *Volume) StartEpochs(starts []EpochStart) []error {
	errs := make([]error, len(starts))
	logs := make([]*Log, len(starts))
	for i, s := range starts {
		logs[i] = s.Log
	}
	on, rest, twins := v.split(logs)
	for _, i := range rest {
		errs[i] = starts[i].Log.StartEpoch(starts[i].Epoch, starts[i].At)
	}
	type due struct {
		i       int
		entries []EpochEntry
	}
	var todo []due
	for _, i := range on {
		s := starts[i]
		l := s.Log
		l.amu.Lock()
		defer l.amu.Unlock()
		ok, err := l.epochStartDueLocked(s.Epoch, s.At)
		if !ok {
			errs[i] = err
			continue
		}
		e := EpochEntry{Epoch: s.Epoch, StartOffset: s.At}
		if err := l.appendEpoch(e, false); err != nil {
			errs[i] = err
			continue
		}
		todo = append(todo, due{i, append(slices.Clip(l.EpochHistory()), e)})
	}
	if len(todo) == 0 {
		return errs
	}
	err := v.sync()
	for _, d := range todo {
		l := starts[d.i].Log
		if err != nil {
			// The volume's writeback failed: whose bytes were lost is
			// unknown, so each log it covered fails as Volume.Sync
			// fails them.
			l.fail(err)
			l.epochsOnDisk = false // the appended line may be torn
			errs[d.i] = err
			continue
		}
		l.observeEpochs(d.entries)
		l.mu.Lock()
		l.epochs = d.entries
		l.mu.Unlock()
	}
	for _, t := range twins {
		errs[t[0]] = errs[t[1]]
	}
	return errs
}

// writeFile creates name with data, unsynced.
func writeFile(fs vfs.FS, name string, data []byte) error {
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
