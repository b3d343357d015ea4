package meta

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
)

// SnapshotVersion is the version of the Snapshot layout Restore reads.
const SnapshotVersion = 1

// Snapshot is the whole state as plain data, every list in a fixed order,
// so that equal states give byte-equal JSON. It is what the metadata
// node's Raft snapshot holds, and what a broker that fell behind the log's
// compaction starts from.
type Snapshot struct {
	Version int             `json:"version"`
	Brokers []Broker        `json:"brokers"`
	Groups  []Group         `json:"groups"`
	Topics  []SnapshotTopic `json:"topics"`
	Configs []ConfigRecord  `json:"configs"`
	// Security is every security store's keys, by store and key.
	Security       []SecurityRecord `json:"security,omitempty"`
	NextProducerID int64            `json:"nextProducerId"`
}

// SnapshotTopic is a topic in a Snapshot; its partitions are in order.
type SnapshotTopic struct {
	ID         UUID             `json:"id"`
	Name       string           `json:"name"`
	Partitions []PartitionState `json:"partitions"`
}

// Snapshot returns the state as a Snapshot, sharing nothing with it.
func (s *State) Snapshot() Snapshot {
	snap := Snapshot{Version: SnapshotVersion, Brokers: s.Brokers(), NextProducerID: s.nextProducerID}
	for _, g := range s.Groups() {
		snap.Groups = append(snap.Groups, g)
	}
	for _, name := range s.topicNames() {
		t := s.topics[s.names[name]]
		snap.Topics = append(snap.Topics, SnapshotTopic{ID: t.id, Name: t.name, Partitions: slices.Clone(t.parts)})
	}
	for k, m := range s.configs {
		for name, v := range m {
			snap.Configs = append(snap.Configs, ConfigRecord{ResourceType: k.typ, ResourceName: k.name, Name: name, Value: v})
		}
	}
	slices.SortFunc(snap.Configs, func(a, b ConfigRecord) int {
		return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), cmp.Compare(a.ResourceName, b.ResourceName), cmp.Compare(a.Name, b.Name))
	})
	for store, m := range s.security {
		for k, v := range m {
			snap.Security = append(snap.Security, SecurityRecord{Store: store, Key: []byte(k), Value: slices.Clone(v)})
		}
	}
	slices.SortFunc(snap.Security, func(a, b SecurityRecord) int {
		return cmp.Or(cmp.Compare(a.Store, b.Store), bytes.Compare(a.Key, b.Key))
	})
	return snap
}

// Restore builds the state a Snapshot describes. It checks everything
// Apply would have: a snapshot that no log could have produced (a
// partition owned by an unknown group, two topics of one name, a producer
// id block out of step) is refused rather than served from.
func Restore(snap Snapshot) (*State, error) {
	if snap.Version != SnapshotVersion {
		return nil, fmt.Errorf("metadata snapshot: version %d, want %d", snap.Version, SnapshotVersion)
	}
	s := New()
	for _, g := range snap.Groups {
		if _, dup := s.groups[g.ID]; dup {
			return nil, fmt.Errorf("metadata snapshot: group %q twice", g.ID)
		}
		if g.Leader == -1 {
			// Known from a registration only, never published.
			if err := validName(g.ID); err != nil || g.Term != 0 || len(g.ISR) != 0 {
				return nil, fmt.Errorf("metadata snapshot: group %q: unpublished group with a state", g.ID)
			}
			s.groups[g.ID] = Group{ID: g.ID, Leader: -1}
			continue
		}
		if err := s.Apply(GroupStateRecord{GroupID: g.ID, Leader: g.Leader, Term: g.Term, ISR: g.ISR}); err != nil {
			return nil, fmt.Errorf("metadata snapshot: %v", err)
		}
		if !slices.IsSorted(g.ISR) {
			return nil, fmt.Errorf("metadata snapshot: group %q: ISR %v not sorted", g.ID, g.ISR)
		}
	}
	groups := len(s.groups)
	for _, b := range snap.Brokers {
		if _, dup := s.brokers[b.ID]; dup {
			return nil, fmt.Errorf("metadata snapshot: broker %d twice", b.ID)
		}
		err := s.Apply(RegisterBrokerRecord{BrokerID: b.ID, GroupID: b.Group, IncarnationID: b.Incarnation, ClientAddress: b.ClientAddress, ReplicationAddress: b.ReplicationAddress, Machine: b.Machine, LeaseExpiryMs: b.LeaseExpiryMs})
		if err != nil {
			return nil, fmt.Errorf("metadata snapshot: %v", err)
		}
		if len(s.groups) != groups {
			return nil, fmt.Errorf("metadata snapshot: broker %d: group %q is not in the groups", b.ID, b.Group)
		}
	}
	for _, t := range snap.Topics {
		if err := s.Apply(TopicRecord{Name: t.Name, TopicID: t.ID}); err != nil {
			return nil, fmt.Errorf("metadata snapshot: %v", err)
		}
		for i, p := range t.Partitions {
			if err := s.checkPartitionState(p); err != nil {
				return nil, fmt.Errorf("metadata snapshot: %s/%d: %v", t.Name, i, err)
			}
		}
		s.topics[t.ID].parts = slices.Clone(t.Partitions)
	}
	for _, c := range snap.Configs {
		if c.Value == "" {
			return nil, fmt.Errorf("metadata snapshot: %s %q: config %q without a value", c.ResourceType, c.ResourceName, c.Name)
		}
		if _, dup := s.configs[configKey{c.ResourceType, c.ResourceName}][c.Name]; dup {
			return nil, fmt.Errorf("metadata snapshot: %s %q: config %q twice", c.ResourceType, c.ResourceName, c.Name)
		}
		if err := s.Apply(c); err != nil {
			return nil, fmt.Errorf("metadata snapshot: %v", err)
		}
	}
	for _, r := range snap.Security {
		if len(r.Value) == 0 {
			return nil, fmt.Errorf("metadata snapshot: security store %s: key %q without a value", r.Store, r.Key)
		}
		if _, dup := s.security[r.Store][string(r.Key)]; dup {
			return nil, fmt.Errorf("metadata snapshot: security store %s: key %q twice", r.Store, r.Key)
		}
		if err := s.Apply(r); err != nil {
			return nil, fmt.Errorf("metadata snapshot: %v", err)
		}
	}
	if snap.NextProducerID < 0 || snap.NextProducerID%ProducerIdBlockSize != 0 {
		return nil, fmt.Errorf("metadata snapshot: next producer id %d is not a block boundary", snap.NextProducerID)
	}
	s.nextProducerID = snap.NextProducerID
	return s, nil
}

// checkPartitionState checks that p is a state the move state machine can
// reach with the groups s knows.
func (s *State) checkPartitionState(p PartitionState) error {
	g, ok := s.groups[p.Owner]
	if !ok {
		return fmt.Errorf("unknown owner group %q", p.Owner)
	}
	if _, ok := LeaderEpoch(p.EpochBase, g.Term); !ok {
		return fmt.Errorf("epoch base %d out of range at term %d", p.EpochBase, g.Term)
	}
	_, srcKnown := s.groups[p.Source]
	_, dstKnown := s.groups[p.Target]
	switch p.Move {
	case MoveNone:
		if p.Source != "" || p.Target != "" || p.FenceOffset != 0 {
			return fmt.Errorf("move fields without a move")
		}
	case MoveCopying:
		if p.Source != p.Owner || p.Target == p.Owner || !dstKnown || p.FenceOffset != 0 {
			return fmt.Errorf("copying %q → %q with owner %q", p.Source, p.Target, p.Owner)
		}
	case MoveCutOver:
		if p.Target != p.Owner || p.Source == p.Owner || !srcKnown || p.FenceOffset < 0 {
			return fmt.Errorf("cut over %q → %q with owner %q", p.Source, p.Target, p.Owner)
		}
	default:
		return fmt.Errorf("unknown move state %q", p.Move)
	}
	return nil
}
