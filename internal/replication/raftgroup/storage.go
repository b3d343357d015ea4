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

// fileVersion is the version of the state file written by this code.
const fileVersion = 1

// diskState is the JSON form of replication-raft.json: the Raft HardState,
// the compaction snapshot (the applied group state at Snapshot.Index) and
// the log entries after it.
type diskState struct {
	Version  int          `json:"version"`
	Members  []int32      `json:"members"`
	Term     uint64       `json:"term"`
	Vote     uint64       `json:"vote"`
	Commit   uint64       `json:"commit"`
	Snapshot diskSnapshot `json:"snapshot"`
	Entries  []diskEntry  `json:"entries"`
}

type diskSnapshot struct {
	Index uint64     `json:"index"`
	Term  uint64     `json:"term"`
	State GroupState `json:"state"`
}

type diskEntry struct {
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	Type  int32  `json:"type,omitempty"`
	Data  []byte `json:"data,omitempty"`
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

// confState is the static membership as a Raft ConfState.
func confState(members []int32) *pb.ConfState {
	v := make([]uint64, len(members))
	for i, m := range members {
		v[i] = uint64(m)
	}
	return &pb.ConfState{Voters: v}
}

// loadStorage reads path and builds the MemoryStorage raft runs on, with
// the applied state at its snapshot. A missing file bootstraps the static
// membership: a snapshot at index 1, term 1 holding the voters (the same
// on every replica, so no configuration entry is ever replicated).
func loadStorage(fsys vfs.FS, path string, members []int32) (*raft.MemoryStorage, GroupState, error) {
	ms := raft.NewMemoryStorage()
	data, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		snap := &pb.Snapshot{
			Data:     encodeSnapshotData(initialState()),
			Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: confState(members)},
		}
		if err := ms.ApplySnapshot(snap); err != nil {
			return nil, GroupState{}, err
		}
		if err := ms.SetHardState(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}); err != nil {
			return nil, GroupState{}, err
		}
		// Record the membership at once, so a later start with another
		// membership is refused.
		if err := saveStorage(fsys, path, members, ms); err != nil {
			return nil, GroupState{}, err
		}
		return ms, initialState(), nil
	}
	if err != nil {
		return nil, GroupState{}, fmt.Errorf("raftgroup: read %s: %w", path, err)
	}
	var d diskState
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, GroupState{}, fmt.Errorf("raftgroup: parse %s: %w", path, err)
	}
	if d.Version != fileVersion {
		return nil, GroupState{}, fmt.Errorf("raftgroup: %s: unsupported version %d", path, d.Version)
	}
	if !sameMembers(d.Members, members) {
		return nil, GroupState{}, fmt.Errorf("raftgroup: %s was written for members %v, configured %v (membership is static)", path, d.Members, members)
	}
	snap := &pb.Snapshot{
		Data:     encodeSnapshotData(d.Snapshot.State),
		Metadata: &pb.SnapshotMetadata{Index: new(d.Snapshot.Index), Term: new(d.Snapshot.Term), ConfState: confState(members)},
	}
	if err := ms.ApplySnapshot(snap); err != nil {
		return nil, GroupState{}, err
	}
	ents := make([]*pb.Entry, 0, len(d.Entries))
	next := d.Snapshot.Index + 1
	for _, e := range d.Entries {
		if e.Index != next {
			return nil, GroupState{}, fmt.Errorf("raftgroup: %s: entry %d where %d expected", path, e.Index, next)
		}
		next++
		ents = append(ents, &pb.Entry{Index: new(e.Index), Term: new(e.Term), Type: pb.EntryType(e.Type).Enum(), Data: e.Data})
	}
	if err := ms.Append(ents); err != nil {
		return nil, GroupState{}, err
	}
	// The snapshot holds committed state, so commit is at least its index
	// (and at most the last entry).
	commit := max(d.Commit, d.Snapshot.Index)
	commit = min(commit, next-1)
	if err := ms.SetHardState(&pb.HardState{Term: new(d.Term), Vote: new(d.Vote), Commit: new(commit)}); err != nil {
		return nil, GroupState{}, err
	}
	return ms, d.Snapshot.State.clone(), nil
}

// saveStorage writes the whole of ms atomically to path.
func saveStorage(fsys vfs.FS, path string, members []int32, ms *raft.MemoryStorage) error {
	hs, _, err := ms.InitialState()
	if err != nil {
		return err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return err
	}
	st, err := decodeSnapshotData(snap.GetData())
	if err != nil {
		return err
	}
	d := diskState{
		Version: fileVersion,
		Members: members,
		Term:    hs.GetTerm(),
		Vote:    hs.GetVote(),
		Commit:  hs.GetCommit(),
		Snapshot: diskSnapshot{
			Index: snap.GetMetadata().GetIndex(),
			Term:  snap.GetMetadata().GetTerm(),
			State: st,
		},
	}
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	if last >= first {
		ents, err := ms.Entries(first, last+1, math.MaxUint64)
		if err != nil {
			return err
		}
		d.Entries = make([]diskEntry, len(ents))
		for i, e := range ents {
			d.Entries[i] = diskEntry{Index: e.GetIndex(), Term: e.GetTerm(), Type: int32(e.GetType()), Data: e.GetData()}
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(fsys, path, b); err != nil {
		return fmt.Errorf("raftgroup: write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func sameMembers(a, b []int32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
