package meta

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The commands below are what the metadata leader runs, against its
// applied state, before it proposes: each returns the records to propose
// or the refusal to answer the request with. They change nothing. A
// command's records always apply to the state it ran on; they may still
// be refused when they commit, if another proposal committed first (two
// CreateTopics of one name): Apply decides, the same way on every broker.

// Placement says which groups new partitions go to.
type Placement struct {
	// Groups, when set, names the owner of each new partition in order:
	// a manual assignment. Any known group will do, live or not.
	Groups []string
	// RoundRobin deals the partitions over the live groups in turn,
	// starting at a group chosen by the topic's name so that the first
	// partitions of all topics do not land on one group. Otherwise each
	// partition goes to the live group holding the fewest partitions of
	// topics other than the internal ones (names starting with "__"),
	// ties to the lowest group id.
	RoundRobin bool
}

// RegisterBroker checks a broker's registration or renewal at nowMs, by
// the metadata leader's clock. A new incarnation of a broker id whose
// previous incarnation's lease still runs is refused: two processes would
// share the id. Apply cannot make that check (it has no clock), so a
// restarted broker waits out its old lease or is refused until then.
func (s *State) RegisterBroker(r RegisterBrokerRecord, nowMs int64) (RegisterBrokerRecord, error) {
	if b, ok := s.brokers[r.BrokerID]; ok && b.Incarnation != r.IncarnationID && b.Live(nowMs) {
		return r, refuse(kerr.DuplicateBrokerRegistration, "broker %d is registered by incarnation %s until %d", r.BrokerID, b.Incarnation, b.LeaseExpiryMs)
	}
	return r, s.Check(r)
}

// CreateTopic returns the records creating topic name with id (chosen at
// random by the caller; the state machine draws no randomness), its
// configs and its partitions: one TopicRecord, then a ConfigRecord per
// config by key, then the PartitionRecords, to propose as one batch.
func (s *State) CreateTopic(id UUID, name string, partitions int32, configs map[string]string, p Placement, nowMs int64) ([]Record, error) {
	if err := validName(name); err != nil {
		return nil, refuse(kerr.InvalidTopicException, "%v", err)
	}
	if _, ok := s.names[name]; ok {
		return nil, refuse(kerr.TopicAlreadyExists, "topic %q already exists", name)
	}
	if partitions < 1 {
		return nil, refuse(kerr.InvalidPartitions, "topic %q: %d partitions", name, partitions)
	}
	recs := []Record{TopicRecord{Name: name, TopicID: id}}
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" || configs[k] == "" {
			return nil, refuse(kerr.InvalidConfig, "topic %q: config %q=%q", name, k, configs[k])
		}
		recs = append(recs, ConfigRecord{ResourceType: ResourceTopic, ResourceName: name, Name: k, Value: configs[k]})
	}
	parts, err := s.placePartitions(id, name, 0, partitions, p, nowMs)
	if err != nil {
		return nil, err
	}
	return s.checked(append(recs, parts...))
}

// CreatePartitions returns the PartitionRecords that take topic name to
// total partitions.
func (s *State) CreatePartitions(name string, total int32, p Placement, nowMs int64) ([]Record, error) {
	id, ok := s.names[name]
	if !ok {
		return nil, refuse(kerr.UnknownTopicOrPartition, "no topic %q", name)
	}
	have := int32(len(s.topics[id].parts))
	if total <= have {
		return nil, refuse(kerr.InvalidPartitions, "topic %q has %d partitions, not fewer than %d", name, have, total)
	}
	recs, err := s.placePartitions(id, name, have, total-have, p, nowMs)
	if err != nil {
		return nil, err
	}
	return s.checked(recs)
}

// MaxPartitionsPerCommand bounds the partitions one CreateTopic or
// CreatePartitions adds, as KRaft bounds the records of one operation: a
// single request must not make the metadata leader build an unbounded
// batch.
const MaxPartitionsPerCommand = 10000

// placePartitions returns PartitionRecords for n partitions from first.
func (s *State) placePartitions(id UUID, name string, first, n int32, p Placement, nowMs int64) ([]Record, error) {
	if n > MaxPartitionsPerCommand {
		return nil, refuse(kerr.PolicyViolation, "topic %q: %d partitions in one request, at most %d", name, n, MaxPartitionsPerCommand)
	}
	if int64(first)+int64(n) > math.MaxInt32 {
		return nil, refuse(kerr.InvalidPartitions, "topic %q: too many partitions", name)
	}
	owners := make([]string, 0, n)
	switch {
	case p.Groups != nil:
		if len(p.Groups) != int(n) {
			return nil, refuse(kerr.InvalidReplicaAssignment, "topic %q: %d groups for %d partitions", name, len(p.Groups), n)
		}
		for _, g := range p.Groups {
			if _, ok := s.groups[g]; !ok {
				return nil, refuse(kerr.InvalidReplicaAssignment, "topic %q: unknown group %q", name, g)
			}
		}
		owners = append(owners, p.Groups...)
	default:
		live := s.liveGroups(nowMs)
		if len(live) == 0 {
			return nil, refuse(kerr.BrokerNotAvailable, "topic %q: no group has a live broker", name)
		}
		draining := s.DrainingGroups()
		live = slices.DeleteFunc(live, func(g string) bool { return slices.Contains(draining, g) })
		if len(live) == 0 {
			return nil, refuse(kerr.BrokerNotAvailable, "topic %q: every group with a live broker is draining (%s)", name, DrainingGroupsConfig)
		}
		if p.RoundRobin {
			h := fnv.New32a()
			h.Write([]byte(name))
			start := int64(h.Sum32() % uint32(len(live)))
			for i := int64(first); i < int64(first)+int64(n); i++ {
				owners = append(owners, live[(start+i)%int64(len(live))])
			}
			break
		}
		// Internal topics ("__" names: the coordinators', dealt round
		// robin on their own) are not counted, so that where they
		// landed does not pile a user topic onto one group.
		count := map[string]int{}
		for _, t := range s.topics {
			if strings.HasPrefix(t.name, "__") {
				continue
			}
			for _, ps := range t.parts {
				count[ps.Owner]++
			}
		}
		for range n {
			best := slices.MinFunc(live, func(a, b string) int {
				return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(a, b))
			})
			count[best]++
			owners = append(owners, best)
		}
	}
	recs := make([]Record, 0, n)
	for i, g := range owners {
		recs = append(recs, PartitionRecord{TopicID: id, Partition: first + int32(i), Owner: g})
	}
	return recs, nil
}

// liveGroups returns the known groups with a live broker at nowMs, by id:
// new partitions go only where someone can serve them (and, among those,
// not to a draining group).
func (s *State) liveGroups(nowMs int64) []string {
	var out []string
	for id := range s.groups {
		if len(s.GroupBrokers(id, nowMs)) > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// checked applies recs to a copy of the state: a command's output must
// apply as one batch where it was computed.
func (s *State) checked(recs []Record) ([]Record, error) {
	if err := s.clone().ApplyBatch(recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// DeleteTopic returns the record deleting topic name, its partitions,
// moves in progress and configs.
func (s *State) DeleteTopic(name string) (RemoveTopicRecord, error) {
	id, ok := s.names[name]
	if !ok {
		return RemoveTopicRecord{}, refuse(kerr.UnknownTopicOrPartition, "no topic %q", name)
	}
	r := RemoveTopicRecord{Name: name, TopicID: id}
	return r, s.Check(r)
}

// SetConfig returns the record setting key of a resource to value, or
// deleting it when value is empty.
func (s *State) SetConfig(typ ResourceType, name, key, value string) (ConfigRecord, error) {
	r := ConfigRecord{ResourceType: typ, ResourceName: name, Name: key, Value: value}
	return r, s.Check(r)
}

// AllocateProducerIDs returns the record handing the next block of
// producer ids to broker: ids from r.NextProducerID-ProducerIdBlockSize up
// to r.NextProducerID, once it is applied.
func (s *State) AllocateProducerIDs(broker int32) (ProducerIdsRecord, error) {
	r := ProducerIdsRecord{BrokerID: broker, NextProducerID: s.nextProducerID + ProducerIdBlockSize}
	if s.nextProducerID > math.MaxInt64-ProducerIdBlockSize {
		r.NextProducerID = 0
	}
	return r, s.Check(r)
}

// partitionFor finds a partition by topic name for the move commands.
func (s *State) partitionFor(name string, partition int32) (UUID, PartitionState, error) {
	id, ok := s.names[name]
	if !ok {
		return id, PartitionState{}, refuse(kerr.UnknownTopicOrPartition, "no topic %q", name)
	}
	t := s.topics[id]
	if partition < 0 || int(partition) >= len(t.parts) {
		return id, PartitionState{}, refuse(kerr.UnknownTopicOrPartition, "topic %q has no partition %d", name, partition)
	}
	return id, t.parts[partition], nil
}

// StartMove returns the record starting a move of a partition to group
// target: the target starts copying it while the owner goes on serving.
// A partition moves once at a time.
func (s *State) StartMove(name string, partition int32, target string) (PartitionChangeRecord, error) {
	id, p, err := s.partitionFor(name, partition)
	if err != nil {
		return PartitionChangeRecord{}, err
	}
	if slices.Contains(s.DrainingGroups(), target) {
		return PartitionChangeRecord{}, refuse(kerr.InvalidReplicaAssignment, "group %s is draining (%s): it takes no partition", target, DrainingGroupsConfig)
	}
	r := PartitionChangeRecord{TopicID: id, Partition: partition, Owner: p.Owner, EpochBase: p.EpochBase, Move: MoveCopying, Source: p.Owner, Target: target, MoveSeq: p.MoveSeq + 1}
	return r, s.Check(r)
}

// CutOver returns the record handing a partition that is being copied to
// its target, once the owner's leader has fenced it for move moveSeq at
// fenceEpoch (the highest epoch it exposed) and fenceOffset (its log
// end). The new epoch base puts the partition's epoch one above the higher
// of fenceEpoch and the epoch this state exposes for it, at the target's
// current term.
func (s *State) CutOver(name string, partition int32, moveSeq int64, fenceEpoch int32, fenceOffset int64) (PartitionChangeRecord, error) {
	id, p, err := s.partitionFor(name, partition)
	if err != nil {
		return PartitionChangeRecord{}, err
	}
	if p.Move == MoveNone {
		return PartitionChangeRecord{}, refuse(kerr.NoReassignmentInProgress, "%s/%d: no move in progress", name, partition)
	}
	highest := max(s.leaderEpoch(p), fenceEpoch)
	base, ok := CutOverBase(highest, s.groups[p.Target].Term)
	if !ok {
		return PartitionChangeRecord{}, refuse(kerr.InvalidRequest, "%s/%d: no epoch above %d", name, partition, highest)
	}
	r := PartitionChangeRecord{TopicID: id, Partition: partition, Owner: p.Target, EpochBase: base, Move: MoveCutOver, Source: p.Source, Target: p.Target, FenceEpoch: fenceEpoch, FenceOffset: fenceOffset, MoveSeq: moveSeq}
	return r, s.Check(r)
}

// FinishMove returns the record ending a cut-over move, once the old
// owner has deleted its copy.
func (s *State) FinishMove(name string, partition int32) (PartitionChangeRecord, error) {
	id, p, err := s.partitionFor(name, partition)
	if err != nil {
		return PartitionChangeRecord{}, err
	}
	if p.Move == MoveCopying {
		return PartitionChangeRecord{}, refuse(kerr.InvalidRequest, "%s/%d: the move to %s is not cut over yet", name, partition, p.Target)
	}
	r := PartitionChangeRecord{TopicID: id, Partition: partition, Owner: p.Owner, EpochBase: p.EpochBase, Move: MoveNone, MoveSeq: p.MoveSeq}
	return r, s.Check(r)
}

// CancelMove returns the record cancelling a move that is still copying;
// the target drops its copy. After the cut-over a move can only finish.
func (s *State) CancelMove(name string, partition int32) (PartitionChangeRecord, error) {
	id, p, err := s.partitionFor(name, partition)
	if err != nil {
		return PartitionChangeRecord{}, err
	}
	if p.Move == MoveCutOver {
		return PartitionChangeRecord{}, refuse(kerr.ReassignmentInProgress, "%s/%d: already cut over to %s; the move can only finish", name, partition, p.Owner)
	}
	r := PartitionChangeRecord{TopicID: id, Partition: partition, Owner: p.Owner, EpochBase: p.EpochBase, Move: MoveNone, MoveSeq: p.MoveSeq}
	return r, s.Check(r)
}
