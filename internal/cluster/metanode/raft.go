package metanode

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/replication/raftgroup"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// The voter's files in DataDir: the HardState and the log after the
// snapshot, and the snapshot (meta.Snapshot at its index) on its own, so
// that a large metadata image is not rewritten with every entry.
const (
	FileName         = "metadata-raft.json"
	SnapshotFileName = "metadata-snapshot.json"
)

// inboxSize bounds the queue of received Raft messages; more are dropped
// (Raft resends).
const inboxSize = 256

// raftLoop is a voter's Raft: one goroutine (run) owns the RawNode, its
// storage, the pending proposals, and writes the Node's state.
type raftLoop struct {
	n            *Node
	self         int32
	disk         *raftgroup.DiskLog
	ms           *raft.MemoryStorage
	rn           *raft.RawNode
	send         func(*pb.Message) bool
	compactEvery uint64

	inbox chan *pb.Message
	props chan proposal

	raftState raft.StateType
	lead      uint64
	term      uint64
	applied   uint64
	snapIndex uint64
	// pending are this leader's proposals by log index, until the entry
	// at that index applies: of their term, they took effect; of another,
	// they were overwritten and never will.
	pending map[uint64]pendingProposal
	failed  error
	// unsaved: the last save of the Raft state failed for want of disk
	// space. The state in memory is ahead of the file, so no message is
	// sent (none may vouch for what is not durable; Raft tolerates their
	// loss) and the save is retried every tick until it succeeds. A full
	// disk thus silences this voter rather than ending it: the others
	// elect and commit without it, and it takes part again once it can
	// save.
	unsaved bool
}

type proposal struct {
	cmd   Command
	reply chan outcome
}

type pendingProposal struct {
	term    uint64
	records []meta.Record
	reply   chan outcome
}

type outcome struct {
	res Result
	err error
}

// newRaftLoop loads the voter's files into n and builds the RawNode.
func newRaftLoop(n *Node) (*raftLoop, error) {
	ids := n.voterIDs()
	disk := &raftgroup.DiskLog{
		FS:           n.cfg.FS,
		Path:         filepath.Join(n.cfg.DataDir, FileName),
		SnapshotPath: filepath.Join(n.cfg.DataDir, SnapshotFileName),
		Voters:       ids,
	}
	initial, err := encodeSnapshot(meta.New())
	if err != nil {
		return nil, err
	}
	ms, err := disk.Load(initial)
	if err != nil {
		return nil, err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return nil, err
	}
	st, err := decodeSnapshot(snap.GetData())
	if err != nil {
		return nil, err
	}
	r := &raftLoop{
		n:            n,
		self:         n.cfg.ID,
		disk:         disk,
		ms:           ms,
		compactEvery: uint64(n.cfg.CompactEvery),
		inbox:        make(chan *pb.Message, inboxSize),
		props:        make(chan proposal),
		lead:         raft.None,
		applied:      snap.GetMetadata().GetIndex(),
		snapIndex:    snap.GetMetadata().GetIndex(),
		pending:      map[uint64]pendingProposal{},
	}
	n.state, n.applied = st, r.applied
	// Apply what the disk says is committed before anyone reads: the
	// broker may answer Metadata before Raft's first Ready.
	hs, _, err := ms.InitialState()
	if err != nil {
		return nil, err
	}
	if commit := hs.GetCommit(); commit > r.applied {
		ents, err := ms.Entries(r.applied+1, commit+1, 1<<62)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			r.applyEntry(e)
		}
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        uint64(n.cfg.ID),
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   ms,
		Applied:                   r.applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           64,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    raftgroup.NewRaftLogger(n.log.With("component", "metadata-raft")),
	})
	if err != nil {
		return nil, err
	}
	r.rn = rn
	bs := rn.BasicStatus()
	r.term, r.raftState = bs.HardState.GetTerm(), bs.RaftState
	return r, nil
}

func encodeSnapshot(s *meta.State) ([]byte, error) { return json.Marshal(s.Snapshot()) }

func decodeSnapshot(b []byte) (*meta.State, error) {
	var snap meta.Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("metanode: bad snapshot: %w", err)
	}
	return meta.Restore(snap)
}

// run is the Raft goroutine. The transport's senders are its own: it
// starts them and closes them on the way out.
func (r *raftLoop) run(ctx context.Context) {
	cfg := &r.n.cfg
	peers := map[int32]string{}
	for id, addr := range cfg.Voters {
		if id != r.self {
			peers[id] = addr
		}
	}
	t := raftgroup.NewHTTPTransport(raftgroup.HTTPConfig{Peers: peers, Token: cfg.Token, TLS: cfg.TLS, Path: RaftPath, Logger: r.n.log})
	defer t.Close()
	r.send = t.Send
	tick := time.NewTicker(cfg.TickInterval)
	defer tick.Stop()
	defer r.abandon()
	r.publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if r.unsaved {
				r.save()
			}
			r.rn.Tick()
			r.process()
		case m := <-r.inbox:
			_ = r.rn.Step(m) // an error means "not for us now": Raft tolerates loss
			r.process()
		case p := <-r.props:
			r.propose(p)
		}
		r.publish()
		if r.failed != nil {
			r.n.log.Error("metadata raft: storage failed, node stopped", "err", r.failed)
			return
		}
	}
}

// abandon answers every pending proposal when the loop ends: whether it
// will commit is unknown.
func (r *raftLoop) abandon() {
	for idx, p := range r.pending {
		p.reply <- outcome{err: ErrOutcomeUnknown}
		delete(r.pending, idx)
	}
	r.n.setStatus(func(s *Status) {
		s.Role, s.Leader = "follower", NoLeader
		if r.failed != nil {
			s.Error = r.failed.Error()
		}
	})
}

// receive queues a peer's message for the loop, or drops it when the
// queue is full.
func (r *raftLoop) receive(m *pb.Message) bool {
	if m.GetTo() != uint64(r.self) || raft.IsLocalMsg(m.GetType()) {
		return false
	}
	if _, ok := r.n.cfg.Voters[int32(m.GetFrom())]; !ok {
		return false
	}
	select {
	case r.inbox <- m:
		return true
	default:
		return false
	}
}

// propose runs the command's check on the leader's applied state and
// proposes its records as one entry.
func (r *raftLoop) propose(p proposal) {
	switch {
	case r.failed != nil:
		p.reply <- outcome{err: ErrStopped}
		return
	case r.raftState != raft.StateLeader:
		p.reply <- outcome{err: &notLeaderError{leader: r.leaderID()}}
		return
	}
	if t, err := r.ms.Term(r.applied); err != nil || t != r.term {
		// A new leader's applied state may lack entries earlier leaders
		// committed until its own first entry applies; a check against it
		// could pass what Apply cannot catch (a lease that still runs).
		p.reply <- outcome{err: errNotProposed}
		return
	}
	recs, err := p.cmd.records(r.n.state, r.n.cfg.Now().UnixMilli())
	if err != nil {
		p.reply <- outcome{err: err}
		return
	}
	data, err := meta.EncodeBatch(recs)
	if err != nil {
		p.reply <- outcome{err: err}
		return
	}
	// process leaves no unstable entry behind, so the leader appends this
	// one right after the storage's last, in its current term.
	last, _ := r.ms.LastIndex()
	index, term := last+1, r.rn.BasicStatus().HardState.GetTerm()
	if err := r.rn.Propose(data); err != nil {
		p.reply <- outcome{err: errNotProposed}
		return
	}
	r.pending[index] = pendingProposal{term: term, records: recs, reply: p.reply}
	r.process()
	if _, waiting := r.pending[index]; waiting {
		if t, err := r.ms.Term(index); err != nil || t != term {
			delete(r.pending, index)
			r.n.log.Error("metadata raft: a proposal is not where it was appended", "index", index, "term", term)
			p.reply <- outcome{err: ErrOutcomeUnknown}
		}
	}
}

// process handles every pending Ready until Raft is quiet.
func (r *raftLoop) process() {
	for r.failed == nil && r.rn.HasReady() {
		r.handleReady()
	}
}

// handleReady follows Raft's contract: persist the snapshot, entries and
// HardState, then send, then apply, then Advance.
func (r *raftLoop) handleReady() {
	rd := r.rn.Ready()
	if rd.SoftState != nil {
		r.raftState, r.lead = rd.SoftState.RaftState, rd.SoftState.Lead
	}
	if rd.HardState != nil {
		r.term = rd.HardState.GetTerm()
	}
	dirty := false
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.installSnapshot(rd.Snapshot); err != nil {
			r.fail(err)
			return
		}
		dirty = true
	}
	if len(rd.Entries) > 0 {
		if err := r.ms.Append(rd.Entries); err != nil {
			r.fail(err)
			return
		}
		dirty = true
	}
	if rd.HardState != nil {
		if err := r.ms.SetHardState(rd.HardState); err != nil {
			r.fail(err)
			return
		}
		dirty = true
	}
	if dirty || r.unsaved {
		r.save()
		if r.failed != nil {
			return
		}
	}
	var snapReports []*pb.Message
	var unreachable []uint64
	for _, m := range rd.Messages {
		if r.unsaved {
			if m.GetType() == pb.MsgSnap {
				snapReports = append(snapReports, &pb.Message{To: m.To, Reject: new(true)})
			}
			continue
		}
		ok := r.send(m)
		switch {
		case m.GetType() == pb.MsgSnap:
			if !ok {
				m = &pb.Message{To: m.To, Reject: new(true)}
			}
			snapReports = append(snapReports, m)
		case !ok:
			unreachable = append(unreachable, m.GetTo())
		}
	}
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() > r.applied {
			r.applyEntry(e)
		}
	}
	r.rn.Advance(rd)
	for _, id := range unreachable {
		r.rn.ReportUnreachable(id)
	}
	for _, m := range snapReports {
		st := raft.SnapshotFinish
		if m.GetReject() {
			st = raft.SnapshotFailure
		}
		r.rn.ReportSnapshot(m.GetTo(), st)
	}
	r.maybeCompact()
}

// installSnapshot takes a snapshot the leader sent: this voter was too far
// behind for entries.
func (r *raftLoop) installSnapshot(snap *pb.Snapshot) error {
	st, err := decodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	if err := r.ms.ApplySnapshot(snap); err != nil {
		if err == raft.ErrSnapOutOfDate {
			return nil
		}
		return err
	}
	idx := snap.GetMetadata().GetIndex()
	r.applied, r.snapIndex = idx, idx
	r.n.install(st, idx, true)
	for i, p := range r.pending {
		if i <= idx {
			delete(r.pending, i)
			p.reply <- outcome{err: ErrOutcomeUnknown}
		}
	}
	return nil
}

// applyEntry applies one committed entry and answers its proposer.
func (r *raftLoop) applyEntry(e *pb.Entry) {
	var data []byte
	if e.GetType() == pb.EntryNormal {
		data = e.GetData()
	}
	err := r.n.apply(e.GetIndex(), data)
	r.applied = e.GetIndex()
	p, ok := r.pending[e.GetIndex()]
	if !ok {
		return
	}
	delete(r.pending, e.GetIndex())
	if e.GetTerm() != p.term {
		p.reply <- outcome{err: errNotProposed} // another leader's entry took its place
		return
	}
	if err != nil {
		p.reply <- outcome{err: err}
		return
	}
	p.reply <- outcome{res: Result{Index: e.GetIndex(), Records: p.records}}
}

// maybeCompact folds the applied log into a snapshot of the applied state
// once compactEvery entries have applied since the last one.
func (r *raftLoop) maybeCompact() {
	if r.failed != nil || r.applied < r.snapIndex+r.compactEvery {
		return
	}
	data, err := encodeSnapshot(r.n.state)
	if err != nil {
		r.fail(err)
		return
	}
	if _, err := r.ms.CreateSnapshot(r.applied, r.disk.ConfState(), data); err != nil {
		r.fail(err)
		return
	}
	if err := r.ms.Compact(r.applied); err != nil {
		r.fail(err)
		return
	}
	// The log in memory is compacted now, saved or not (a save that
	// failed for space is retried with the rest).
	r.snapIndex = r.applied
	r.save()
}

// save writes the Raft state to its file. A failure for want of space
// leaves the loop unsaved (see unsaved); any other fails it.
func (r *raftLoop) save() {
	err := r.disk.Save(r.ms)
	switch {
	case err == nil:
		if r.unsaved {
			r.n.log.Warn("metadata raft: the Raft state is saved again; this voter takes part again")
		}
		r.unsaved = false
	case diskhealth.IsSpaceError(err):
		if !r.unsaved {
			r.n.log.Warn("metadata raft: no disk space to save the Raft state; this voter sends nothing until it can, and the others go on without it", "err", err)
		}
		r.unsaved = true
	default:
		r.fail(err)
	}
}

func (r *raftLoop) fail(err error) {
	if r.failed == nil {
		r.failed = err
	}
}

func (r *raftLoop) leaderID() int32 {
	if r.lead == raft.None {
		return NoLeader
	}
	return int32(r.lead)
}

// publish copies the loop's view into the Node's Status.
func (r *raftLoop) publish() {
	role := "follower"
	switch r.raftState {
	case raft.StateLeader:
		role = "leader"
	case raft.StateCandidate, raft.StatePreCandidate:
		role = "candidate"
	}
	commit := r.rn.BasicStatus().HardState.GetCommit()
	r.n.setStatus(func(s *Status) {
		s.Role, s.Leader, s.Term, s.Commit, s.SnapshotIndex = role, r.leaderID(), r.term, commit, r.snapIndex
	})
}

// submit hands a proposal to the loop and waits for its outcome.
func (r *raftLoop) submit(ctx context.Context, cmd Command) (Result, error) {
	done, ok := r.n.running()
	if !ok {
		return Result{}, ErrStopped
	}
	p := proposal{cmd: cmd, reply: make(chan outcome, 1)}
	select {
	case r.props <- p:
	case <-done:
		return Result{}, ErrStopped
	case <-ctx.Done():
		return Result{}, errNotProposed
	}
	select {
	case o := <-p.reply:
		return o.res, o.err
	case <-done:
		return Result{}, ErrOutcomeUnknown
	case <-ctx.Done():
		return Result{}, ErrOutcomeUnknown
	}
}
