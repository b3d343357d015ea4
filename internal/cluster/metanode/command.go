package metanode

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Command is one request to change the metadata: exactly one field is
// set. The metadata leader turns it into records with meta's command
// checks against its applied state, at its own clock.
type Command struct {
	CreateTopic         *CreateTopic           `json:"createTopic,omitempty"`
	CreatePartitions    *CreatePartitions      `json:"createPartitions,omitempty"`
	DeleteTopic         *DeleteTopic           `json:"deleteTopic,omitempty"`
	SetConfig           *SetConfig             `json:"setConfig,omitempty"`
	AllocateProducerIDs *AllocateProducerIDs   `json:"allocateProducerIds,omitempty"`
	RegisterBroker      *RegisterBroker        `json:"registerBroker,omitempty"`
	PublishGroupState   *meta.GroupStateRecord `json:"publishGroupState,omitempty"`
	SetSecurity         *SetSecurity           `json:"setSecurity,omitempty"`
	MovePartition       *MovePartition         `json:"movePartition,omitempty"`
}

// MoveStep is a step of a partition's move between groups.
type MoveStep string

// The move steps, meta's StartMove, CutOver, FinishMove and CancelMove.
const (
	MoveStart   MoveStep = "start"
	MoveCutOver MoveStep = "cut-over"
	MoveFinish  MoveStep = "finish"
	MoveCancel  MoveStep = "cancel"
)

// MovePartition takes one step of a partition's move. Target is the
// start's; MoveSeq (the move the fence was taken for), FenceEpoch and
// FenceOffset are the cut-over's.
type MovePartition struct {
	Topic       string   `json:"topic"`
	Partition   int32    `json:"partition"`
	Step        MoveStep `json:"step"`
	Target      string   `json:"target,omitempty"`
	MoveSeq     int64    `json:"moveSeq,omitempty"`
	FenceEpoch  int32    `json:"fenceEpoch,omitempty"`
	FenceOffset int64    `json:"fenceOffset,omitempty"`
}

// SetSecurity sets and deletes keys of the security stores (ACLs, SCRAM
// users), all in one entry.
type SetSecurity struct {
	Records []meta.SecurityRecord `json:"records"`
}

// CreateTopic creates a topic; the leader draws its id.
type CreateTopic struct {
	Name       string            `json:"name"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	Placement  meta.Placement    `json:"placement"`
}

// CreatePartitions takes a topic to Total partitions.
type CreatePartitions struct {
	Name      string         `json:"name"`
	Total     int32          `json:"total"`
	Placement meta.Placement `json:"placement"`
}

// DeleteTopic deletes a topic.
type DeleteTopic struct {
	Name string `json:"name"`
}

// SetConfig sets one config key, or deletes it when Value is empty.
type SetConfig struct {
	ResourceType meta.ResourceType `json:"resourceType"`
	ResourceName string            `json:"resourceName"`
	Key          string            `json:"key"`
	Value        string            `json:"value,omitempty"`
}

// AllocateProducerIDs hands the next block of producer ids to a broker.
type AllocateProducerIDs struct {
	BrokerID int32 `json:"brokerId"`
}

// RegisterBroker registers a broker or renews its lease. The leader sets
// the record's LeaseExpiryMs to its own now plus LeaseMs, so that every
// expiry in the log is on one clock, the one the lease checks read.
// LeaseMs 0 ends the lease for good, as a clean shutdown asks: the record
// says so with an expiry of 0, and the incarnation cannot renew after it.
type RegisterBroker struct {
	Record  meta.RegisterBrokerRecord `json:"record"`
	LeaseMs int64                     `json:"leaseMs"`
}

// Result is what a command did once applied.
type Result struct {
	// Index is the metadata log index the command's entry applied at: a
	// node whose Applied is at least Index holds its effect.
	Index uint64
	// Records are the records applied.
	Records []meta.Record
}

// validate checks that exactly one command is set.
func (c Command) validate() error {
	n := 0
	for _, set := range []bool{c.CreateTopic != nil, c.CreatePartitions != nil, c.DeleteTopic != nil, c.SetConfig != nil,
		c.AllocateProducerIDs != nil, c.RegisterBroker != nil, c.PublishGroupState != nil, c.SetSecurity != nil,
		c.MovePartition != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return &meta.Error{Code: kerr.InvalidRequest, Msg: fmt.Sprintf("metadata command with %d operations, want 1", n)}
	}
	return nil
}

// records runs the command's check against s at nowMs, the leader's
// clock, and returns the records to propose as one entry.
func (c Command) records(s *meta.State, nowMs int64) ([]meta.Record, error) {
	one := func(r meta.Record, err error) ([]meta.Record, error) {
		if err != nil {
			return nil, err
		}
		return []meta.Record{r}, nil
	}
	switch {
	case c.CreateTopic != nil:
		t := c.CreateTopic
		id, err := newUUID()
		if err != nil {
			return nil, err
		}
		return s.CreateTopic(id, t.Name, t.Partitions, t.Configs, t.Placement, nowMs)
	case c.CreatePartitions != nil:
		return s.CreatePartitions(c.CreatePartitions.Name, c.CreatePartitions.Total, c.CreatePartitions.Placement, nowMs)
	case c.DeleteTopic != nil:
		return one(s.DeleteTopic(c.DeleteTopic.Name))
	case c.SetConfig != nil:
		sc := c.SetConfig
		return one(s.SetConfig(sc.ResourceType, sc.ResourceName, sc.Key, sc.Value))
	case c.AllocateProducerIDs != nil:
		return one(s.AllocateProducerIDs(c.AllocateProducerIDs.BrokerID))
	case c.RegisterBroker != nil:
		rb := c.RegisterBroker
		if rb.LeaseMs < 0 {
			return nil, &meta.Error{Code: kerr.InvalidRequest, Msg: fmt.Sprintf("broker %d: negative lease", rb.Record.BrokerID)}
		}
		r := rb.Record
		r.LeaseExpiryMs = nowMs + rb.LeaseMs
		if rb.LeaseMs == 0 {
			// Ended, not expired: the state keeps this incarnation
			// from renewing again (meta.RegisterBrokerRecord).
			r.LeaseExpiryMs = 0
		}
		return one(s.RegisterBroker(r, nowMs))
	case c.PublishGroupState != nil:
		r := *c.PublishGroupState
		return one(r, s.Check(r))
	case c.MovePartition != nil:
		m := c.MovePartition
		switch m.Step {
		case MoveStart:
			return one(s.StartMove(m.Topic, m.Partition, m.Target))
		case MoveCutOver:
			return one(s.CutOver(m.Topic, m.Partition, m.MoveSeq, m.FenceEpoch, m.FenceOffset))
		case MoveFinish:
			return one(s.FinishMove(m.Topic, m.Partition))
		case MoveCancel:
			return one(s.CancelMove(m.Topic, m.Partition))
		}
		return nil, &meta.Error{Code: kerr.InvalidRequest, Msg: fmt.Sprintf("unknown move step %q", m.Step)}
	case c.SetSecurity != nil:
		recs := c.SetSecurity.Records
		if len(recs) == 0 {
			return nil, &meta.Error{Code: kerr.InvalidRequest, Msg: "no security records"}
		}
		out := make([]meta.Record, len(recs))
		for i, r := range recs {
			if err := s.Check(r); err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return nil, c.validate()
}

// newUUID draws a random non-zero id.
func newUUID() (meta.UUID, error) {
	var u meta.UUID
	for u.IsZero() {
		if _, err := rand.Read(u[:]); err != nil {
			return u, err
		}
	}
	return u, nil
}

var (
	// ErrNoLeader: no metadata leader could be reached before the
	// context ended. The command was not proposed; it may be retried.
	// Reads of the local copy go on meanwhile.
	ErrNoLeader = errors.New("metanode: no metadata leader")
	// ErrOutcomeUnknown: the command reached the leader, but the context
	// ended (or the leader was deposed) before its entry was seen to
	// apply or to be lost. It may have applied: a retry must tolerate
	// that (a second CreateTopic is refused with TOPIC_ALREADY_EXISTS).
	ErrOutcomeUnknown = errors.New("metanode: outcome of the metadata command unknown")
	// ErrStopped is returned by calls on a Node that is not running.
	ErrStopped = errors.New("metanode: node stopped")
)

// ErrorCode is the Kafka error code to answer a failed Propose with: a
// refusal's own code, NOT_CONTROLLER when there was no leader (clients
// look again and retry), REQUEST_TIMED_OUT when the outcome is unknown.
func ErrorCode(err error) int16 {
	var me *meta.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &me):
		return me.Code.Code
	case errors.Is(err, ErrNoLeader):
		return kerr.NotController.Code
	case errors.Is(err, ErrOutcomeUnknown):
		return kerr.RequestTimedOut.Code
	}
	return meta.ErrorCode(err)
}
