package storage

import (
	"errors"
	"fmt"
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
