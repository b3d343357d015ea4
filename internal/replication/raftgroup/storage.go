package raftgroup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"

	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// FileName is the name of the Raft state file in DataDir.
const FileName = "replication-raft.json"

// fileVersion is the version of the state files written by this code.
const fileVersion = 1

// diskState is the JSON form of a DiskLog's Path: the Raft HardState, the
// compaction snapshot (the applied state at Snapshot.Index, unless it is
// kept in SnapshotPath) and the log entries after it.
type diskState struct {
	Version  int          `json:"version"`
	Members  []int32      `json:"members"`
	Term     uint64       `json:"term"`
	Vote     uint64       `json:"vote"`
	Commit   uint64       `json:"commit"`
	Snapshot diskSnapshot `json:"snapshot"`
	Entries  []diskEntry  `json:"entries"`
}

// diskSnapshot is a compaction snapshot. State is the Raft snapshot's
// Data, which is JSON for every state machine of this repository; it is
// empty in Path when the snapshot lives in SnapshotPath.
type diskSnapshot struct {
	Index uint64          `json:"index"`
	Term  uint64          `json:"term"`
	State json.RawMessage `json:"state,omitempty"`
}

// snapshotFile is the JSON form of a DiskLog's SnapshotPath.
type snapshotFile struct {
	Version  int          `json:"version"`
	Members  []int32      `json:"members"`
	Snapshot diskSnapshot `json:"snapshot"`
}

type diskEntry struct {
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	Type  int32  `json:"type,omitempty"`
	Data  []byte `json:"data,omitempty"`
}

// DiskLog keeps one Raft node's durable state (HardState, log entries and
// compaction snapshot) in files written atomically through vfs, and builds
// the raft.MemoryStorage the node runs on from them. The caller saves
// after persisting a Ready into the MemoryStorage and before sending any
// of its messages. A DiskLog is used by one goroutine.
type DiskLog struct {
	FS vfs.FS
	// Path holds the HardState and the entries after the snapshot, and
	// the snapshot itself unless SnapshotPath is set.
	Path string
	// SnapshotPath, when set, holds the snapshot in a file of its own,
	// written only when the snapshot changes: a state machine whose
	// snapshot is large then does not rewrite it with every Ready.
	SnapshotPath string
	// Voters is the static membership. It is recorded in the files, and a
	// start with other voters is refused.
	Voters []int32

	// savedSnap is the index of the snapshot in SnapshotPath.
	savedSnap uint64
}

// confState is the static membership as a Raft ConfState.
func confState(members []int32) *pb.ConfState {
	v := make([]uint64, len(members))
	for i, m := range members {
		v[i] = uint64(m)
	}
	return &pb.ConfState{Voters: v}
}

// ConfState is the DiskLog's membership as a Raft ConfState, for the
// snapshots the node creates.
func (d *DiskLog) ConfState() *pb.ConfState { return confState(d.Voters) }

// Load reads the files and builds the MemoryStorage. When there are none
// it bootstraps the static membership: a snapshot at index 1, term 1
// holding initial (the same on every node, so no configuration entry is
// ever replicated), saved at once so that a later start with other voters
// is refused.
func (d *DiskLog) Load(initial []byte) (*raft.MemoryStorage, error) {
	var snap *diskSnapshot
	if d.SnapshotPath != "" {
		var err error
		if snap, err = d.loadSnapshotFile(); err != nil {
			return nil, err
		}
	}
	data, err := vfs.ReadFile(d.FS, d.Path)
	if errors.Is(err, fs.ErrNotExist) && snap == nil {
		ms := raft.NewMemoryStorage()
		boot := &pb.Snapshot{
			Data:     initial,
			Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: d.ConfState()},
		}
		if err := ms.ApplySnapshot(boot); err != nil {
			return nil, err
		}
		if err := ms.SetHardState(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}); err != nil {
			return nil, err
		}
		if err := d.Save(ms); err != nil {
			return nil, err
		}
		return ms, nil
	}
	var st diskState
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The snapshot file of a bootstrap or of a received snapshot was
		// written, the state file not yet: nothing of that Ready was sent.
		st = diskState{Version: fileVersion, Members: d.Voters, Snapshot: diskSnapshot{Index: snap.Index, Term: snap.Term}}
	case err != nil:
		return nil, fmt.Errorf("raftgroup: read %s: %w", d.Path, err)
	default:
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("raftgroup: parse %s: %w", d.Path, err)
		}
		if st.Version != fileVersion {
			return nil, fmt.Errorf("raftgroup: %s: unsupported version %d", d.Path, st.Version)
		}
		if !sameMembers(st.Members, d.Voters) {
			return nil, fmt.Errorf("raftgroup: %s was written for members %v, configured %v (membership is static)", d.Path, st.Members, d.Voters)
		}
	}
	ents := make([]*pb.Entry, 0, len(st.Entries))
	next := st.Snapshot.Index + 1
	for _, e := range st.Entries {
		if e.Index != next {
			return nil, fmt.Errorf("raftgroup: %s: entry %d where %d expected", d.Path, e.Index, next)
		}
		next++
		ents = append(ents, &pb.Entry{Index: new(e.Index), Term: new(e.Term), Type: pb.EntryType(e.Type).Enum(), Data: e.Data})
	}
	if snap == nil {
		if d.SnapshotPath != "" {
			return nil, fmt.Errorf("raftgroup: %s exists without %s", d.Path, d.SnapshotPath)
		}
		snap = &st.Snapshot
	} else {
		if ents, err = d.entriesAfter(snap, &st, ents); err != nil {
			return nil, err
		}
	}
	hs := &pb.HardState{Term: new(st.Term), Vote: new(st.Vote)}
	if snap.Term > st.Term {
		// The snapshot came from a leader of a later term whose Ready
		// was not saved whole: no vote was sent in that term.
		hs.Term, hs.Vote = new(snap.Term), new(uint64(0))
	}
	ms := raft.NewMemoryStorage()
	rs := &pb.Snapshot{
		Data:     snap.State,
		Metadata: &pb.SnapshotMetadata{Index: new(snap.Index), Term: new(snap.Term), ConfState: d.ConfState()},
	}
	if err := ms.ApplySnapshot(rs); err != nil {
		return nil, err
	}
	if err := ms.Append(ents); err != nil {
		return nil, err
	}
	// The snapshot holds committed state, so commit is at least its index
	// (and at most the last entry).
	last, _ := ms.LastIndex()
	hs.Commit = new(min(max(st.Commit, snap.Index), last))
	if err := ms.SetHardState(hs); err != nil {
		return nil, err
	}
	return ms, nil
}

// loadSnapshotFile reads SnapshotPath; nil when it does not exist.
func (d *DiskLog) loadSnapshotFile() (*diskSnapshot, error) {
	data, err := vfs.ReadFile(d.FS, d.SnapshotPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftgroup: read %s: %w", d.SnapshotPath, err)
	}
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("raftgroup: parse %s: %w", d.SnapshotPath, err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("raftgroup: %s: unsupported version %d", d.SnapshotPath, f.Version)
	}
	if !sameMembers(f.Members, d.Voters) {
		return nil, fmt.Errorf("raftgroup: %s was written for members %v, configured %v (membership is static)", d.SnapshotPath, f.Members, d.Voters)
	}
	d.savedSnap = f.Snapshot.Index
	return &f.Snapshot, nil
}

// entriesAfter reconciles the entries of Path, which follow st.Snapshot,
// with the snapshot of SnapshotPath. The snapshot file is written first,
// so a crash between the two writes leaves a snapshot newer than the one
// the entries follow: the entries after it are kept only if the log holds
// the snapshot's own entry (same index and term), for otherwise they
// continue another history than the one the snapshot closes.
func (d *DiskLog) entriesAfter(snap *diskSnapshot, st *diskState, ents []*pb.Entry) ([]*pb.Entry, error) {
	switch {
	case st.Snapshot.Index == snap.Index:
		if st.Snapshot.Term != snap.Term {
			return nil, fmt.Errorf("raftgroup: %s follows a snapshot at %d of term %d, %s holds term %d", d.Path, st.Snapshot.Index, st.Snapshot.Term, d.SnapshotPath, snap.Term)
		}
		return ents, nil
	case st.Snapshot.Index > snap.Index:
		return nil, fmt.Errorf("raftgroup: %s follows a snapshot at %d, %s holds an older one at %d", d.Path, st.Snapshot.Index, d.SnapshotPath, snap.Index)
	}
	for i, e := range ents {
		if e.GetIndex() == snap.Index {
			if e.GetTerm() == snap.Term {
				return ents[i+1:], nil
			}
			break
		}
	}
	return nil, nil
}

// Save writes the whole of ms atomically: the snapshot first when it
// changed and lives in SnapshotPath, then Path.
func (d *DiskLog) Save(ms *raft.MemoryStorage) error {
	hs, _, err := ms.InitialState()
	if err != nil {
		return err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return err
	}
	st := diskState{
		Version: fileVersion,
		Members: d.Voters,
		Term:    hs.GetTerm(),
		Vote:    hs.GetVote(),
		Commit:  hs.GetCommit(),
		Snapshot: diskSnapshot{
			Index: snap.GetMetadata().GetIndex(),
			Term:  snap.GetMetadata().GetTerm(),
			State: snap.GetData(),
		},
	}
	if d.SnapshotPath != "" {
		if st.Snapshot.Index != d.savedSnap {
			b, err := json.Marshal(snapshotFile{Version: fileVersion, Members: d.Voters, Snapshot: st.Snapshot})
			if err != nil {
				return err
			}
			if err := vfs.WriteFileAtomic(d.FS, d.SnapshotPath, b); err != nil {
				return fmt.Errorf("raftgroup: write %s: %w", filepath.Base(d.SnapshotPath), err)
			}
			d.savedSnap = st.Snapshot.Index
		}
		st.Snapshot.State = nil
	}
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	if last >= first {
		ents, err := ms.Entries(first, last+1, math.MaxUint64)
		if err != nil {
			return err
		}
		st.Entries = make([]diskEntry, len(ents))
		for i, e := range ents {
			st.Entries[i] = diskEntry{Index: e.GetIndex(), Term: e.GetTerm(), Type: int32(e.GetType()), Data: e.GetData()}
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(d.FS, d.Path, b); err != nil {
		return fmt.Errorf("raftgroup: write %s: %w", filepath.Base(d.Path), err)
	}
	return nil
}

// encodeSnapshotData is the Data of a Raft snapshot: the applied state.
func encodeSnapshotData(s GroupState) []byte {
	b, _ := json.Marshal(s)
	return b
}

func decodeSnapshotData(b []byte) (GroupState, error) {
	if len(b) == 0 {
		return initialState(), nil
	}
	var s GroupState
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("raftgroup: bad snapshot data: %w", err)
	}
	return s, nil
}

// loadStorage reads the group's state file (bootstrapping the static
// membership if there is none) and returns the MemoryStorage with the
// applied state at its snapshot.
func loadStorage(fsys vfs.FS, path string, members []int32) (*raft.MemoryStorage, GroupState, error) {
	d := &DiskLog{FS: fsys, Path: path, Voters: members}
	ms, err := d.Load(encodeSnapshotData(initialState()))
	if err != nil {
		return nil, GroupState{}, err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return nil, GroupState{}, err
	}
	st, err := decodeSnapshotData(snap.GetData())
	return ms, st, err
}

// saveStorage writes the whole of ms atomically to path.
func saveStorage(fsys vfs.FS, path string, members []int32, ms *raft.MemoryStorage) error {
	return (&DiskLog{FS: fsys, Path: path, Voters: members}).Save(ms)
}

func sameMembers(a, b []int32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
