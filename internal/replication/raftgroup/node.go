package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

var (
	// ErrNotServing is returned by ProposeISR on a replica that is not the
	// serving leader.
	ErrNotServing = errors.New("raftgroup: not the serving leader")
	// ErrStaleEpoch is returned by ProposeISR for a change stamped with an
	// epoch other than the current one.
	ErrStaleEpoch = errors.New("raftgroup: ISR change from another epoch")
	// ErrStopped is returned by calls on a Node that is not running.
	ErrStopped = errors.New("raftgroup: node stopped")
	// ErrDropped is returned by ProposeISR when Raft refused the
	// proposal (for instance during a leadership transfer): it was
	// certainly not appended and will never commit.
	ErrDropped = errors.New("raftgroup: proposal dropped")
	// ErrNotEligible is returned by TransferLeadership for a target the
	// ISR of the leader's log does not make eligible.
	ErrNotEligible = errors.New("raftgroup: the target may not lead: not in the ISR (or not a member)")
)

// CertainlyNotProposed reports whether err from ProposeISR means the
// change was never appended to the Raft log, so the caller may treat it as
// failed (replication.Leader.ProposalFailed) and propose again. Any other
// error (a timeout, a stop) leaves the outcome unknown.
func CertainlyNotProposed(err error) bool {
	return errors.Is(err, ErrDropped) || errors.Is(err, ErrNotServing) || errors.Is(err, ErrStaleEpoch)
}

// Defaults for Config.
const (
	DefaultTickInterval   = 50 * time.Millisecond
	DefaultElectionTicks  = 10
	DefaultHeartbeatTicks = 1
	DefaultCompactEvery   = 16
	DefaultInboxSize      = 256
)

// Config configures a Node.
type Config struct {
	// ID is this replica's ReplicaId (> 0).
	ID int32
	// Members lists every replica of the group, this one included: 3 or 5
	// ids (static membership).
	Members []int32
	// Role is this replica's configured Replication.Role; before any ISR
	// exists only leader/both replicas may serve.
	Role replication.Role
	// Roles optionally gives the configured role of the other members,
	// used to pick a hand-off target before any ISR exists.
	Roles map[int32]replication.Role
	// DataDir holds replication-raft.json.
	DataDir string
	// FS is the filesystem (vfs.Default if nil).
	FS vfs.FS
	// Transport carries messages to peers.
	Transport Transport
	// Token is the shared replication token checked by Handler (no check
	// when empty).
	Token string
	// TickInterval is the duration of one Raft tick (DefaultTickInterval).
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are Raft's timeouts in ticks
	// (DefaultElectionTicks, DefaultHeartbeatTicks).
	ElectionTicks, HeartbeatTicks int
	// CompactEvery is how many applied entries are kept in the log before
	// they are folded into the snapshot (DefaultCompactEvery).
	CompactEvery int
	// InboxSize bounds the queue of received messages; more are dropped
	// (DefaultInboxSize).
	InboxSize int
	// Degraded, if set, is read every tick: while it names a reason (a
	// full or stalling disk) a serving leader hands leadership to another
	// eligible member, once per election timeout, and this replica turns
	// down leadership handed to it. It still stands in ordinary
	// elections (a group whose every disk is full still serves reads).
	Degraded func() string
	// UncleanRestart is set when this replica restarted without its
	// clean-shutdown marker: it may not stand for election
	// (replication.Candidacy.UncleanRestart) until ClearUnclean says it
	// caught up with a leader, or until UncleanWait has passed.
	UncleanRestart bool
	// UncleanWait bounds how long an unclean restart keeps the replica
	// from standing (DefaultUncleanWait). Without a bound, a group whose
	// every ISR member restarted uncleanly (a power cut) would never elect
	// anyone. When it runs out the replica stands on its own data, which
	// holds every record it reported durable unless its disk lost synced
	// writes.
	UncleanWait time.Duration
	// LogDamaged is set when this replica knows its log lost data that
	// had been durable (a clean-shutdown marker naming more than the logs
	// hold, or storage recovery finding damage below its recovery point).
	// It implies UncleanRestart, and UncleanWait never runs out: such a
	// replica stands for election only after catching up with a leader,
	// so that its short log never becomes everybody's (chaos bug 2).
	LogDamaged bool
	// BallastBytes is the size of a file of zeros kept beside the Raft
	// state and given back when the state cannot be saved for want of
	// space (DefaultBallastBytes; negative: none).
	BallastBytes int64
	// Logger receives Raft's warnings and errors (slog.Default if nil).
	Logger *slog.Logger
}

// DefaultBallastBytes is Config.BallastBytes's default: many times the
// Raft state file, whose entries are compacted every DefaultCompactEvery.
const DefaultBallastBytes = 1 << 20

// ballastRetry is how often a replica without its ballast tries to take
// it again.
const ballastRetry = 30 * time.Second

// DefaultUncleanWait is Config.UncleanWait's default.
// A replica that restarted without a clean shutdown but found no damage
// holds every record it reported durable (positions are fsynced before
// they are reported); the wait only gives a cleanly stopped or caught-up
// member the first chance. It was 30 s, which after a power cut of the
// whole group meant 30 s without a leader.
const DefaultUncleanWait = 5 * time.Second

func (cfg *Config) setDefaults() error {
	if cfg.ID <= 0 {
		return fmt.Errorf("raftgroup: replica id %d must be positive", cfg.ID)
	}
	if n := len(cfg.Members); n < 1 || !slices.Contains(cfg.Members, cfg.ID) {
		return fmt.Errorf("raftgroup: members %v must include replica %d", cfg.Members, cfg.ID)
	}
	seen := map[int32]bool{}
	for _, m := range cfg.Members {
		if m <= 0 || seen[m] {
			return fmt.Errorf("raftgroup: bad or duplicate member id %d", m)
		}
		seen[m] = true
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = DefaultElectionTicks
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if cfg.ElectionTicks <= cfg.HeartbeatTicks {
		return fmt.Errorf("raftgroup: ElectionTicks %d must exceed HeartbeatTicks %d", cfg.ElectionTicks, cfg.HeartbeatTicks)
	}
	if cfg.CompactEvery <= 0 {
		cfg.CompactEvery = DefaultCompactEvery
	}
	if cfg.InboxSize <= 0 {
		cfg.InboxSize = DefaultInboxSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UncleanWait <= 0 {
		cfg.UncleanWait = DefaultUncleanWait
	}
	if cfg.BallastBytes == 0 {
		cfg.BallastBytes = DefaultBallastBytes
	}
	return nil
}

// Status is a replica's view of the group, as served by
// /replication/status.
type Status struct {
	// ReplicaID is this replica.
	ReplicaID int32 `json:"replica_id"`
	// Role is this replica's Raft role: leader, follower or candidate.
	Role string `json:"role"`
	// Leader is the replica whose claim is the latest applied (the one to
	// follow), NoLeader if none.
	Leader int32 `json:"leader"`
	// RaftLeader is the Raft leader this replica knows of, NoLeader if none.
	RaftLeader int32 `json:"raft_leader"`
	// Epoch is the leader epoch of the latest applied claim.
	Epoch int32 `json:"epoch"`
	// ISR is the applied in-sync set.
	ISR []int32 `json:"isr"`
	// HasISR is false until an ISR has been applied.
	HasISR bool `json:"has_isr"`
	// Serving is true on the serving leader only.
	Serving bool `json:"serving"`
	// HandingOff is true on a Raft leader that is not eligible and is
	// transferring leadership.
	HandingOff bool `json:"handing_off,omitempty"`
	// Heard lists the other members this replica has received a Raft
	// message from at its current term (a vote, a pre-vote or an append
	// response counts): on a new leader, the peers known to be alive
	// since its election. A member missing from it has said nothing
	// since the term began; the leader of a failover is the obvious one.
	Heard []int32 `json:"heard,omitempty"`
	// RaftTerm and CommitIndex are Raft's term and commit index.
	RaftTerm    uint64 `json:"raft_term"`
	CommitIndex uint64 `json:"commit_index"`
	// Applied is the last applied log index.
	Applied uint64 `json:"applied_index"`
	// State is the applied group state.
	State GroupState `json:"-"`
	// Unclean is set while this replica may not stand for election
	// because it restarted uncleanly and has not caught up since.
	Unclean bool `json:"unclean_restart,omitempty"`
	// LogDamaged is set while Unclean is because this replica's log lost
	// durable data: it waits for a leader to catch up from, however long.
	LogDamaged bool `json:"log_damaged,omitempty"`
	// Err is set when a storage write failed and the node stopped.
	Err string `json:"error,omitempty"`
}

// Transport sends Raft messages to peers. Send must not block: it queues
// the message or drops it and returns false (Raft tolerates loss). It is
// called from the Node's goroutine only.
type Transport interface {
	Send(m *pb.Message) bool
}

// Node is one replica's member of the group's Raft. A single goroutine,
// started by Start, owns the RawNode; the other methods are safe for
// concurrent use.
type Node struct {
	cfg  Config
	core *core

	inbox   chan *pb.Message
	props   chan proposal
	clean   chan struct{}
	changes chan Status

	mu     sync.Mutex
	status Status

	runMu   sync.Mutex
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
}

type proposal struct {
	change *replication.ISRChange
	fence  *FenceChange
	// transfer asks for a leadership transfer to this member.
	transfer *int32
	reply    chan error
}

// NewNode loads the replica's Raft state from DataDir (bootstrapping the
// static membership if there is none) and returns a stopped Node.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Transport == nil {
		return nil, errors.New("raftgroup: no transport")
	}
	c, err := newCore(&cfg)
	if err != nil {
		return nil, err
	}
	c.send = cfg.Transport.Send
	n := &Node{
		cfg:     cfg,
		core:    c,
		inbox:   make(chan *pb.Message, cfg.InboxSize),
		props:   make(chan proposal),
		clean:   make(chan struct{}, 1),
		changes: make(chan Status, 1),
	}
	n.status = c.status()
	return n, nil
}

// Start runs the Node's goroutine until ctx ends or Stop is called.
func (n *Node) Start(ctx context.Context) error {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if n.running {
		return errors.New("raftgroup: already started")
	}
	if n.done != nil {
		return ErrStopped // a Node is not restartable: make a new one
	}
	ctx, n.cancel = context.WithCancel(ctx)
	n.done = make(chan struct{})
	n.running = true
	go n.run(ctx)
	return nil
}

// Stop stops the goroutine and waits for it. The Node then reports not
// serving. Stop is idempotent.
func (n *Node) Stop() {
	n.runMu.Lock()
	cancel, done := n.cancel, n.done
	n.runMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (n *Node) run(ctx context.Context) {
	defer func() {
		n.mu.Lock()
		n.status.Serving = false
		n.status.HandingOff = false
		st := n.status
		n.mu.Unlock()
		n.notify(st)
		n.runMu.Lock()
		n.running = false
		n.runMu.Unlock()
		close(n.done)
	}()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	n.publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n.cfg.Degraded != nil {
				n.setDegraded(n.cfg.Degraded())
			}
			n.core.tick()
		case m := <-n.inbox:
			n.core.step(m)
		case p := <-n.props:
			switch {
			case p.transfer != nil:
				p.reply <- n.core.transferTo(*p.transfer)
			case p.fence != nil:
				p.reply <- n.core.proposeFence(*p.fence)
			default:
				p.reply <- n.core.proposeISR(*p.change)
			}
		case <-n.clean:
			if n.core.unclean {
				n.cfg.Logger.Info("replication raft: caught up with the leader after an unclean restart; may stand for election again")
			}
			n.core.clearUnclean()
		}
		n.publish()
		if err := n.core.failed; err != nil {
			n.cfg.Logger.Error("replication raft: storage failed, node stopped", "err", err)
			return
		}
	}
}

// setDegraded hands the disk's state to the core, logging changes.
func (n *Node) setDegraded(why string) {
	was := n.core.degraded
	if why == was {
		return
	}
	n.core.setDegraded(why)
	if why != "" {
		n.cfg.Logger.Warn("replication raft: this replica's disk is degraded; as leader it hands leadership to a healthy in-sync replica, and it turns down leadership handed to it", "reason", why)
	} else {
		n.cfg.Logger.Info("replication raft: this replica's disk is healthy again", "was", was)
	}
}

// publish copies the core's status for the concurrent readers and
// notifies Changes when something a subscriber cares about changed.
func (n *Node) publish() {
	st := n.core.status()
	n.mu.Lock()
	old := n.status
	n.status = st
	n.mu.Unlock()
	if old.Serving != st.Serving || old.Role != st.Role || old.Unclean != st.Unclean || old.Epoch != st.Epoch || old.Leader != st.Leader ||
		old.RaftLeader != st.RaftLeader || old.HasISR != st.HasISR || !slices.Equal(old.ISR, st.ISR) || old.Err != st.Err {
		n.notify(st)
	}
}

// notify replaces any unread status in changes with st.
func (n *Node) notify(st Status) {
	select {
	case <-n.changes:
	default:
	}
	select {
	case n.changes <- st:
	default:
	}
}

// Changes delivers the latest Status whenever the serving flag, role,
// epoch, leader or ISR changes. It holds at most one value: a slow reader
// sees the newest status, not every step.
func (n *Node) Changes() <-chan Status { return n.changes }

// Status returns the replica's current view.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.status
	st.ISR = slices.Clone(st.ISR)
	st.Heard = slices.Clone(st.Heard)
	st.State = st.State.clone()
	return st
}

// State returns the applied group state.
func (n *Node) State() GroupState { return n.Status().State }

// IsServingLeader reports whether this replica is the serving leader: Raft
// leader of the current term whose claim has been applied.
func (n *Node) IsServingLeader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status.Serving
}

// ProposeISR proposes an ISR change. It fails unless this replica is the
// serving leader and change.Epoch is its epoch. A nil error means Raft
// accepted the proposal, not that it committed: the applied result shows
// in State and Changes.
func (n *Node) ProposeISR(ctx context.Context, change replication.ISRChange) error {
	return n.propose(ctx, proposal{change: &change, reply: make(chan error, 1)})
}

// ProposeFence proposes setting or lifting a partition's fence, on the
// same terms as ProposeISR: only the serving leader, in its epoch, and a
// nil error means accepted, not committed.
func (n *Node) ProposeFence(ctx context.Context, change FenceChange) error {
	return n.propose(ctx, proposal{fence: &change, reply: make(chan error, 1)})
}

// TransferLeadership asks Raft to hand this serving leader's leadership
// to member to, which the ISR of its log must make eligible (ErrNotEligible
// otherwise): a planned failover, for spreading leaders over machines.
// A nil error means the transfer started; Raft gives it up if to does not
// win within an election timeout, and this replica then goes on leading.
func (n *Node) TransferLeadership(ctx context.Context, to int32) error {
	return n.propose(ctx, proposal{transfer: &to, reply: make(chan error, 1)})
}

func (n *Node) propose(ctx context.Context, p proposal) error {
	n.runMu.Lock()
	done := n.done
	n.runMu.Unlock()
	if done == nil {
		return ErrStopped
	}
	select {
	case n.props <- p:
	case <-done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.reply:
		return err
	case <-done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ClearUnclean tells the node that this replica, which restarted
// uncleanly, has caught up with a leader (fetched up to its high
// watermark on every partition): it may stand for election again.
func (n *Node) ClearUnclean() {
	select {
	case n.clean <- struct{}{}:
	default:
	}
}

// Receive queues a message from a peer for the Node's goroutine; when the
// queue is full the message is dropped and false returned.
func (n *Node) Receive(m *pb.Message) bool {
	select {
	case n.inbox <- m:
		return true
	default:
		return false
	}
}

// raftLogger adapts slog to raft.Logger, keeping Raft's chatter at debug.
func (cfg *Config) raftLogger() raft.Logger {
	l := cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	return NewRaftLogger(l.With("component", "replication-raft", "replica", cfg.ID))
}

// NewRaftLogger adapts l to raft.Logger: Raft's info lines go to debug,
// its warnings and errors to warn and error, and its fatal lines panic.
func NewRaftLogger(l *slog.Logger) raft.Logger { return &slogRaft{l: l} }

type slogRaft struct{ l *slog.Logger }

func (s *slogRaft) Debug(v ...any)              { s.l.Debug(fmt.Sprint(v...)) }
func (s *slogRaft) Debugf(f string, v ...any)   { s.l.Debug(fmt.Sprintf(f, v...)) }
func (s *slogRaft) Info(v ...any)               { s.l.Debug(fmt.Sprint(v...)) }
func (s *slogRaft) Infof(f string, v ...any)    { s.l.Debug(fmt.Sprintf(f, v...)) }
func (s *slogRaft) Warning(v ...any)            { s.l.Warn(fmt.Sprint(v...)) }
func (s *slogRaft) Warningf(f string, v ...any) { s.l.Warn(fmt.Sprintf(f, v...)) }
func (s *slogRaft) Error(v ...any)              { s.l.Error(fmt.Sprint(v...)) }
func (s *slogRaft) Errorf(f string, v ...any)   { s.l.Error(fmt.Sprintf(f, v...)) }
func (s *slogRaft) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (s *slogRaft) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (s *slogRaft) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (s *slogRaft) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
