package raftgroup

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/moonmq/moonmq/internal/replication"
	pb "go.etcd.io/raft/v3/raftpb"
)

// NoLeader is the Leader of a GroupState before any claim is applied, and
// the leader id reported when none is known.
const NoLeader int32 = -1

// GroupState is the replicated state of the group: the result of applying
// the committed Raft log in order.
type GroupState struct {
	// Epoch is the leader epoch: the Raft term of the latest applied
	// leadership claim (0 before any).
	Epoch int32 `json:"epoch"`
	// Leader is the replica that made that claim (NoLeader before any).
	Leader int32 `json:"leader"`
	// ISR is the latest accepted in-sync set, sorted ascending.
	ISR []int32 `json:"isr"`
	// HasISR is false until an ISR change has been accepted.
	HasISR bool `json:"has_isr"`
	// Fences are the partitions this group stopped appending to for a
	// move to another group (cluster mode), by the caller's partition key,
	// each with the caller's mark (the metadata log index its leader had
	// applied when it fenced). A fenced partition takes no appends on any
	// replica that applied the fence, and so on no later leader either.
	Fences map[string]uint64 `json:"fences,omitempty"`
	// Floors are, by the same keys, the marks of the moves from which on
	// a copy of the metadata may make this group serve a partition
	// again: set when a fence lifts (the partition is this group's
	// again) and when the group starts copying a partition in. A leader
	// whose copy of the metadata is older (a failover to a broker whose
	// copy lags) does not serve the partition, nor acts on moves older
	// than a floor or a fence: the group's own log has seen newer ones.
	Floors map[string]uint64 `json:"floors,omitempty"`
}

// initialState is the state before any entry is applied.
func initialState() GroupState { return GroupState{Leader: NoLeader} }

// Equal reports whether s and o are the same state.
func (s GroupState) Equal(o GroupState) bool {
	return s.Epoch == o.Epoch && s.Leader == o.Leader && s.HasISR == o.HasISR && slices.Equal(s.ISR, o.ISR) &&
		maps.Equal(s.Fences, o.Fences) && maps.Equal(s.Floors, o.Floors)
}

// clone returns a copy that shares no memory with s.
func (s GroupState) clone() GroupState {
	s.ISR = slices.Clone(s.ISR)
	s.Fences = maps.Clone(s.Fences)
	s.Floors = maps.Clone(s.Floors)
	return s
}

// LeadershipClaim is the entry a new Raft leader commits at the start of
// its term; once applied, Epoch is the leader epoch and LeaderID serves.
type LeadershipClaim struct {
	// Epoch is the Raft term of the claiming leader.
	Epoch int32 `json:"epoch"`
	// LeaderID is the claiming replica.
	LeaderID int32 `json:"leader"`
}

// entryVersion is the version of the entry encoding written by this code.
const entryVersion = 1

// entry is the JSON form of a log entry's data. Exactly one of Claim,
// ISR and Fence is set. Entries of an unknown version are ignored on apply, on every
// replica alike, so the applied states stay equal.
type entry struct {
	V     int              `json:"v"`
	Claim *LeadershipClaim `json:"claim,omitempty"`
	ISR   *isrEntry        `json:"isr,omitempty"`
	Fence *FenceChange     `json:"fence,omitempty"`
}

// FenceChange sets or lifts the fence of one partition. Only the serving
// leader proposes one, stamped with its epoch; a change from an older
// epoch is ignored on apply.
type FenceChange struct {
	Epoch int32  `json:"epoch"`
	Key   string `json:"key"`
	Mark  uint64 `json:"mark"`
	Lift  bool   `json:"lift,omitempty"`
	// Floor (with Lift) raises the key's floor (GroupState.Floors).
	Floor uint64 `json:"floor,omitempty"`
}

type isrEntry struct {
	Epoch   int32   `json:"epoch"`
	ISR     []int32 `json:"isr"`
	Replica int32   `json:"replica"`
	Expand  bool    `json:"expand"`
}

func encodeClaim(c LeadershipClaim) []byte {
	b, _ := json.Marshal(entry{V: entryVersion, Claim: &c})
	return b
}

func encodeISR(c replication.ISRChange) []byte {
	isr := slices.Clone(c.ISR)
	slices.Sort(isr)
	b, _ := json.Marshal(entry{V: entryVersion, ISR: &isrEntry{Epoch: c.Epoch, ISR: isr, Replica: c.Replica, Expand: c.Expand}})
	return b
}

func encodeFence(c FenceChange) []byte {
	b, _ := json.Marshal(entry{V: entryVersion, Fence: &c})
	return b
}

func decodeEntry(data []byte) (entry, error) {
	var e entry
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("raftgroup: bad entry: %w", err)
	}
	return e, nil
}

// apply returns the state after applying the log entry e. Entries that are
// not ours (Raft's empty entries, configuration changes, unknown versions,
// undecodable data) leave the state unchanged.
//
// A claim takes effect only if its epoch is the term of the entry that
// carries it and is newer than the current epoch; an ISR change only if
// replication.AcceptISRChange accepts it against the latest claim.
func (s GroupState) apply(e *pb.Entry) GroupState {
	if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
		return s
	}
	d, err := decodeEntry(e.GetData())
	if err != nil || d.V != entryVersion {
		return s
	}
	switch {
	case d.Claim != nil:
		c := *d.Claim
		if uint64(c.Epoch) != e.GetTerm() || c.Epoch <= s.Epoch {
			return s
		}
		s.Epoch, s.Leader = c.Epoch, c.LeaderID
	case d.ISR != nil:
		c := replication.ISRChange{Epoch: d.ISR.Epoch, ISR: d.ISR.ISR, Replica: d.ISR.Replica, Expand: d.ISR.Expand}
		if !replication.AcceptISRChange(s.Epoch, c) {
			return s
		}
		s.ISR = slices.Clone(c.ISR)
		slices.Sort(s.ISR)
		s.HasISR = true
	case d.Fence != nil:
		c := *d.Fence
		if c.Epoch != s.Epoch || c.Key == "" {
			return s
		}
		if m, fenced := s.Fences[c.Key]; !c.Lift && (fenced && c.Mark < m || c.Mark < s.Floors[c.Key]) {
			return s // a fence for a move older than one this log has seen
		}
		s.Fences = maps.Clone(s.Fences)
		if c.Lift {
			delete(s.Fences, c.Key)
			if len(s.Fences) == 0 {
				s.Fences = nil
			}
			if c.Floor > s.Floors[c.Key] {
				s.Floors = maps.Clone(s.Floors)
				if s.Floors == nil {
					s.Floors = map[string]uint64{}
				}
				s.Floors[c.Key] = c.Floor
			}
		} else {
			if s.Fences == nil {
				s.Fences = map[string]uint64{}
			}
			s.Fences[c.Key] = c.Mark
		}
	}
	return s
}
