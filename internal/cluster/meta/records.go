package meta

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// UUID is a 16-byte id written as Kafka writes its UUIDs: URL-safe base64
// without padding. Topic ids and broker incarnation ids are UUIDs; the
// zero UUID is never a valid id (Kafka reserves it too).
type UUID [16]byte

// String returns the id in Kafka's form.
func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// IsZero reports whether u is the zero UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// ParseUUID parses Kafka's form of a UUID.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return u, fmt.Errorf("uuid %q: %v", s, err)
	}
	if len(b) != len(u) {
		return u, fmt.Errorf("uuid %q: %d bytes, want 16", s, len(b))
	}
	copy(u[:], b)
	return u, nil
}

// MarshalText writes the id in Kafka's form, so that JSON shows the same
// string a Kafka client prints.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads Kafka's form of an id.
func (u *UUID) UnmarshalText(b []byte) error {
	v, err := ParseUUID(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// RecordType names a record in its envelope. The names are KRaft's, so
// that a later per-partition design can grow from the same records.
type RecordType string

// The record types of the metadata log.
const (
	TypeRegisterBroker  RecordType = "RegisterBrokerRecord"
	TypeTopic           RecordType = "TopicRecord"
	TypeRemoveTopic     RecordType = "RemoveTopicRecord"
	TypePartition       RecordType = "PartitionRecord"
	TypePartitionChange RecordType = "PartitionChangeRecord"
	TypeConfig          RecordType = "ConfigRecord"
	TypeProducerIds     RecordType = "ProducerIdsRecord"
	TypeGroupState      RecordType = "GroupStateRecord"
	TypeSecurity        RecordType = "SecurityRecord"
)

// Record is one entry of the metadata log: one of the *Record types of
// this package, by value.
type Record interface {
	// Type is the record's name in its envelope.
	Type() RecordType
}

// RegisterBrokerRecord registers a broker, or renews its lease. A broker
// writes it at start, with a fresh incarnation id, and again every few
// seconds with a later expiry.
type RegisterBrokerRecord struct {
	BrokerID int32  `json:"brokerId"`
	GroupID  string `json:"groupId"`
	// IncarnationID is random at each start of the process: a new one
	// means the broker restarted, the same one that it renews.
	IncarnationID      UUID   `json:"incarnationId"`
	ClientAddress      string `json:"clientAddress"`
	ReplicationAddress string `json:"replicationAddress"`
	// Machine names the machine the broker runs on (Cluster.Machine).
	Machine string `json:"machine,omitempty"`
	// LeaseExpiryMs is when, in Unix milliseconds, the broker stops being
	// listed in Metadata unless it renews. The metadata leader sets it,
	// on its own clock, when it proposes the record (metanode: its now
	// plus the lease the broker asks for). 0 means the broker ended its
	// lease when it stopped: the same incarnation cannot renew it.
	LeaseExpiryMs int64 `json:"leaseExpiryMs"`
}

// TopicRecord creates a topic. Its partitions follow as PartitionRecords
// in the same batch.
type TopicRecord struct {
	Name    string `json:"name"`
	TopicID UUID   `json:"topicId"`
}

// RemoveTopicRecord deletes a topic with its partitions, moves and
// configs. Name must be the topic's current name: a delete proposed for an
// id that names something else is refused rather than guessed at.
type RemoveTopicRecord struct {
	Name    string `json:"name"`
	TopicID UUID   `json:"topicId"`
}

// PartitionRecord adds a partition to a topic. Partitions are added in
// order, without gaps.
type PartitionRecord struct {
	TopicID   UUID  `json:"topicId"`
	Partition int32 `json:"partition"`
	// Owner is the group that serves the partition.
	Owner string `json:"ownerGroup"`
	// EpochBase is added to the owner's term to give the leader epoch the
	// partition exposes. A new partition starts at 0 or above.
	EpochBase int32 `json:"epochBase"`
}

// MoveState is where a partition is in a move between groups.
type MoveState string

// The move states. A move goes none → copying → cut-over → none, or
// copying → none when it is cancelled.
const (
	// MoveNone: no move; the owner serves the partition alone.
	MoveNone MoveState = "none"
	// MoveCopying: the target copies the partition from the owner, which
	// goes on serving it.
	MoveCopying MoveState = "copying"
	// MoveCutOver: the target owns and serves the partition; the source
	// deletes its copy.
	MoveCutOver MoveState = "cut-over"
)

// PartitionChangeRecord is a step of a move. It carries the partition's
// whole new state, not a delta, so that a step proposed against a state
// that has since moved on (a cancel racing a cut-over) no longer matches
// and is refused.
type PartitionChangeRecord struct {
	TopicID   UUID      `json:"topicId"`
	Partition int32     `json:"partition"`
	Owner     string    `json:"ownerGroup"`
	EpochBase int32     `json:"epochBase"`
	Move      MoveState `json:"moveState"`
	// Source is the group the partition moves from (the owner while
	// copying), Target the group it moves to (the owner after the
	// cut-over); both empty when Move is none.
	Source string `json:"sourceGroup,omitempty"`
	Target string `json:"targetGroup,omitempty"`
	// FenceEpoch and FenceOffset are set on the cut-over only: the
	// highest leader epoch the old owner exposed for the partition, and
	// its log end when it stopped appending. The old owner's leader knows
	// both once it has fenced the partition, even if its group's latest
	// term has not reached the metadata log yet.
	FenceEpoch  int32 `json:"fenceEpoch,omitempty"`
	FenceOffset int64 `json:"fenceOffset,omitempty"`
	// MoveSeq is the move's number (PartitionState.MoveSeq): the next on
	// a start, the current one on every other step.
	MoveSeq int64 `json:"moveSeq,omitempty"`
}

// ResourceType is the kind of thing a config belongs to.
type ResourceType string

// The config resource types.
const (
	ResourceTopic  ResourceType = "topic"
	ResourceBroker ResourceType = "broker"
)

// ConfigRecord sets one config key of a topic or a broker, or deletes it
// when Value is empty (so a config cannot be set to the empty string).
// A broker resource is named by its decimal id, or "" for the
// cluster-wide default, as in Kafka.
type ConfigRecord struct {
	ResourceType ResourceType `json:"resourceType"`
	ResourceName string       `json:"resourceName"`
	Name         string       `json:"name"`
	Value        string       `json:"value,omitempty"`
}

// ProducerIdBlockSize is how many producer ids one ProducerIdsRecord hands
// out, as the single-group broker's reservations.
const ProducerIdBlockSize = 1000

// ProducerIdsRecord hands out the block of producer ids just below
// NextProducerID, to BrokerID. Blocks are contiguous: NextProducerID is
// always exactly one block above the previous one, so no id is handed out
// twice.
type ProducerIdsRecord struct {
	BrokerID       int32 `json:"brokerId"`
	NextProducerID int64 `json:"nextProducerId"`
}

// GroupStateRecord is what a replication group's leader publishes on every
// change of leader or ISR: enough for every broker to answer Metadata for
// the group's partitions. Term is the group's leader epoch.
type GroupStateRecord struct {
	GroupID string  `json:"groupId"`
	Leader  int32   `json:"leader"`
	Term    int32   `json:"term"`
	ISR     []int32 `json:"isr"`
}

// SecurityStore names the security state a SecurityRecord belongs to.
type SecurityStore string

// The security stores.
const (
	// SecurityACLs holds the ACL bindings.
	SecurityACLs SecurityStore = "acls"
	// SecurityUsers holds the SCRAM credentials set at runtime
	// (AlterUserScramCredentials).
	SecurityUsers SecurityStore = "users"
)

// The bounds of a SecurityRecord's key and value: an ACL binding or a
// SCRAM credential is far smaller.
const (
	MaxSecurityKeyBytes   = 32 << 10
	MaxSecurityValueBytes = 32 << 10
)

// SecurityRecord sets one key of a security store, or deletes it when
// Value is empty. Key and Value are those of the record a single group
// keeps in its compacted __moonmq_acls or __moonmq_users topic, carried
// as they are, so that both modes apply the same bytes and only
// internal/auth decodes them. The state keeps each key's latest value,
// as those topics' compaction does.
type SecurityRecord struct {
	Store SecurityStore `json:"store"`
	Key   []byte        `json:"key"`
	Value []byte        `json:"value,omitempty"`
}

// Type implements Record.
func (RegisterBrokerRecord) Type() RecordType { return TypeRegisterBroker }

// Type implements Record.
func (TopicRecord) Type() RecordType { return TypeTopic }

// Type implements Record.
func (RemoveTopicRecord) Type() RecordType { return TypeRemoveTopic }

// Type implements Record.
func (PartitionRecord) Type() RecordType { return TypePartition }

// Type implements Record.
func (PartitionChangeRecord) Type() RecordType { return TypePartitionChange }

// Type implements Record.
func (ConfigRecord) Type() RecordType { return TypeConfig }

// Type implements Record.
func (ProducerIdsRecord) Type() RecordType { return TypeProducerIds }

// Type implements Record.
func (GroupStateRecord) Type() RecordType { return TypeGroupState }

// Type implements Record.
func (SecurityRecord) Type() RecordType { return TypeSecurity }

type envelope struct {
	Type   RecordType      `json:"type"`
	Record json.RawMessage `json:"record"`
}

// Encode writes r in its envelope, {"type": ..., "record": {...}}.
func Encode(r Record) ([]byte, error) {
	env, err := wrap(r)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

// Decode reads one envelope. Unknown types, unknown fields, a missing
// record and trailing data are errors: every broker must read a committed
// entry the same way, and a field one version ignores and another obeys
// would split their states.
func Decode(b []byte) (Record, error) {
	var env envelope
	if err := strict(b, &env); err != nil {
		return nil, fmt.Errorf("metadata record: %v", err)
	}
	return unwrap(env)
}

// EncodeBatch writes records as a JSON array of envelopes: the content of
// one metadata log entry, applied all or nothing by ApplyBatch.
func EncodeBatch(records []Record) ([]byte, error) {
	envs := make([]envelope, 0, len(records))
	for _, r := range records {
		env, err := wrap(r)
		if err != nil {
			return nil, err
		}
		envs = append(envs, env)
	}
	return json.Marshal(envs)
}

// DecodeBatch reads what EncodeBatch wrote, with Decode's rules for each
// envelope. An empty batch is an error: no command produces one.
func DecodeBatch(b []byte) ([]Record, error) {
	var envs []envelope
	if err := strict(b, &envs); err != nil {
		return nil, fmt.Errorf("metadata batch: %v", err)
	}
	if len(envs) == 0 {
		return nil, errors.New("metadata batch: empty")
	}
	out := make([]Record, 0, len(envs))
	for i, env := range envs {
		r, err := unwrap(env)
		if err != nil {
			return nil, fmt.Errorf("metadata batch: entry %d: %v", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func wrap(r Record) (envelope, error) {
	if r == nil {
		return envelope{}, errors.New("metadata record: nil")
	}
	if _, err := newRecord(r.Type()); err != nil {
		return envelope{}, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return envelope{}, fmt.Errorf("metadata record %s: %v", r.Type(), err)
	}
	return envelope{Type: r.Type(), Record: body}, nil
}

func unwrap(env envelope) (Record, error) {
	p, err := newRecord(env.Type)
	if err != nil {
		return nil, err
	}
	if len(env.Record) == 0 || bytes.Equal(bytes.TrimSpace(env.Record), []byte("null")) {
		return nil, fmt.Errorf("metadata record %s: no record", env.Type)
	}
	if err := strict(env.Record, p); err != nil {
		return nil, fmt.Errorf("metadata record %s: %v", env.Type, err)
	}
	// Records travel by value: deref the pointer newRecord made.
	switch r := p.(type) {
	case *RegisterBrokerRecord:
		return *r, nil
	case *TopicRecord:
		return *r, nil
	case *RemoveTopicRecord:
		return *r, nil
	case *PartitionRecord:
		return *r, nil
	case *PartitionChangeRecord:
		return *r, nil
	case *ConfigRecord:
		return *r, nil
	case *ProducerIdsRecord:
		return *r, nil
	case *GroupStateRecord:
		return *r, nil
	case *SecurityRecord:
		return *r, nil
	}
	return nil, fmt.Errorf("metadata record: unknown type %q", env.Type)
}

func newRecord(t RecordType) (any, error) {
	switch t {
	case TypeRegisterBroker:
		return &RegisterBrokerRecord{}, nil
	case TypeTopic:
		return &TopicRecord{}, nil
	case TypeRemoveTopic:
		return &RemoveTopicRecord{}, nil
	case TypePartition:
		return &PartitionRecord{}, nil
	case TypePartitionChange:
		return &PartitionChangeRecord{}, nil
	case TypeConfig:
		return &ConfigRecord{}, nil
	case TypeProducerIds:
		return &ProducerIdsRecord{}, nil
	case TypeGroupState:
		return &GroupStateRecord{}, nil
	case TypeSecurity:
		return &SecurityRecord{}, nil
	}
	return nil, fmt.Errorf("metadata record: unknown type %q", t)
}

// strict decodes one JSON value into v, refusing unknown fields and
// anything after the value.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}
