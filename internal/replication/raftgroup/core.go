package raftgroup

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// core is the single-threaded heart of a Node: the RawNode, its storage and
// the applied state. Only its owner (Node's goroutine, or a test's
// simulator) calls it.
type core struct {
	self          int32
	members       []int32
	role          replication.Role
	roles         map[int32]replication.Role
	fs            vfs.FS
	path          string
	send          func(*pb.Message) bool
	compactEvery  uint64
	electionTicks int

	ms *raft.MemoryStorage
	rn *raft.RawNode

	state   GroupState // applied state
	applied uint64

	raftState raft.StateType
	lead      uint64
	term      uint64

	// heard is, per peer, the highest Raft term of a message received
	// from it: a peer heard at the current term is alive now (Heard).
	heard map[int32]uint64

	ledTerm      uint64 // term in which the leader duties were last set up
	claimTerm    uint64 // term in which this leader's claim was proposed
	handOff      bool   // leader that must transfer leadership, never serve
	handOffTicks int
	handOffTries int

	// unclean keeps this replica from standing for election after an
	// unclean restart (replication.Candidacy.UncleanRestart) until it is
	// cleared or uncleanTicks run out.
	unclean      bool
	uncleanTicks int
	// damaged is set with unclean when this replica knows its log lost
	// data that had been durable (LogDamaged): then uncleanTicks never
	// run out, only catching up with a leader lifts the restriction.
	damaged bool
	logger  interface{ Warn(string, ...any) }

	failed error // a storage write failed: the core is inert

	// unsaved: the last save of the Raft state failed for want of disk
	// space. The state in memory is ahead of the file, so every message
	// is dropped (none may vouch for what is not durable; Raft tolerates
	// their loss) and the save is retried every tick and Ready until it
	// succeeds. A full disk thus silences this replica rather than ending
	// it, and the others elect without it.
	unsaved bool

	// The ballast is a file of zeros (BallastFileName) kept beside the
	// Raft state and deleted when the state cannot be saved for want of
	// space, so that the save gets through. A replica whose disk filled
	// (a burst past the reserve, another process) can then still follow
	// a leader and learn the log start whose retention frees its disk;
	// silent, it would wait for space that only it could have freed. It
	// is taken again every ballastRetry ticks while the disk is healthy
	// (degraded), until it fits.
	ballastPath  string
	ballastBytes int64
	ballastHeld  bool
	ballastWait  int
	ballastRetry int

	// degraded names what keeps this replica's disk from taking writes
	// well ("" when nothing): a serving leader hands leadership to an
	// eligible member every degradedTicks, keeping on serving meanwhile
	// (reads work, and no other member may be able to take over), and
	// the replica drops MsgTimeoutNow, turning down leadership handed to
	// it, so two degraded members do not hand it back and forth.
	degraded      string
	degradedTicks int

	// campaignAnyway lets an ineligible replica ask for votes; only the
	// simulation's injected bug "unclean-leader" sets it.
	campaignAnyway bool

	// onApply, if set, sees the state after each applied index (tests).
	onApply func(index uint64, s GroupState)
}

// newCore loads the persisted state and builds the RawNode.
func newCore(cfg *Config) (*core, error) {
	members := slices.Clone(cfg.Members)
	slices.Sort(members)
	if err := cfg.FS.MkdirAll(cfg.DataDir); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.DataDir, FileName)
	ms, st, err := loadStorage(cfg.FS, path, members)
	if err != nil {
		return nil, err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return nil, err
	}
	// Apply what the disk says is committed before anyone reads the
	// state. Raft would only hand these entries over in its first Ready;
	// meanwhile the Node publishes the snapshot's state, possibly epochs
	// old, and the broker follows the leader it names, whose answer to
	// the truncation question can remove records committed since.
	applied := snap.GetMetadata().GetIndex()
	hs, _, err := ms.InitialState()
	if err != nil {
		return nil, err
	}
	if commit := hs.GetCommit(); commit > applied {
		ents, err := ms.Entries(applied+1, commit+1, math.MaxUint64)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			st = st.apply(e)
		}
		applied = commit
	}
	c := &core{
		self:          cfg.ID,
		members:       members,
		role:          cfg.Role,
		roles:         cfg.Roles,
		fs:            cfg.FS,
		path:          path,
		compactEvery:  uint64(cfg.CompactEvery),
		electionTicks: cfg.ElectionTicks,
		ms:            ms,
		state:         st,
		applied:       applied,
		lead:          raft.None,
		heard:         map[int32]uint64{},
		unclean:       cfg.UncleanRestart || cfg.LogDamaged,
		damaged:       cfg.LogDamaged,
		uncleanTicks:  int(cfg.UncleanWait / cfg.TickInterval),
		logger:        cfg.Logger,
		ballastPath:   filepath.Join(cfg.DataDir, BallastFileName),
		ballastBytes:  cfg.BallastBytes,
		ballastRetry:  max(int(ballastRetry/cfg.TickInterval), 1),
	}
	c.holdBallast()
	rc := &raft.Config{
		ID:                        uint64(cfg.ID),
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   ms,
		Applied:                   c.applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           64,
		MaxUncommittedEntriesSize: 1 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    cfg.raftLogger(),
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, err
	}
	c.rn = rn
	bs := rn.BasicStatus()
	c.term = bs.HardState.GetTerm()
	c.raftState = bs.RaftState
	return c, nil
}

// tick advances Raft's logical clock by one tick.
func (c *core) tick() {
	if c.failed != nil {
		return
	}
	if c.unsaved {
		c.save()
	}
	// Not on a full or stalling disk: writing the ballast there would take
	// the room it is meant to keep, or wait behind the stall.
	if !c.ballastHeld && !c.unsaved && c.degraded == "" && c.ballastBytes > 0 {
		if c.ballastWait--; c.ballastWait <= 0 {
			c.holdBallast()
		}
	}
	c.rn.Tick()
	if c.unclean && !c.damaged {
		if c.uncleanTicks--; c.uncleanTicks <= 0 {
			c.logger.Warn("replication raft: no catch-up with a leader since the unclean restart; standing for election on this replica's own data")
			c.endUnclean()
		}
	}
	if c.handOff && c.raftState == raft.StateLeader {
		c.handOffTicks++
		if c.handOffTicks >= c.electionTicks {
			c.transfer()
		}
	}
	if c.degraded != "" && c.serving() {
		// Once per election timeout: etcd raft gives up a transfer the
		// target does not complete within one.
		if c.degradedTicks++; c.degradedTicks >= c.electionTicks {
			c.degradedTicks = 0
			c.transfer()
		}
	}
	c.process()
}

// setDegraded records the disk's state (Config.Degraded).
func (c *core) setDegraded(why string) {
	if why != c.degraded {
		c.degraded, c.degradedTicks = why, 0
	}
}

// step hands a message from a peer to Raft. Messages from non-members or
// addressed to another replica are ignored.
func (c *core) step(m *pb.Message) {
	if c.failed != nil || m.GetTo() != uint64(c.self) || !slices.Contains(c.members, int32(m.GetFrom())) || raft.IsLocalMsg(m.GetType()) {
		return
	}
	if m.GetType() == pb.MsgPreVote && string(m.GetContext()) == probeContext {
		return // a replica that may not stand; see notStanding
	}
	if m.GetType() == pb.MsgTimeoutNow && c.degraded != "" {
		return // leadership handed to a degraded disk; see degraded
	}
	if from := int32(m.GetFrom()); m.GetTerm() > c.heard[from] {
		c.heard[from] = m.GetTerm()
	}
	_ = c.rn.Step(m) // errors mean "not for us now": Raft tolerates loss
	c.process()
}

// proposeISR proposes an ISR change; only the serving leader may, and only
// in its own epoch.
func (c *core) proposeISR(ch replication.ISRChange) error {
	return c.propose(ch.Epoch, encodeISR(ch))
}

// proposeFence proposes a fence change, on the same terms.
func (c *core) proposeFence(ch FenceChange) error {
	return c.propose(ch.Epoch, encodeFence(ch))
}

// transferTo starts a leadership transfer to an eligible member.
func (c *core) transferTo(to int32) error {
	if c.failed != nil {
		return c.failed
	}
	if !c.serving() {
		return ErrNotServing
	}
	if to == c.self {
		return nil
	}
	if !slices.Contains(c.handOffCandidates(), to) {
		return ErrNotEligible
	}
	c.rn.TransferLeader(uint64(to))
	c.process()
	return nil
}

// propose proposes an entry stamped with epoch, which must be the
// serving leader's own.
func (c *core) propose(epoch int32, data []byte) error {
	if c.failed != nil {
		return c.failed
	}
	if !c.serving() {
		return ErrNotServing
	}
	if epoch != c.state.Epoch {
		return fmt.Errorf("%w: change epoch %d, current epoch %d", ErrStaleEpoch, epoch, c.state.Epoch)
	}
	if err := c.rn.Propose(data); err != nil {
		return fmt.Errorf("%w: %v", ErrDropped, err)
	}
	c.process()
	return nil
}

// clearUnclean ends the unclean-restart restriction.
func (c *core) clearUnclean() {
	c.endUnclean()
	c.process()
}

// endUnclean lifts the unclean-restart restriction. A Raft leader that
// started handing leadership off because of it judges its eligibility
// again: otherwise it would go on handing off for the rest of its term,
// to nobody when no other member is eligible, and the group would never
// serve.
func (c *core) endUnclean() {
	if c.unclean {
		c.unclean, c.damaged = false, false
		c.ledTerm = 0
	}
}

// notStanding reports whether m is this replica's own campaign message
// while it may not stand for election: such a replica never asks for
// votes. Raft still times out and turns pre-candidate, but its pre-vote
// requests go out as probes that peers ignore (probeContext), so it
// neither wins nor raises the term, and it keeps voting for others. Before this, an ineligible replica won
// elections and handed leadership on at once: with every member unclean
// after a power cut the group raced through about sixty terms a second
// (chaos seed 20261129: epoch 6 to 1833 in 30 s) and a clean replica
// could lose the race to ineligible ones for as long. A vote request
// after a leadership transfer is let through: the leader chose this
// replica (handOffCandidates), and refusing would only stall the group
// until the transfer times out.
func (c *core) notStanding(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgPreVote:
	case pb.MsgVote:
		if string(m.GetContext()) == campaignTransfer {
			return false
		}
	default:
		return false
	}
	return !c.campaignAnyway && !c.candidacy(c.logISR()).Eligible()
}

// probeContext marks the pre-vote requests of a replica that may not
// stand: receivers drop them before Raft sees them.
const probeContext = "MoonMQNotStanding"

// campaignTransfer is the context etcd raft puts on the vote requests of
// a campaign that a leadership transfer started (raft.campaignTransfer).
const campaignTransfer = "CampaignTransfer"

// candidacy is what this replica knows for the eligibility rules, judged
// against the ISR isr (hasISR false before any exists).
func (c *core) candidacy(isr []int32, hasISR bool) replication.Candidacy {
	return replication.Candidacy{Self: c.self, ISR: isr, HasISR: hasISR, Role: c.role, UncleanRestart: c.unclean}
}

// serving reports whether this replica is the serving leader: Raft leader
// whose claim for its current term is applied, and not handing off.
func (c *core) serving() bool {
	return c.failed == nil && !c.unsaved && c.raftState == raft.StateLeader && !c.handOff &&
		c.state.Leader == c.self && uint64(c.state.Epoch) == c.term
}

// process handles every pending Ready and the leader's duties until Raft
// is quiet.
func (c *core) process() {
	for c.failed == nil {
		c.leaderDuties()
		if !c.rn.HasReady() {
			return
		}
		c.handleReady()
	}
}

// handleReady follows Raft's Ready contract: persist the snapshot, entries
// and HardState, then send, then apply, then Advance.
func (c *core) handleReady() {
	rd := c.rn.Ready()
	if rd.SoftState != nil {
		c.raftState, c.lead = rd.SoftState.RaftState, rd.SoftState.Lead
	}
	if rd.HardState != nil {
		c.term = rd.HardState.GetTerm()
	}
	dirty := false
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := c.ms.ApplySnapshot(rd.Snapshot); err != nil && err != raft.ErrSnapOutOfDate {
			c.fail(err)
			return
		}
		st, err := decodeSnapshotData(rd.Snapshot.GetData())
		if err != nil {
			c.fail(err)
			return
		}
		c.state, c.applied = st, rd.Snapshot.GetMetadata().GetIndex()
		if c.onApply != nil {
			c.onApply(c.applied, c.state.clone())
		}
		dirty = true
	}
	if len(rd.Entries) > 0 {
		if err := c.ms.Append(rd.Entries); err != nil {
			c.fail(err)
			return
		}
		dirty = true
	}
	if rd.HardState != nil {
		if err := c.ms.SetHardState(rd.HardState); err != nil {
			c.fail(err)
			return
		}
		dirty = true
	}
	if dirty || c.unsaved {
		c.save()
		if c.failed != nil {
			return
		}
	}
	var snapReports []*pb.Message
	var unreachable []uint64
	for _, m := range rd.Messages {
		if c.unsaved {
			if m.GetType() == pb.MsgSnap {
				snapReports = append(snapReports, &pb.Message{To: m.To, Reject: new(true)})
			}
			continue
		}
		if c.notStanding(m) {
			if m.GetType() != pb.MsgPreVote {
				continue
			}
			// Sent as a probe the peers drop (step): no vote comes
			// back, but the link is exercised, so a replica that cannot
			// reach its peers (TLS, addresses) still says why in its log.
			m.Context = []byte(probeContext)
		}
		ok := c.send(m)
		if m.GetType() == pb.MsgSnap {
			if !ok {
				m = &pb.Message{To: m.To, Reject: new(true)}
			}
			snapReports = append(snapReports, m)
		} else if !ok {
			unreachable = append(unreachable, m.GetTo())
		}
	}
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() <= c.applied {
			continue
		}
		c.state = c.state.apply(e)
		c.applied = e.GetIndex()
		if c.onApply != nil {
			c.onApply(c.applied, c.state.clone())
		}
	}
	c.rn.Advance(rd)
	for _, id := range unreachable {
		c.rn.ReportUnreachable(id)
	}
	for _, m := range snapReports {
		st := raft.SnapshotFinish
		if m.GetReject() {
			st = raft.SnapshotFailure
		}
		c.rn.ReportSnapshot(m.GetTo(), st)
	}
	c.maybeCompact()
}

// save writes the Raft state to its file. A failure for want of space
// leaves the core unsaved (see unsaved); any other fails it.
func (c *core) save() {
	err := saveStorage(c.fs, c.path, c.members, c.ms)
	switch {
	case err == nil:
		if c.unsaved {
			c.logger.Warn("replication raft: the Raft state is saved again; this replica takes part again")
		}
		c.unsaved = false
	case diskhealth.IsSpaceError(err) && c.ballastHeld:
		c.ballastHeld, c.ballastWait = false, c.ballastRetry
		if rerr := c.fs.Remove(c.ballastPath); rerr != nil {
			c.logger.Warn("replication raft: no disk space to save the Raft state, and the space kept for it cannot be given back", "file", c.ballastPath, "err", rerr)
		} else {
			c.logger.Warn("replication raft: no disk space to save the Raft state; gave back the space kept for it and saving again", "file", c.ballastPath, "bytes", c.ballastBytes)
		}
		c.save()
	case diskhealth.IsSpaceError(err):
		if !c.unsaved {
			c.logger.Warn("replication raft: no disk space to save the Raft state; this replica sends nothing until it can, and the others elect without it", "err", err)
		}
		c.unsaved = true
	default:
		c.fail(err)
	}
}

// BallastFileName is the ballast's file in DataDir (see core.ballastPath).
const BallastFileName = "replication-raft.ballast"

// holdBallast makes sure the ballast file exists whole. Failing for want
// of space, it leaves none (the space is better left to the Raft state)
// and is tried again later; any other failure is only logged.
func (c *core) holdBallast() {
	c.ballastWait = c.ballastRetry
	if c.ballastBytes <= 0 || c.ballastHeld {
		return
	}
	if f, err := c.fs.Open(c.ballastPath); err == nil {
		n, err := f.Size()
		f.Close()
		if err == nil && n == c.ballastBytes {
			c.ballastHeld = true
			return
		}
	}
	if err := vfs.WriteFileAtomic(c.fs, c.ballastPath, make([]byte, c.ballastBytes)); err != nil {
		_ = c.fs.Remove(c.ballastPath)
		if !diskhealth.IsSpaceError(err) {
			c.logger.Warn("replication raft: cannot keep space for the Raft state; a full disk will silence this replica until space is freed", "file", c.ballastPath, "err", err)
		}
		return
	}
	c.ballastHeld = true
}

// maybeCompact folds the applied prefix of the log into a snapshot of the
// applied state once it is compactEvery entries long.
func (c *core) maybeCompact() {
	snap, err := c.ms.Snapshot()
	if err != nil {
		c.fail(err)
		return
	}
	if c.applied < snap.GetMetadata().GetIndex()+c.compactEvery {
		return
	}
	if _, err := c.ms.CreateSnapshot(c.applied, confState(c.members), encodeSnapshotData(c.state)); err != nil {
		c.fail(err)
		return
	}
	if err := c.ms.Compact(c.applied); err != nil {
		c.fail(err)
		return
	}
	if err := saveStorage(c.fs, c.path, c.members, c.ms); err != nil {
		c.fail(err)
	}
}

func (c *core) fail(err error) {
	if c.failed == nil {
		c.failed = err
	}
}

// leaderDuties runs after every step: a new leader decides whether it may
// claim (eligible in its own log) or must hand off; an eligible leader
// proposes its claim once per term; a leader whose applied claim turns out
// to be inadmissible (MustHandOff) hands off.
func (c *core) leaderDuties() {
	if c.raftState != raft.StateLeader {
		c.handOff = false
		return
	}
	if c.ledTerm != c.term {
		c.ledTerm, c.claimTerm, c.handOff, c.handOffTries = c.term, 0, false, 0
		if !c.candidacy(c.logISR()).Eligible() {
			c.startHandOff()
		}
	}
	if c.handOff {
		return
	}
	if uint64(c.state.Epoch) == c.term && c.state.Leader == c.self &&
		c.candidacy(c.state.ISR, c.state.HasISR).MustHandOff() {
		c.startHandOff()
		return
	}
	if c.claimTerm != c.term {
		if err := c.rn.Propose(encodeClaim(LeadershipClaim{Epoch: int32(c.term), LeaderID: c.self})); err == nil {
			c.claimTerm = c.term
		}
	}
}

func (c *core) startHandOff() {
	c.handOff = true
	c.transfer()
}

// transfer asks Raft to hand leadership to an eligible member; repeated
// every election timeout while this replica is still leader, rotating
// through the candidates.
func (c *core) transfer() {
	c.handOffTicks = 0
	cands := c.handOffCandidates()
	if len(cands) == 0 {
		return
	}
	target := cands[c.handOffTries%len(cands)]
	c.handOffTries++
	c.rn.TransferLeader(uint64(target))
}

// handOffCandidates are the other members eligible by the ISR of this
// leader's log, the recently active and most caught up first. A member
// missing from Roles counts as eligible before any ISR exists (if it is
// not, it hands off in its turn).
func (c *core) handOffCandidates() []int32 {
	isr, has := c.logISR()
	st := c.rn.Status()
	var cands []int32
	for _, m := range c.members {
		if m == c.self {
			continue
		}
		role, known := c.roles[m]
		if !known && !has {
			role = replication.RoleBoth
		}
		if replication.Eligible(m, isr, role, has) {
			cands = append(cands, m)
		}
	}
	score := func(id int32) (bool, uint64) {
		p, ok := st.Progress[uint64(id)]
		if !ok {
			return false, 0
		}
		return p.RecentActive && p.State != tracker.StateSnapshot, p.Match
	}
	slices.SortStableFunc(cands, func(a, b int32) int {
		aa, am := score(a)
		ba, bm := score(b)
		if aa != ba {
			if aa {
				return -1
			}
			return 1
		}
		return cmp.Compare(bm, am)
	})
	return cands
}

// logISR is the ISR as recorded in this replica's own Raft log: the
// applied state with every later entry of the log (committed or not)
// applied to it.
func (c *core) logISR() ([]int32, bool) {
	s := c.state
	last, _ := c.ms.LastIndex()
	if last > c.applied {
		if ents, err := c.ms.Entries(c.applied+1, last+1, 1<<62); err == nil {
			for _, e := range ents {
				s = s.apply(e)
			}
		}
	}
	return s.ISR, s.HasISR
}

// status is the replica's view for /replication/status.
func (c *core) status() Status {
	st := Status{
		ReplicaID:   c.self,
		Role:        roleName(c.raftState),
		Leader:      NoLeader,
		RaftLeader:  NoLeader,
		Epoch:       c.state.Epoch,
		ISR:         slices.Clone(c.state.ISR),
		HasISR:      c.state.HasISR,
		Serving:     c.serving(),
		Unclean:     c.unclean,
		LogDamaged:  c.damaged,
		HandingOff:  c.handOff && c.raftState == raft.StateLeader,
		RaftTerm:    c.term,
		CommitIndex: c.rn.BasicStatus().HardState.GetCommit(),
		Applied:     c.applied,
		State:       c.state.clone(),
	}
	for _, m := range c.members {
		if m != c.self && c.term > 0 && c.heard[m] >= c.term {
			st.Heard = append(st.Heard, m)
		}
	}
	if c.state.Leader != NoLeader {
		st.Leader = c.state.Leader
	}
	if c.lead != raft.None {
		st.RaftLeader = int32(c.lead)
	}
	if c.failed != nil {
		st.Err = c.failed.Error()
	}
	return st
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate, raft.StatePreCandidate:
		return "candidate"
	}
	return "follower"
}
