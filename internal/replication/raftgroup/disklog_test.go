package raftgroup

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func logEntry(index, term uint64) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum(), Data: []byte{byte(index)}}
}

// splitLog is a DiskLog with its snapshot in a file of its own.
func splitLog(fsys vfs.FS) *DiskLog {
	_ = fsys.MkdirAll("/d")
	return &DiskLog{FS: fsys, Path: "/d/log.json", SnapshotPath: "/d/snap.json", Voters: []int32{1, 2, 3}}
}

// grow appends entries 2..last of term to ms and commits them.
func grow(t *testing.T, ms *raft.MemoryStorage, last, term uint64) {
	t.Helper()
	var ents []*pb.Entry
	for i := uint64(2); i <= last; i++ {
		ents = append(ents, logEntry(i, term))
	}
	if err := ms.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := ms.SetHardState(&pb.HardState{Term: new(term), Vote: new(uint64(2)), Commit: new(last)}); err != nil {
		t.Fatal(err)
	}
}

func entryIndexes(t *testing.T, ms *raft.MemoryStorage) []uint64 {
	t.Helper()
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	if last < first {
		return nil
	}
	ents, err := ms.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range ents {
		out = append(out, e.GetIndex())
	}
	return out
}

func TestDiskLogSplitSnapshot(t *testing.T) {
	fsys := vfs.NewMem()
	d := splitLog(fsys)
	ms, err := d.Load([]byte(`{"boot":true}`))
	if err != nil {
		t.Fatal(err)
	}
	grow(t, ms, 10, 3)
	if err := d.Save(ms); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.CreateSnapshot(6, d.ConfState(), []byte(`{"at":6}`)); err != nil {
		t.Fatal(err)
	}
	if err := ms.Compact(6); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(ms); err != nil {
		t.Fatal(err)
	}
	// The state file does not repeat the snapshot.
	b, _ := vfs.ReadFile(fsys, d.Path)
	var st diskState
	if err := json.Unmarshal(b, &st); err != nil || st.Snapshot.Index != 6 || len(st.Snapshot.State) != 0 {
		t.Fatalf("state file %s (%v)", b, err)
	}
	ms2, err := splitLog(fsys).Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := ms2.Snapshot()
	hs, _, _ := ms2.InitialState()
	if snap.GetMetadata().GetIndex() != 6 || string(snap.GetData()) != `{"at":6}` || hs.GetTerm() != 3 || hs.GetVote() != 2 || hs.GetCommit() != 10 {
		t.Fatalf("reloaded snapshot %d %s, hard state %v", snap.GetMetadata().GetIndex(), snap.GetData(), hs)
	}
	if got := entryIndexes(t, ms2); len(got) != 4 || got[0] != 7 {
		t.Fatalf("reloaded entries %v", got)
	}
}

// A crash after the snapshot file was replaced and before the state file
// was: the entries after the new snapshot are kept if they continue it.
func TestDiskLogCrashBetweenWrites(t *testing.T) {
	for _, c := range []struct {
		name     string
		snapTerm uint64
		want     []uint64
		wantTerm uint64
	}{
		{"entries continue the snapshot", 3, []uint64{9, 10}, 3},
		{"entries of another history", 5, nil, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			d := splitLog(fsys)
			ms, err := d.Load([]byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			grow(t, ms, 10, 3)
			if err := d.Save(ms); err != nil {
				t.Fatal(err)
			}
			// What the next Save would write first: a snapshot at 8.
			f := snapshotFile{Version: fileVersion, Members: d.Voters, Snapshot: diskSnapshot{Index: 8, Term: c.snapTerm, State: json.RawMessage(`{"at":8}`)}}
			b, _ := json.Marshal(f)
			if err := vfs.WriteFileAtomic(fsys, d.SnapshotPath, b); err != nil {
				t.Fatal(err)
			}
			ms2, err := splitLog(fsys).Load(nil)
			if err != nil {
				t.Fatal(err)
			}
			snap, _ := ms2.Snapshot()
			hs, _, _ := ms2.InitialState()
			if snap.GetMetadata().GetIndex() != 8 || hs.GetTerm() != c.wantTerm || hs.GetCommit() < 8 {
				t.Fatalf("snapshot %d, hard state %v", snap.GetMetadata().GetIndex(), hs)
			}
			got := entryIndexes(t, ms2)
			if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
				t.Fatalf("entries %v, want %v", got, c.want)
			}
		})
	}
}

func TestDiskLogRefusesInconsistentFiles(t *testing.T) {
	fsys := vfs.NewMem()
	d := splitLog(fsys)
	if _, err := d.Load([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(d.SnapshotPath); err != nil {
		t.Fatal(err)
	}
	if _, err := splitLog(fsys).Load(nil); err == nil || !strings.Contains(err.Error(), "without") {
		t.Fatalf("state file without its snapshot: %v", err)
	}
	other := splitLog(vfs.NewMem())
	if _, err := other.Load([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	other.Voters = []int32{1, 2, 4}
	if _, err := other.Load(nil); err == nil || !strings.Contains(err.Error(), "static") {
		t.Fatalf("other voters: %v", err)
	}
}

// The group's own file keeps its layout: the snapshot's state inline.
func TestGroupFileKeepsItsSnapshotInline(t *testing.T) {
	fsys := vfs.NewMem()
	_ = fsys.MkdirAll("/g")
	if _, _, err := loadStorage(fsys, "/g/"+FileName, []int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(fsys, "/g/"+FileName)
	if err != nil {
		t.Fatal(err)
	}
	var old struct {
		Snapshot struct {
			Index uint64     `json:"index"`
			State GroupState `json:"state"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.Snapshot.Index != 1 || old.Snapshot.State.Leader != NoLeader {
		t.Fatalf("group file %s (%v)", b, err)
	}
}
