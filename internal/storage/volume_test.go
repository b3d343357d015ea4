package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
)

// noVolumeFS hides MemFS's volume: its logs are synced one by one.
type noVolumeFS struct{ vfs.FS }

func openAt(t *testing.T, fs vfs.FS, dir string) *Log {
	t.Helper()
	l, err := Open(dir, Options{FS: fs, Logger: quiet, RetentionMs: -1, RetentionBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func appendN(t *testing.T, l *Log, n int) {
	t.Helper()
	for range n {
		if _, err := l.Append(mkBatch(t, 2, 1, 10), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// threeLogsOnVolume opens a MemFS volume "vol" and three logs on it, the
// i-th holding i+1 batches of 2 records.
func threeLogsOnVolume(t *testing.T) (*vfs.MemFS, *Volume, []*Log) {
	t.Helper()
	m := vfs.NewMem()
	if err := m.MkdirAll("vol"); err != nil {
		t.Fatal(err)
	}
	vol, err := OpenVolume(m, "vol")
	if err != nil {
		t.Fatal(err)
	}
	var logs []*Log
	for i := range 3 {
		l := openAt(t, m, fmt.Sprintf("vol/t-%d", i))
		appendN(t, l, i+1)
		logs = append(logs, l)
	}
	return m, vol, logs
}

// TestVolumeSyncMakesLogsDurable: one volume sync makes every log on the
// volume durable, as a Sync of each would (a crash keeps them), syncs a
// log of another filesystem on its own, and takes a log listed twice once.
func TestVolumeSyncMakesLogsDurable(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	other := openAt(t, noVolumeFS{m}, "vol/other-0")
	appendN(t, other, 2)
	logs = append(logs, other, logs[0])
	res := vol.Sync(logs)
	for i, r := range res {
		if want := logs[i].EndOffset(); r.Err != nil || r.Durable != want || logs[i].DurableEnd() != want {
			t.Errorf("log %d: %+v, durable end %d; want %d", i, r, logs[i].DurableEnd(), want)
		}
	}
	appendN(t, logs[1], 5) // not synced: a crash takes it
	crashed := m.Crash()
	for i, l := range logs[:4] {
		want := int64(2 * (i + 1))
		if i == 3 {
			want = 4
		}
		r := openAt(t, crashed, l.dir)
		if got := r.EndOffset(); got != want {
			t.Errorf("%s after the crash ends at %d, want %d", l.dir, got, want)
		}
		r.Close()
	}
}

// TestVolumeSyncFailureFailsEveryLog: a failed volume sync does not say
// whose data was lost, so every log it covered fails, for good, and
// nothing is published as durable.
func TestVolumeSyncFailureFailsEveryLog(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	a, b := logs[0], logs[1]
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == "vol" {
			return vfs.ErrInjected
		}
		return nil
	})
	for i, r := range vol.Sync([]*Log{a, b}) {
		if !errors.Is(r.Err, vfs.ErrInjected) || r.Durable != 0 {
			t.Errorf("log %d: %+v; want the injected error, nothing durable", i, r)
		}
	}
	m.SetHook(nil)
	if _, err := b.Sync(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("a later Sync: %v; want the volume's error again", err)
	}
}

// TestCheckpointRecoveryPointsOnVolume: the batched checkpoint writes each
// log's recovery point once (a second pass has nothing to do), a restart
// reads it, and a crash before the renames reached the directory leaves
// an older, lower point, which is still true: nothing looks damaged.
func TestCheckpointRecoveryPointsOnVolume(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	vol.Sync(logs)
	for i, err := range vol.CheckpointRecoveryPoints(logs) {
		if err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
	crashed := m.Crash()
	writes := 0
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate {
			writes++
		}
		return nil
	})
	vol.CheckpointRecoveryPoints(logs)
	if writes != 0 {
		t.Errorf("a second pass with nothing new wrote %d files", writes)
	}
	m.SetHook(nil)
	for i, l := range logs {
		want := int64(2 * (i + 1))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		r := openAt(t, m, l.dir)
		if !r.rpKnown || r.rpOffset != want {
			t.Errorf("%s reopened: recovery point %d (known %v), want %d", l.dir, r.rpOffset, r.rpKnown, want)
		}
		r.Close()
		c := openAt(t, crashed, l.dir)
		if c.Recovery().Damaged || c.EndOffset() != want || (c.rpKnown && c.rpOffset > want) {
			t.Errorf("%s after a crash: end %d, recovery point %d (known %v), damaged %v",
				l.dir, c.EndOffset(), c.rpOffset, c.rpKnown, c.Recovery().Damaged)
		}
		c.Close()
	}
}

// TestVolumeFailureIsSticky: a writeback error reported to one volume sync
// (a checkpoint's, say) fails every later one, the flusher's included:
// syncfs reports it only once.
func TestVolumeFailureIsSticky(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	vol.Sync(logs) // the checkpoint has a new point to write
	for _, l := range logs {
		appendN(t, l, 1)
	}
	fail := true
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == "vol" && fail {
			fail = false // reported once, as syncfs does
			return vfs.ErrInjected
		}
		return nil
	})
	for i, err := range vol.CheckpointRecoveryPoints(logs) {
		if !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("checkpoint of log %d: %v", i, err)
		}
	}
	for i, r := range vol.Sync(logs) {
		if !errors.Is(r.Err, vfs.ErrInjected) || r.Durable != int64(2*(i+1)) {
			t.Errorf("log %d after the checkpoint heard of the error: %+v", i, r)
		}
	}
}

// TestStartEpochsOnVolume: the batched epoch starts append to each
// history file and cost one volume sync in all for the logs on the volume
// (a log of another filesystem syncs its own file), create no file and
// sync no directory; a start that is not due does nothing; the epoch's
// first appends have nothing to persist, and what a sync of them makes
// durable survives a crash with its epoch in the history.
func TestStartEpochsOnVolume(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	other := openAt(t, noVolumeFS{m}, "vol/other-0")
	appendN(t, other, 1)
	vol.Sync(logs)
	var syncs, fileSyncs, dirSyncs, creates int
	m.SetHook(func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpSync && name == "vol":
			syncs++
		case op == vfs.OpSync:
			fileSyncs++
		case op == vfs.OpSyncDir:
			dirSyncs++
		case op == vfs.OpCreate:
			creates++
		}
		return nil
	})
	starts := []EpochStart{
		{logs[0], 5, logs[0].EndOffset()},
		{logs[1], 5, logs[1].EndOffset()},
		{logs[2], 5, logs[2].EndOffset() - 1}, // not the log's end: not due
		{other, 5, other.EndOffset()},
	}
	for i, err := range vol.StartEpochs(starts) {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if syncs != 1 || fileSyncs != 1 || dirSyncs != 0 || creates != 0 {
		t.Errorf("%d volume syncs, %d file syncs, %d directory syncs, %d files created; want 1, 1 (the other filesystem's log), 0, 0",
			syncs, fileSyncs, dirSyncs, creates)
	}
	for i, s := range starts {
		want := int32(5)
		if i == 2 {
			want = 0
		}
		if got := s.Log.LatestEpoch(); got != want {
			t.Errorf("log %d: latest epoch %d, want %d", i, got, want)
		}
	}
	// Due no more: nothing is written again, nor by the epoch's first
	// appends.
	syncs, fileSyncs, dirSyncs, creates = 0, 0, 0, 0
	vol.StartEpochs(starts[:2])
	for _, i := range []int{0, 1, 3} {
		if _, err := starts[i].Log.Append(mkBatch(t, 2, 1, 10), 5); err != nil {
			t.Fatal(err)
		}
	}
	if syncs+fileSyncs+dirSyncs+creates != 0 {
		t.Errorf("starts already persisted, and the epoch's first appends: %d volume syncs, %d file syncs, %d directory syncs, %d files created",
			syncs, fileSyncs, dirSyncs, creates)
	}
	m.SetHook(nil)
	vol.Sync([]*Log{logs[0], logs[1], other})
	crashed := m.Crash()
	for i, s := range starts {
		c := openAt(t, crashed, s.Log.dir)
		want, end := []EpochEntry{{0, 0}, {5, s.At}}, s.At+2
		if i == 2 {
			want, end = want[:1], s.At+1
		}
		if got := c.EpochHistory(); !slices.Equal(got, want) || c.EndOffset() != end || c.Recovery().Damaged {
			t.Errorf("%s after a crash: history %v, end %d, damaged %v; want %v, %d", s.Log.dir, got, c.EndOffset(), c.Recovery().Damaged, want, end)
		}
		c.Close()
	}
}

// TestStartEpochsCrash: a crash before the volume sync leaves each history
// as it was, or with the new epoch whole, or with its line torn, which
// reading drops; each log opens undamaged with its records, and a later
// epoch appends after a whole line.
func TestStartEpochsCrash(t *testing.T) {
	torn, whole := 0, 0
	for seed := range uint64(20) {
		m, vol, logs := threeLogsOnVolume(t)
		vol.Sync(logs)
		var starts []EpochStart
		for _, l := range logs {
			starts = append(starts, EpochStart{l, 3, l.EndOffset()})
		}
		m.SetHook(func(op vfs.Op, name string) error {
			if op == vfs.OpSync && name == "vol" {
				return vfs.ErrInjected
			}
			return nil
		})
		vol.StartEpochs(starts)
		m.SetHook(nil)
		crashed := m.CrashTorn(rand.New(rand.NewPCG(seed, seed)))
		for i, l := range logs {
			b, err := vfs.ReadFile(crashed, filepath.Join(l.dir, epochFileName))
			if err != nil {
				t.Fatal(err)
			}
			switch _, last, _ := bytes.Cut(b, []byte{'\n'}); {
			case len(last) == 0:
			case bytes.HasSuffix(last, []byte{'}'}):
				whole++
			default:
				torn++
			}
			c := openAt(t, crashed, l.dir)
			h := c.EpochHistory()
			end := int64(2 * (i + 1))
			old, started := []EpochEntry{{0, 0}}, []EpochEntry{{0, 0}, {3, end}}
			if c.Recovery().Damaged || c.EndOffset() != end || !slices.Equal(h, old) && !slices.Equal(h, started) {
				t.Errorf("seed %d: %s after a crash: end %d, history %v, damaged %v", seed, l.dir, c.EndOffset(), h, c.Recovery().Damaged)
			}
			// The next epoch's start and batch, synced, survive a
			// second crash with the history whole.
			if err := c.StartEpoch(4, end); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Append(mkBatch(t, 2, 1, 10), 4); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			again := openAt(t, crashed.Crash(), l.dir)
			if got := again.EpochHistory(); got[len(got)-1] != (EpochEntry{4, end}) || again.EndOffset() != end+2 {
				t.Errorf("seed %d: %s after a second crash: end %d, history %v", seed, l.dir, again.EndOffset(), got)
			}
			again.Close()
			c.Close()
		}
	}
	if torn == 0 || whole == 0 {
		t.Errorf("the crashes left %d torn and %d whole appended lines; want some of each", torn, whole)
	}
}

// TestStartEpochsSyncFailure: a failed volume sync fails the logs it
// covered, as a failed Volume.Sync does, and publishes no new epoch.
func TestStartEpochsSyncFailure(t *testing.T) {
	m, vol, logs := threeLogsOnVolume(t)
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == "vol" {
			return vfs.ErrInjected
		}
		return nil
	})
	var starts []EpochStart
	for _, l := range logs {
		starts = append(starts, EpochStart{l, 3, l.EndOffset()})
	}
	for i, err := range vol.StartEpochs(starts) {
		if !errors.Is(err, vfs.ErrInjected) {
			t.Errorf("start %d: %v; want the injected error", i, err)
		}
	}
	m.SetHook(nil)
	for i, l := range logs {
		if l.LatestEpoch() != 0 {
			t.Errorf("log %d: latest epoch %d after a failed start", i, l.LatestEpoch())
		}
		if _, err := l.Append(mkBatch(t, 1, 1, 10), 3); !errors.Is(err, vfs.ErrInjected) {
			t.Errorf("log %d: append after the failed start: %v; want the log failed", i, err)
		}
	}
}
