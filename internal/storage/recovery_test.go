package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/vfs"
)

// TestRolledIndexRebuild damages the indexes of sealed segments in several
// ways; reopening must detect it, rebuild them, and answer reads and
// timestamp lookups exactly as before.
func TestRolledIndexRebuild(t *testing.T) {
	for _, damage := range []string{"remove", "truncate", "garbage", "drop-last-time-entry"} {
		t.Run(damage, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := Options{SegmentBytes: 2000, IndexIntervalBytes: 150}
			l := openLog(t, fs, opts)
			var m model
			for i := range 80 {
				b := mkBatch(t, 2, int64(10*i), 30)
				base, _ := l.Append(b, 0)
				m.add(b, base)
			}
			l.Close()
			names, _ := fs.ReadDir("data/topic-0")
			var bases []int64
			for _, n := range names {
				if b, ok := parseSegName(n, logSuffix); ok {
					bases = append(bases, b)
				}
			}
			if len(bases) < 3 {
				t.Fatal("want several segments")
			}
			for _, base := range bases[:len(bases)-1] {
				for _, suf := range []string{indexSuffix, timeIndexSuffix} {
					name := segName("data/topic-0", base, suf)
					data, _ := vfs.ReadFile(fs, name)
					switch damage {
					case "remove":
						fs.Remove(name)
						continue
					case "truncate":
						data = data[:len(data)/2]
					case "garbage":
						data = bytes.Repeat([]byte{0xff}, len(data))
					case "drop-last-time-entry":
						if suf == timeIndexSuffix {
							data = data[:len(data)-timeEntrySize]
						}
					}
					f, _ := fs.Create(name)
					f.Write(data)
					f.Close()
				}
			}
			l = openLog(t, fs, opts)
			defer l.Close()
			for i, base := range m.bases {
				if b, err := l.Read(base+1, 1, 1000); err != nil || !bytes.Equal(b, m.batches[i]) {
					t.Fatalf("read %d: %v", base+1, err)
				}
			}
			for _, ts := range []int64{0, 5, 11, 395, 790, 791} {
				off, got, ok, err := l.OffsetForTimestamp(ts)
				// Batch i holds offsets 2i, 2i+1 at 10i, 10i+1.
				wantOff, wantTs := 2*(ts/10), 10*(ts/10)
				switch ts % 10 {
				case 0:
				case 1:
					wantOff, wantTs = wantOff+1, wantTs+1
				default:
					wantOff, wantTs = wantOff+2, wantTs+10
				}
				if err != nil || !ok || off != wantOff || got != wantTs {
					t.Errorf("ts %d: %d@%d ok=%v %v want %d@%d", ts, off, got, ok, err, wantOff, wantTs)
				}
			}
			// The rebuilt indexes were persisted: a second open needs no rebuild
			// and sees the same thing.
			l.Close()
			l = openLog(t, fs, opts)
			if got := readAll(t, l, 0, 5000); !bytes.Equal(got, m.bytesFrom(0)) {
				t.Fatal("content after second reopen")
			}
		})
	}
}

func TestAppendRejectsJunk(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	good := mkBatch(t, 1, 0, 1)
	for _, b := range [][]byte{nil, {1, 2, 3}, make([]byte, 100), good[:len(good)-1], append(bytes.Clone(good), 0)} {
		if _, err := l.Append(b, 0); !errors.Is(err, ErrInvalidBatch) {
			t.Fatalf("junk accepted: %v", err)
		}
	}
	if l.EndOffset() != 0 {
		t.Fatal("junk changed the log")
	}
}

func TestRollSyncFailure(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 300})
	defer l.Close()
	l.Append(mkBatch(t, 1, 0, 200), 0)
	fs.FailNext(vfs.OpSync, ".log", vfs.ErrInjected)
	if _, err := l.Append(mkBatch(t, 1, 0, 200), 0); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("roll fsync failure not surfaced: %v", err)
	}
	if _, err := l.Append(mkBatch(t, 1, 0, 1), 0); err == nil {
		t.Fatal("append after failed fsync succeeded")
	}
}

func TestWriteFailureUndone(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{})
	defer l.Close()
	l.Append(mkBatch(t, 1, 0, 10), 0)
	fs.FailNext(vfs.OpWrite, ".log", vfs.ErrInjected)
	if _, err := l.Append(mkBatch(t, 1, 0, 10), 0); !errors.Is(err, vfs.ErrInjected) {
		t.Fatal(err)
	}
	b := mkBatch(t, 1, 0, 10)
	if base, err := l.Append(b, 0); err != nil || base != 1 {
		t.Fatal(base, err)
	}
	if got, _ := l.Read(1, 1, 10); !bytes.Equal(got, b) {
		t.Fatal("read after recovered write failure")
	}
}

func TestDeleteAndTruncateFully(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, Options{SegmentBytes: 400})
	for range 10 {
		l.Append(mkBatch(t, 1, 0, 100), 3)
	}
	if err := l.TruncateFullyAndStartAt(100); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 100 || l.EndOffset() != 100 || l.SegmentCount() != 1 || l.LatestEpoch() != -1 {
		t.Fatalf("start %d end %d", l.StartOffset(), l.EndOffset())
	}
	if base, _ := l.Append(mkBatch(t, 1, 0, 1), 4); base != 100 {
		t.Fatal(base)
	}
	l.Close()
	l = openLog(t, fs, Options{SegmentBytes: 400})
	if l.StartOffset() != 100 || l.EndOffset() != 101 {
		t.Fatalf("reopen: %d %d", l.StartOffset(), l.EndOffset())
	}
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.ReadDir("data"); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
	if _, err := l.Append(mkBatch(t, 1, 0, 1), 0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestCompressedBatchesStoredVerbatim(t *testing.T) {
	l := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	for _, c := range []recordbatch.Codec{recordbatch.CodecGzip, recordbatch.CodecSnappy, recordbatch.CodecLz4, recordbatch.CodecZstd} {
		b, _ := recordbatch.Encode(recordbatch.BatchOptions{Codec: c}, []recordbatch.Record{{Timestamp: 5, Value: []byte("v")}, {Timestamp: 6}})
		want := bytes.Clone(b)
		base, _ := l.Append(b, 2)
		recordbatch.SetBaseOffset(want, base)
		recordbatch.SetPartitionLeaderEpoch(want, 2)
		got, _ := l.Read(base, 1, 100)
		if !bytes.Equal(got, want) {
			t.Fatalf("codec %d not stored verbatim", c)
		}
		if _, err := recordbatch.Check(got); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOnOSFilesystem(t *testing.T) {
	dir := t.TempDir() + "/t-0"
	opts := Options{SegmentBytes: 1000, IndexIntervalBytes: 100, RetentionMs: -1, RetentionBytes: -1, Logger: quiet, Pool: testPool(vfs.Default)}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var m model
	for i := range 30 {
		b := mkBatch(t, 2, int64(i), 60)
		base, err := l.Append(b, 1)
		if err != nil {
			t.Fatal(err)
		}
		m.add(b, base)
	}
	if d, err := l.Sync(); err != nil || d != 60 {
		t.Fatal(d, err)
	}
	l.Close()
	if l, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := readAll(t, l, 0, 4000); !bytes.Equal(got, m.bytesFrom(0)) {
		t.Fatal("content after reopen on disk")
	}
}
