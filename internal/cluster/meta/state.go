package meta

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Broker is a registered broker: its latest RegisterBrokerRecord.
type Broker struct {
	ID                 int32  `json:"id"`
	Group              string `json:"group"`
	Incarnation        UUID   `json:"incarnation"`
	ClientAddress      string `json:"clientAddress"`
	ReplicationAddress string `json:"replicationAddress"`
	Machine            string `json:"machine,omitempty"`
	LeaseExpiryMs      int64  `json:"leaseExpiryMs"`
}

// Live reports whether the broker's lease still runs at nowMs. A broker
// whose lease ran out stays registered (it may renew) but is left out of
// what clients are told.
func (b Broker) Live(nowMs int64) bool { return nowMs < b.LeaseExpiryMs }

// Group is a known replication group and its latest published state.
// Until the group publishes a GroupStateRecord, Leader is -1 (Kafka's "no
// leader"), Term 0 and ISR empty.
type Group struct {
	ID     string  `json:"id"`
	Leader int32   `json:"leader"`
	Term   int32   `json:"term"`
	ISR    []int32 `json:"isr,omitempty"`
}

// PartitionState is what the metadata log holds about one partition.
type PartitionState struct {
	Owner     string    `json:"owner"`
	EpochBase int32     `json:"epochBase"`
	Move      MoveState `json:"move"`
	// Source and Target are the move's groups while Move is not none.
	Source string `json:"source,omitempty"`
	Target string `json:"target,omitempty"`
	// FenceOffset is the old owner's log end at the fence, while Move is
	// cut-over: the new owner has every record below it.
	FenceOffset int64 `json:"fenceOffset,omitempty"`
	// MoveSeq numbers the partition's moves: a move's start takes the
	// next number and every later step of it must carry that number, so
	// a step of a move that was cancelled (and perhaps started again)
	// cannot land on the one in progress. It stays after the move ends.
	MoveSeq int64 `json:"moveSeq,omitempty"`
}

// Partition is one partition as the queries return it.
type Partition struct {
	Partition int32
	PartitionState
	// LeaderEpoch is the epoch exposed to clients: EpochBase plus the
	// owner's term.
	LeaderEpoch int32
}

// Topic is a topic with its partitions, in order.
type Topic struct {
	ID         UUID
	Name       string
	Partitions []Partition
}

// Move is a move in progress.
type Move struct {
	TopicID   UUID
	Topic     string
	Partition int32
	State     MoveState
	Source    string
	Target    string
}

// State is the metadata image: what the applied prefix of the metadata log
// says. Apply and ApplyBatch are its only mutators; everything else reads.
// Iteration order never leaks into a result: the same log gives the same
// state, and the same answers, on every broker.
type State struct {
	brokers        map[int32]Broker
	groups         map[string]Group
	topics         map[UUID]*topic
	names          map[string]UUID
	configs        map[configKey]map[string]string
	security       map[SecurityStore]map[string][]byte
	nextProducerID int64
}

type topic struct {
	id    UUID
	name  string
	parts []PartitionState
}

type configKey struct {
	typ  ResourceType
	name string
}

// New returns the state of an empty metadata log.
func New() *State {
	return &State{
		brokers:  map[int32]Broker{},
		groups:   map[string]Group{},
		topics:   map[UUID]*topic{},
		names:    map[string]UUID{},
		configs:  map[configKey]map[string]string{},
		security: map[SecurityStore]map[string][]byte{},
	}
}

// clone is a deep copy. Group ISR slices are shared: they are replaced,
// never written in place.
func (s *State) clone() *State {
	c := New()
	for k, v := range s.brokers {
		c.brokers[k] = v
	}
	for k, v := range s.groups {
		c.groups[k] = v
	}
	for k, v := range s.topics {
		c.topics[k] = &topic{id: v.id, name: v.name, parts: slices.Clone(v.parts)}
	}
	for k, v := range s.names {
		c.names[k] = v
	}
	for k, v := range s.configs {
		m := make(map[string]string, len(v))
		for kk, vv := range v {
			m[kk] = vv
		}
		c.configs[k] = m
	}
	for k, v := range s.security {
		c.security[k] = maps.Clone(v) // values are replaced, never written in place
	}
	c.nextProducerID = s.nextProducerID
	return c
}

// Apply applies one committed record. A record that does not fit the
// current state is refused with an *Error and changes nothing; the applier
// logs it and goes on, as every other broker does with the same record.
func (s *State) Apply(r Record) error { return s.apply(r, true) }

// Check reports whether Apply would accept r now, without applying it.
func (s *State) Check(r Record) error { return s.apply(r, false) }

// ApplyBatch applies the records of one entry all or nothing: if one is
// refused, none is applied. That keeps a topic from being created without
// its partitions, and two racing CreatePartitions from both half-applying.
func (s *State) ApplyBatch(records []Record) error {
	if len(records) == 1 {
		return s.Apply(records[0])
	}
	if len(records) == 0 {
		return refuse(kerr.InvalidRequest, "empty batch")
	}
	c := s.clone()
	for i, r := range records {
		if err := c.Apply(r); err != nil {
			if e, ok := err.(*Error); ok {
				return &Error{Code: e.Code, Msg: fmt.Sprintf("batch record %d (%s): %s", i, r.Type(), e.Msg)}
			}
			return err
		}
	}
	*s = *c
	return nil
}

func (s *State) apply(r Record, commit bool) error {
	switch r := r.(type) {
	case RegisterBrokerRecord:
		return s.registerBroker(r, commit)
	case TopicRecord:
		return s.addTopic(r, commit)
	case RemoveTopicRecord:
		return s.removeTopic(r, commit)
	case PartitionRecord:
		return s.addPartition(r, commit)
	case PartitionChangeRecord:
		return s.changePartition(r, commit)
	case ConfigRecord:
		return s.setConfig(r, commit)
	case ProducerIdsRecord:
		return s.allocateProducerIDs(r, commit)
	case GroupStateRecord:
		return s.setGroupState(r, commit)
	case SecurityRecord:
		return s.setSecurity(r, commit)
	case nil:
		return refuse(kerr.InvalidRequest, "nil record")
	}
	return refuse(kerr.InvalidRequest, "unknown record type %T", r)
}

func (s *State) registerBroker(r RegisterBrokerRecord, commit bool) error {
	switch {
	case r.BrokerID < 0:
		return refuse(kerr.InvalidRequest, "broker id %d is negative", r.BrokerID)
	case validName(r.GroupID) != nil:
		return refuse(kerr.InvalidRequest, "broker %d: group id: %v", r.BrokerID, validName(r.GroupID))
	case r.IncarnationID.IsZero():
		return refuse(kerr.InvalidRequest, "broker %d: zero incarnation id", r.BrokerID)
	case r.ClientAddress == "" || r.ReplicationAddress == "":
		return refuse(kerr.InvalidRequest, "broker %d: missing address", r.BrokerID)
	case r.LeaseExpiryMs < 0:
		return refuse(kerr.InvalidRequest, "broker %d: negative lease expiry", r.BrokerID)
	}
	// A process keeps its group for its whole life; the same incarnation
	// in another group is a second process that drew the same id.
	if b, ok := s.brokers[r.BrokerID]; ok && b.Incarnation == r.IncarnationID && b.Group != r.GroupID {
		return refuse(kerr.DuplicateBrokerRegistration, "broker %d incarnation %s is in group %s, not %s", r.BrokerID, r.IncarnationID, b.Group, r.GroupID)
	}
	// An ended lease (expiry 0, a clean stop) stays ended for its
	// incarnation: a renewal the broker sent just before it stopped can
	// reach the log after the end, and would list a stopped broker for a
	// whole lease. The check is here, not only in RegisterBroker, because
	// that renewal may have been checked before the end applied.
	if b, ok := s.brokers[r.BrokerID]; ok && b.Incarnation == r.IncarnationID && b.LeaseExpiryMs == 0 && r.LeaseExpiryMs != 0 {
		return refuse(kerr.StaleBrokerEpoch, "broker %d incarnation %s ended its lease when it stopped", r.BrokerID, r.IncarnationID)
	}
	if !commit {
		return nil
	}
	s.brokers[r.BrokerID] = Broker{
		ID:                 r.BrokerID,
		Group:              r.GroupID,
		Incarnation:        r.IncarnationID,
		ClientAddress:      r.ClientAddress,
		ReplicationAddress: r.ReplicationAddress,
		Machine:            r.Machine,
		LeaseExpiryMs:      r.LeaseExpiryMs,
	}
	if _, ok := s.groups[r.GroupID]; !ok {
		s.groups[r.GroupID] = Group{ID: r.GroupID, Leader: -1}
	}
	return nil
}

func (s *State) addTopic(r TopicRecord, commit bool) error {
	if err := validName(r.Name); err != nil {
		return refuse(kerr.InvalidTopicException, "%v", err)
	}
	if r.TopicID.IsZero() {
		return refuse(kerr.InvalidRequest, "topic %q: zero topic id", r.Name)
	}
	if _, ok := s.names[r.Name]; ok {
		return refuse(kerr.TopicAlreadyExists, "topic %q already exists", r.Name)
	}
	if t, ok := s.topics[r.TopicID]; ok {
		return refuse(kerr.TopicAlreadyExists, "topic id %s is taken by topic %q", r.TopicID, t.name)
	}
	if commit {
		s.topics[r.TopicID] = &topic{id: r.TopicID, name: r.Name}
		s.names[r.Name] = r.TopicID
	}
	return nil
}

func (s *State) removeTopic(r RemoveTopicRecord, commit bool) error {
	t, ok := s.topics[r.TopicID]
	if !ok {
		return refuse(kerr.UnknownTopicOrPartition, "no topic with id %s", r.TopicID)
	}
	if t.name != r.Name {
		return refuse(kerr.UnknownTopicOrPartition, "topic id %s is %q, not %q", r.TopicID, t.name, r.Name)
	}
	if commit {
		delete(s.topics, r.TopicID)
		delete(s.names, r.Name)
		delete(s.configs, configKey{ResourceTopic, r.Name})
	}
	return nil
}

func (s *State) addPartition(r PartitionRecord, commit bool) error {
	t, ok := s.topics[r.TopicID]
	if !ok {
		return refuse(kerr.UnknownTopicOrPartition, "no topic with id %s", r.TopicID)
	}
	if n := int32(len(t.parts)); r.Partition != n {
		return refuse(kerr.InvalidPartitions, "topic %q has %d partitions: the next is %d, not %d", t.name, n, n, r.Partition)
	}
	if len(t.parts) == math.MaxInt32 {
		return refuse(kerr.InvalidPartitions, "topic %q has the most partitions a topic can have", t.name)
	}
	g, ok := s.groups[r.Owner]
	if !ok {
		return refuse(kerr.InvalidReplicaAssignment, "%s/%d: unknown group %q", t.name, r.Partition, r.Owner)
	}
	if r.EpochBase < 0 {
		return refuse(kerr.InvalidRequest, "%s/%d: negative epoch base %d", t.name, r.Partition, r.EpochBase)
	}
	if _, ok := LeaderEpoch(r.EpochBase, g.Term); !ok {
		return refuse(kerr.InvalidRequest, "%s/%d: epoch base %d overflows at term %d", t.name, r.Partition, r.EpochBase, g.Term)
	}
	if commit {
		t.parts = append(t.parts, PartitionState{Owner: r.Owner, EpochBase: r.EpochBase, Move: MoveNone})
	}
	return nil
}

func (s *State) changePartition(r PartitionChangeRecord, commit bool) error {
	t, ok := s.topics[r.TopicID]
	if !ok {
		return refuse(kerr.UnknownTopicOrPartition, "no topic with id %s", r.TopicID)
	}
	if r.Partition < 0 || int(r.Partition) >= len(t.parts) {
		return refuse(kerr.UnknownTopicOrPartition, "topic %q has no partition %d", t.name, r.Partition)
	}
	next, err := s.nextPartitionState(t.parts[r.Partition], r)
	if err != nil {
		err.Msg = fmt.Sprintf("%s/%d: %s", t.name, r.Partition, err.Msg)
		return err
	}
	if commit {
		t.parts[r.Partition] = next
	}
	return nil
}

// nextPartitionState is the move state machine: none → copying →
// cut-over → none, and copying → none for a cancel. Ownership changes at
// the cut-over only.
func (s *State) nextPartitionState(cur PartitionState, r PartitionChangeRecord) (PartitionState, *Error) {
	var zero PartitionState
	if r.Move != MoveNone && r.Move != MoveCopying && r.Move != MoveCutOver {
		return zero, refuse(kerr.InvalidRequest, "unknown move state %q", r.Move)
	}
	if r.FenceEpoch < 0 || r.FenceOffset < 0 {
		return zero, refuse(kerr.InvalidRequest, "negative fence epoch or offset")
	}
	fenced := r.FenceEpoch != 0 || r.FenceOffset != 0
	switch {
	case r.Move == MoveCopying && r.MoveSeq != cur.MoveSeq+1:
		return zero, refuse(kerr.InvalidRequest, "a move starts as move %d, not %d", cur.MoveSeq+1, r.MoveSeq)
	case r.Move != MoveCopying && r.MoveSeq != cur.MoveSeq:
		return zero, refuse(kerr.NoReassignmentInProgress, "move %d is not the partition's latest, %d", r.MoveSeq, cur.MoveSeq)
	}
	switch {
	case r.Move == MoveCopying && cur.Move != MoveNone:
		return zero, refuse(kerr.ReassignmentInProgress, "a move to %s is %s", cur.Target, cur.Move)
	case r.Move != MoveCopying && cur.Move == MoveNone:
		return zero, refuse(kerr.NoReassignmentInProgress, "no move in progress")
	case r.Move == MoveCutOver && cur.Move == MoveCutOver:
		return zero, refuse(kerr.InvalidRequest, "already cut over to %s", cur.Owner)

	case r.Move == MoveCopying: // start, from none
		switch {
		case r.Owner != cur.Owner || r.EpochBase != cur.EpochBase || r.Source != cur.Owner:
			return zero, refuse(kerr.InvalidRequest, "a move starts from the owner %s at base %d", cur.Owner, cur.EpochBase)
		case r.Target == cur.Owner:
			return zero, refuse(kerr.InvalidReplicaAssignment, "already owned by %s", cur.Owner)
		case fenced:
			return zero, refuse(kerr.InvalidRequest, "fence set on a move's start")
		}
		if _, ok := s.groups[r.Target]; !ok {
			return zero, refuse(kerr.InvalidReplicaAssignment, "unknown group %q", r.Target)
		}
		return PartitionState{Owner: cur.Owner, EpochBase: cur.EpochBase, Move: MoveCopying, Source: r.Source, Target: r.Target, MoveSeq: r.MoveSeq}, nil

	case r.Move == MoveNone: // cancel from copying, finish from cut-over
		switch {
		case r.Owner != cur.Owner || r.EpochBase != cur.EpochBase:
			return zero, refuse(kerr.InvalidRequest, "owner %s at base %d, not %s at %d", cur.Owner, cur.EpochBase, r.Owner, r.EpochBase)
		case r.Source != "" || r.Target != "" || fenced:
			return zero, refuse(kerr.InvalidRequest, "move fields set on a partition without a move")
		}
		return PartitionState{Owner: cur.Owner, EpochBase: cur.EpochBase, Move: MoveNone, MoveSeq: cur.MoveSeq}, nil
	}

	// The cut-over, from copying.
	switch {
	case r.Source != cur.Source || r.Target != cur.Target:
		return zero, refuse(kerr.InvalidRequest, "the move in progress is %s → %s, not %s → %s", cur.Source, cur.Target, r.Source, r.Target)
	case r.Owner != cur.Target:
		return zero, refuse(kerr.InvalidRequest, "a cut-over makes the target %s the owner, not %s", cur.Target, r.Owner)
	}
	// The highest epoch the old owner exposed: what it says it fenced at,
	// or what this state has told clients if that is higher (its group
	// may have published a later term since the fence).
	highest := max(s.leaderEpoch(cur), r.FenceEpoch)
	term := s.groups[cur.Target].Term
	e, ok := LeaderEpoch(r.EpochBase, term)
	if !ok {
		return zero, refuse(kerr.InvalidRequest, "epoch base %d overflows at %s's term %d", r.EpochBase, cur.Target, term)
	}
	if e <= highest {
		return zero, refuse(kerr.FencedLeaderEpoch, "epoch base %d at %s's term %d exposes epoch %d, not above %d", r.EpochBase, cur.Target, term, e, highest)
	}
	return PartitionState{Owner: cur.Target, EpochBase: r.EpochBase, Move: MoveCutOver, Source: cur.Source, Target: cur.Target, FenceOffset: r.FenceOffset, MoveSeq: cur.MoveSeq}, nil
}

func (s *State) setSecurity(r SecurityRecord, commit bool) error {
	switch r.Store {
	case SecurityACLs, SecurityUsers:
	default:
		return refuse(kerr.InvalidRequest, "unknown security store %q", r.Store)
	}
	switch {
	case len(r.Key) == 0:
		return refuse(kerr.InvalidRequest, "security store %s: empty key", r.Store)
	case len(r.Key) > MaxSecurityKeyBytes || len(r.Value) > MaxSecurityValueBytes:
		return refuse(kerr.InvalidRequest, "security store %s: a key of %d or a value of %d bytes is over the bound", r.Store, len(r.Key), len(r.Value))
	}
	if !commit {
		return nil
	}
	k := string(r.Key)
	if len(r.Value) == 0 {
		delete(s.security[r.Store], k)
		if len(s.security[r.Store]) == 0 {
			delete(s.security, r.Store)
		}
		return nil
	}
	if s.security[r.Store] == nil {
		s.security[r.Store] = map[string][]byte{}
	}
	s.security[r.Store][k] = slices.Clone(r.Value)
	return nil
}

// Security returns a security store's keys and values, sharing nothing
// with the state.
func (s *State) Security(store SecurityStore) map[string][]byte {
	out := make(map[string][]byte, len(s.security[store]))
	for k, v := range s.security[store] {
		out[k] = slices.Clone(v)
	}
	return out
}

func (s *State) setConfig(r ConfigRecord, commit bool) error {
	switch r.ResourceType {
	case ResourceTopic:
		if _, ok := s.names[r.ResourceName]; !ok {
			return refuse(kerr.UnknownTopicOrPartition, "no topic %q", r.ResourceName)
		}
	case ResourceBroker:
		if r.ResourceName != "" {
			if id, err := strconv.ParseInt(r.ResourceName, 10, 32); err != nil || id < 0 || strconv.FormatInt(id, 10) != r.ResourceName {
				return refuse(kerr.InvalidRequest, "broker resource %q is not a broker id", r.ResourceName)
			}
		}
	default:
		return refuse(kerr.InvalidRequest, "unknown resource type %q", r.ResourceType)
	}
	if r.Name == "" {
		return refuse(kerr.InvalidConfig, "%s %q: empty config name", r.ResourceType, r.ResourceName)
	}
	if !commit {
		return nil
	}
	k := configKey{r.ResourceType, r.ResourceName}
	if r.Value == "" {
		delete(s.configs[k], r.Name)
		if len(s.configs[k]) == 0 {
			delete(s.configs, k)
		}
		return nil
	}
	if s.configs[k] == nil {
		s.configs[k] = map[string]string{}
	}
	s.configs[k][r.Name] = r.Value
	return nil
}

func (s *State) allocateProducerIDs(r ProducerIdsRecord, commit bool) error {
	if r.BrokerID < 0 {
		return refuse(kerr.InvalidRequest, "broker id %d is negative", r.BrokerID)
	}
	if s.nextProducerID > math.MaxInt64-ProducerIdBlockSize {
		return refuse(kerr.InvalidRequest, "producer ids exhausted")
	}
	// Exactly one block: a block proposed against a state another block
	// has since advanced is refused, never handed out twice.
	if want := s.nextProducerID + ProducerIdBlockSize; r.NextProducerID != want {
		return refuse(kerr.InvalidRequest, "next producer id %d, want %d", r.NextProducerID, want)
	}
	if commit {
		s.nextProducerID = r.NextProducerID
	}
	return nil
}

func (s *State) setGroupState(r GroupStateRecord, commit bool) error {
	if err := validName(r.GroupID); err != nil {
		return refuse(kerr.InvalidRequest, "group id: %v", err)
	}
	if r.Term < 0 || r.Leader < 0 {
		return refuse(kerr.InvalidRequest, "group %s: negative term or leader", r.GroupID)
	}
	isr := slices.Clone(r.ISR)
	slices.Sort(isr)
	if len(isr) == 0 || isr[0] < 0 || len(slices.Compact(slices.Clone(isr))) != len(isr) || !slices.Contains(isr, r.Leader) {
		return refuse(kerr.InvalidRequest, "group %s: ISR %v must be distinct broker ids including the leader %d", r.GroupID, r.ISR, r.Leader)
	}
	cur, known := s.groups[r.GroupID]
	if known {
		if r.Term < cur.Term {
			return refuse(kerr.FencedLeaderEpoch, "group %s: term %d is below %d", r.GroupID, r.Term, cur.Term)
		}
		if r.Term == cur.Term && cur.Leader >= 0 && r.Leader != cur.Leader {
			return refuse(kerr.FencedLeaderEpoch, "group %s: term %d is led by %d, not %d", r.GroupID, r.Term, cur.Leader, r.Leader)
		}
	}
	for _, t := range s.topics {
		for p, ps := range t.parts {
			if _, ok := LeaderEpoch(ps.EpochBase, r.Term); ps.Owner == r.GroupID && !ok {
				return refuse(kerr.InvalidRequest, "group %s: term %d overflows the epoch of %s/%d", r.GroupID, r.Term, t.name, p)
			}
		}
	}
	if commit {
		s.groups[r.GroupID] = Group{ID: r.GroupID, Leader: r.Leader, Term: r.Term, ISR: isr}
	}
	return nil
}

// leaderEpoch is the epoch p exposes. Apply keeps it in range.
func (s *State) leaderEpoch(p PartitionState) int32 {
	e, _ := LeaderEpoch(p.EpochBase, s.groups[p.Owner].Term)
	return e
}

// validName is Kafka's rule for topic names, used for group ids too.
func validName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("name %q is not allowed", name)
	}
	if len(name) > 249 {
		return fmt.Errorf("name is longer than 249 characters")
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("name %q may only contain ASCII letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// Topic returns the topic named name.
func (s *State) Topic(name string) (Topic, bool) {
	id, ok := s.names[name]
	if !ok {
		return Topic{}, false
	}
	return s.TopicByID(id)
}

// TopicByID returns the topic with id.
func (s *State) TopicByID(id UUID) (Topic, bool) {
	t, ok := s.topics[id]
	if !ok {
		return Topic{}, false
	}
	out := Topic{ID: t.id, Name: t.name, Partitions: make([]Partition, len(t.parts))}
	for i, p := range t.parts {
		out.Partitions[i] = Partition{Partition: int32(i), PartitionState: p, LeaderEpoch: s.leaderEpoch(p)}
	}
	return out, true
}

// Topics returns every topic, by name.
func (s *State) Topics() []Topic {
	out := make([]Topic, 0, len(s.topics))
	for _, name := range s.topicNames() {
		t, _ := s.Topic(name)
		out = append(out, t)
	}
	return out
}

func (s *State) topicNames() []string {
	names := make([]string, 0, len(s.names))
	for n := range s.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Partition returns one partition of the topic with id.
func (s *State) Partition(id UUID, partition int32) (Partition, bool) {
	t, ok := s.topics[id]
	if !ok || partition < 0 || int(partition) >= len(t.parts) {
		return Partition{}, false
	}
	p := t.parts[partition]
	return Partition{Partition: partition, PartitionState: p, LeaderEpoch: s.leaderEpoch(p)}, true
}

// Broker returns the registration of broker id, live or not.
func (s *State) Broker(id int32) (Broker, bool) {
	b, ok := s.brokers[id]
	return b, ok
}

// Brokers returns every registered broker, live or not, by id.
func (s *State) Brokers() []Broker { return s.brokersWhere(func(Broker) bool { return true }) }

// LiveBrokers returns the brokers whose lease runs at nowMs, by id: the
// brokers Metadata lists.
func (s *State) LiveBrokers(nowMs int64) []Broker {
	return s.brokersWhere(func(b Broker) bool { return b.Live(nowMs) })
}

// GroupBrokers returns the live brokers of group at nowMs, by id: a
// partition's replicas in Metadata.
func (s *State) GroupBrokers(group string, nowMs int64) []Broker {
	return s.brokersWhere(func(b Broker) bool { return b.Group == group && b.Live(nowMs) })
}

func (s *State) brokersWhere(keep func(Broker) bool) []Broker {
	var out []Broker
	for _, b := range s.brokers {
		if keep(b) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Broker) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Group returns a known group: one a broker registered in or a
// GroupStateRecord named. Groups are never forgotten.
func (s *State) Group(id string) (Group, bool) {
	g, ok := s.groups[id]
	g.ISR = slices.Clone(g.ISR)
	return g, ok
}

// Groups returns every known group, by id.
func (s *State) Groups() []Group {
	out := make([]Group, 0, len(s.groups))
	for _, g := range s.groups {
		g.ISR = slices.Clone(g.ISR)
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Configs returns the configs set on a resource (a copy; empty when none).
func (s *State) Configs(typ ResourceType, name string) map[string]string {
	out := map[string]string{}
	for k, v := range s.configs[configKey{typ, name}] {
		out[k] = v
	}
	return out
}

// NextProducerID is the first id of the next producer-id block: every id
// below it has been handed out.
func (s *State) NextProducerID() int64 { return s.nextProducerID }

// Moves returns the moves in progress, by topic name and partition.
func (s *State) Moves() []Move {
	var out []Move
	for _, name := range s.topicNames() {
		t := s.topics[s.names[name]]
		for i, p := range t.parts {
			if p.Move != MoveNone {
				out = append(out, Move{TopicID: t.id, Topic: t.name, Partition: int32(i), State: p.Move, Source: p.Source, Target: p.Target})
			}
		}
	}
	return out
}
