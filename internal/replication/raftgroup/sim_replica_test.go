package raftgroup

// One simulated replica: the real Raft core, real storage.Log partitions on
// a vfs.MemFS disk, the real replication.Leader and replication.Fetcher
// decisions, and around them a single-threaded copy of the glue that
// internal/broker (replica.go, replica_failover.go, produce.go) and
// internal/replication/shipping (follower.go, leader.go) wrap around those
// decisions. The glue is modelled, not shared: it is written here as the
// broker does it, step for step, and must be kept in line with it.

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const sysTopic = "t"

// sysEpochBase is the wall time the virtual clock starts at.
var sysEpochBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// sysRec is what the simulation remembers of one offset of a log: the
// batch holding it (the header fields that make two stored batches the
// same bytes, CRC included) and the record's value id.
type sysRec struct {
	base  int64
	epoch int32
	crc   uint32
	size  int32
	val   int32
}

// sysShadow mirrors one partition log: recs[i] is offset start+i. It is
// kept in step with every write the simulation makes and compared with the
// log's bytes by the deep check.
type sysShadow struct {
	start int64
	recs  []sysRec
}

func (s *sysShadow) end() int64 { return s.start + int64(len(s.recs)) }

func (s *sysShadow) at(off int64) (sysRec, bool) {
	if off < s.start || off >= s.end() {
		return sysRec{}, false
	}
	return s.recs[off-s.start], true
}

// sysParked is a fetch the leader holds (long-poll) until data arrives or
// its wait ends.
type sysParked struct {
	m    *sysMsg
	done bool
}

// sysTrunc is a follower's truncation pass in progress (shipping's
// truncateAll): the current decision of every partition, and the
// partitions of the epoch-end request in flight.
type sysTrunc struct {
	d     []replication.TruncDecision
	done  []bool
	asked []int
	round int
}

// sysPub is what Node.publish compares to decide that the broker's drive
// loop must look at the group state again.
type sysPub struct {
	serving  bool
	unclean  bool
	role     string
	epoch    int32
	leader   int32
	raftLead int32
	hasISR   bool
	isr      [8]int32
	nisr     int
}

type sysReplica struct {
	w      *sysWorld
	id     int32
	fs     *vfs.MemFS
	inc    int
	up     bool
	paused bool
	held   []*sysEvent
	// noTick freezes the Raft clock (scripted scenarios use it to decide
	// who campaigns); driveHold keeps the broker's drive loop busy until
	// then (scenarios use it to delay a promotion).
	noTick    bool
	driveHold time.Duration

	core *core
	// status is what the Node has published (Node.Status): the core's
	// status as of the end of its last processing, which includes writing
	// replication-raft.json, so it trails the core by that write.
	status        Status
	pub           sysPub
	publishQueued bool
	applyQueued   bool

	logs        []*storage.Log
	shadow      []sysShadow
	hw          []int64 // the broker's per-partition high watermark
	flushQueued bool
	// diskDelay is how long an fsync takes on this replica's disk (a
	// slow-disk fault sets it).
	diskDelay time.Duration

	// unclean is set while the replica, restarted without its
	// clean-shutdown marker, has not caught up with a leader; caught
	// holds which partitions have (replica.noteCatchUp).
	unclean bool
	caught  []bool

	// Broker-level leader state (replica_failover.go).
	epoch         int32 // b.epoch: stamped on appends, checked by shipping
	ldr           *replication.Leader
	isrSeen       []int32
	leader        int32 // r.leader
	followedEpoch int32 // r.followedEpoch
	parked        []*sysParked

	// Follower state (shipping.Follower).
	fetcher *replication.Fetcher
	act     replication.Action
	folTok  int
	req     uint64
	trunc   *sysTrunc
	backoff time.Duration
}

func newSysReplica(w *sysWorld, id int32) *sysReplica {
	r := &sysReplica{w: w, id: id, fs: vfs.NewMem()}
	r.openLogs()
	return r
}

func (r *sysReplica) tp(p int) replication.TopicPartition {
	return replication.TopicPartition{Topic: sysTopic, Partition: int32(p)}
}

func (r *sysReplica) dir(p int) string { return fmt.Sprintf("/data/%s-%d", sysTopic, p) }

func (r *sysReplica) role() replication.Role {
	if r.w.cfg.Roles == nil {
		return replication.RoleBoth
	}
	return r.w.cfg.Roles[r.id-1]
}

func (r *sysReplica) roles() map[int32]replication.Role {
	if r.w.cfg.Roles == nil {
		return nil
	}
	m := map[int32]replication.Role{}
	for i, role := range r.w.cfg.Roles {
		m[int32(i+1)] = role
	}
	return m
}

// openLogs opens (and so recovers) every partition on the current disk
// and rebuilds the shadows from what is really there.
func (r *sysReplica) openLogs() {
	r.logs = make([]*storage.Log, r.w.cfg.Partitions)
	r.shadow = make([]sysShadow, r.w.cfg.Partitions)
	r.hw = make([]int64, r.w.cfg.Partitions)
	for p := range r.logs {
		l, err := storage.Open(r.dir(p), storage.Options{FS: r.fs, SegmentBytes: sysSegmentBytes, RetentionMs: -1,
			RetentionBytes: -1, IndexIntervalBytes: 256, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			r.w.fail("r%d: open partition %d: %v", r.id, p, err)
			return
		}
		r.logs[p] = l
		sh, err := sysReadShadow(l)
		if err != nil {
			r.w.fail("r%d: read partition %d: %v", r.id, p, err)
			return
		}
		r.shadow[p] = sh
		r.hw[p] = l.StartOffset()
	}
}

// sysReadBatches returns every stored batch of l, in order.
func sysReadBatches(l *storage.Log) ([][]byte, error) {
	var out [][]byte
	off, end := l.StartOffset(), l.EndOffset()
	for off < end {
		b, err := l.Read(off, 1<<20, end)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("read at %d returned nothing below the end %d", off, end)
		}
		for len(b) > 0 {
			h, err := recordbatch.ParseHeader(b)
			if err != nil || h.Size() > len(b) {
				return nil, fmt.Errorf("bad stored batch at %d: %v", off, err)
			}
			out = append(out, b[:h.Size()])
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	return out, nil
}

func sysReadShadow(l *storage.Log) (sysShadow, error) {
	sh := sysShadow{start: l.StartOffset()}
	bs, err := sysReadBatches(l)
	if err != nil {
		return sh, err
	}
	for _, b := range bs {
		recs, err := sysBatchRecs(b)
		if err != nil {
			return sh, err
		}
		if recs[0].base != sh.end() {
			return sh, fmt.Errorf("batch at %d, log at %d", recs[0].base, sh.end())
		}
		sh.recs = append(sh.recs, recs...)
	}
	return sh, nil
}

// sysBatchRecs decodes a whole batch into one sysRec per offset.
func sysBatchRecs(b []byte) ([]sysRec, error) {
	h, err := recordbatch.Check(b)
	if err != nil {
		return nil, err
	}
	rs, err := recordbatch.Records(b, 1<<20)
	if err != nil {
		return nil, err
	}
	if int64(len(rs)) != int64(h.LastOffsetDelta)+1 {
		return nil, fmt.Errorf("batch at %d holds %d records for %d offsets", h.BaseOffset, len(rs), h.LastOffsetDelta+1)
	}
	out := make([]sysRec, len(rs))
	for i, rec := range rs {
		v, err := sysValueID(rec.Value)
		if err != nil {
			return nil, err
		}
		out[i] = sysRec{base: h.BaseOffset, epoch: h.PartitionLeaderEpoch, crc: h.CRC, size: int32(h.Size()), val: v}
	}
	return out, nil
}

func sysValue(id int32) string { return "v" + strconv.Itoa(int(id)) }

func sysValueID(b []byte) (int32, error) {
	if len(b) < 2 || b[0] != 'v' {
		return 0, fmt.Errorf("unexpected value %q", b)
	}
	n, err := strconv.Atoi(string(b[1:]))
	return int32(n), err
}

// after schedules fn on this replica's current incarnation.
func (r *sysReplica) after(d time.Duration, fn func()) {
	r.w.push(&sysEvent{at: r.w.now + d, node: r.id, inc: r.inc, fn: fn})
}

func (r *sysReplica) wall() time.Time { return sysEpochBase.Add(r.w.now) }

// start boots the replica from its disk: a fresh Raft core from
// replication-raft.json, the broker's state empty, every high watermark
// at its log start (a failover replica opens its partitions that way).
func (r *sysReplica) start() {
	w := r.w
	r.inc++
	r.up = true
	compact := 8
	if w.cfg.CompactEvery > 0 {
		compact = w.cfg.CompactEvery
	}
	unclean, err := r.uncleanRestart()
	if err != nil {
		w.fail("r%d: clean-shutdown marker: %v", r.id, err)
		return
	}
	r.unclean, r.caught = unclean, make([]bool, len(r.logs))
	cfg := Config{ID: r.id, Members: w.ids, Role: r.role(), Roles: r.roles(), DataDir: "/data", FS: r.fs,
		TickInterval: sysTick, ElectionTicks: sysElection, HeartbeatTicks: 1, CompactEvery: compact,
		UncleanRestart: unclean, UncleanWait: sysUncleanWait, Logger: slog.New(slog.DiscardHandler),
		BallastBytes: simBallast}
	if err := cfg.setDefaults(); err != nil {
		w.fail("r%d: config: %v", r.id, err)
		return
	}
	c, err := newCore(&cfg)
	if err != nil {
		w.fail("r%d: start: %v", r.id, err)
		return
	}
	id := r.id
	c.send = func(m *pb.Message) bool {
		w.send(&sysMsg{kind: msgRaft, from: id, to: int32(m.GetTo()), raft: proto.Clone(m).(*pb.Message)})
		return true
	}
	c.onApply = func(index uint64, st GroupState) { w.ck.onApply(id, index, st) }
	c.campaignAnyway = w.cfg.Mut == mutUncleanLeader
	r.core = c
	// NewNode publishes the status the core was loaded with; the Node's
	// first tick and the drive loop's first tick come one interval later,
	// in either order.
	r.status = c.status()
	r.pub = sysPubOf(r.status)
	r.publishQueued, r.applyQueued, r.flushQueued = false, false, false
	r.epoch, r.ldr, r.isrSeen, r.leader, r.followedEpoch, r.parked = 0, nil, nil, NoLeader, 0, nil
	r.fetcher = replication.NewFetcher()
	r.act = replication.Action{Kind: replication.ActWait}
	r.req, r.trunc, r.backoff = 0, nil, 0
	r.folTok++
	for p := range r.hw {
		r.hw[p] = r.logs[p].StartOffset()
	}
	r.scheduleTick(sysTick + w.between(0, time.Millisecond))
	r.scheduleDrive(sysDriveEvery + w.between(0, time.Millisecond))
}

func (r *sysReplica) scheduleTick(d time.Duration) {
	r.after(d, func() {
		if !r.noTick {
			r.core.tick()
			r.notice()
		}
		r.scheduleTick(sysTick)
	})
}

func (r *sysReplica) scheduleDrive(d time.Duration) {
	r.after(d, func() {
		if r.w.now < r.driveHold {
			r.scheduleDrive(r.driveHold - r.w.now)
			return
		}
		r.apply()
		r.tickLeader()
		r.scheduleDrive(sysDriveEvery)
	})
}

// uncleanRestart is replica.uncleanRestart: consume the clean-shutdown
// marker; a replica that has run before (it has Raft state) and finds no
// marker restarted uncleanly.
func (r *sysReplica) uncleanRestart() (bool, error) {
	_, err := vfs.ReadFile(r.fs, sysCleanFile)
	clean := err == nil
	if clean {
		if err := r.fs.Remove(sysCleanFile); err != nil {
			return false, err
		}
		if err := r.fs.SyncDir("/data"); err != nil {
			return false, err
		}
	}
	if _, err := vfs.ReadFile(r.fs, "/data/"+FileName); err != nil {
		return false, nil // a fresh replica has nothing to have lost
	}
	return !clean, nil
}

// sysCleanFile is broker.CleanShutdownFile in the simulated DataDir.
const sysCleanFile = "/data/clean-shutdown"

// noteCatchUp is replica.noteCatchUp: once every partition's durable end
// has reached the leader's high watermark, the replica may stand again.
func (r *sysReplica) noteCatchUp(p int, hw int64) {
	now := r.logs[p].DurableEnd() >= hw
	was := r.caught[p]
	r.caught[p] = now
	if !now || was || slices.Contains(r.caught, false) {
		return
	}
	r.unclean = false
	r.w.tracef("r%d caught up after its unclean restart", r.id)
	r.core.clearUnclean()
	r.notice()
}

// crash stops the replica. The disk keeps what the crash kind allows; the
// partitions are reopened (recovered) at once so that the checks see what
// a restart will find, and recovery is checked to keep every durable byte.
func (r *sysReplica) crash(kind sysCrashKind) {
	w := r.w
	oldShadow := slices.Clone(r.shadow)
	oldDurable := make([]int64, len(r.logs))
	for p, l := range r.logs {
		oldDurable[p] = l.DurableEnd()
	}
	switch kind {
	case crashClean:
		// Broker.Close syncs every log; then the marker is written.
		for p, l := range r.logs {
			if _, err := l.Sync(); err != nil {
				w.fail("r%d partition %d: sync at stop: %v", r.id, p, err)
				return
			}
		}
		if err := vfs.WriteFileAtomic(r.fs, sysCleanFile, []byte("clean\n")); err != nil {
			w.fail("r%d: clean-shutdown marker: %v", r.id, err)
			return
		}
	case crashPower:
		r.fs = r.fs.Crash()
	case crashTorn:
		r.fs = r.fs.CrashTorn(rand.New(rand.NewPCG(w.rng.Uint64(), 7)))
	}
	if r.ldr != nil {
		w.cl.leaderGone(r)
	}
	r.up, r.paused, r.held = false, false, nil
	r.core, r.ldr, r.parked = nil, nil, nil
	r.inc++ // nothing scheduled by the dead process runs
	r.openLogs()
	if w.stop {
		return
	}
	for p := range r.logs {
		nsh := r.shadow[p]
		osh := oldShadow[p]
		if nsh.end() < oldDurable[p] {
			w.fail("r%d partition %d: crash (%s) lost durable data: log end %d after recovery, durable end was %d",
				r.id, p, sysCrashNames[kind], nsh.end(), oldDurable[p])
			return
		}
		if (kind == crashKill || kind == crashClean) && nsh.end() != osh.end() {
			w.fail("r%d partition %d: a process kill changed the log end from %d to %d", r.id, p, osh.end(), nsh.end())
			return
		}
		for off := nsh.start; off < nsh.end(); off++ {
			a, _ := nsh.at(off)
			b, ok := osh.at(off)
			if !ok || a != b {
				w.fail("r%d partition %d: recovered offset %d is %+v, was %+v", r.id, p, off, a, b)
				return
			}
		}
		w.ck.replaced(r, p)
	}
}

func sysPubOf(st Status) sysPub {
	p := sysPub{serving: st.Serving, unclean: st.Unclean, role: st.Role, epoch: st.Epoch, leader: st.Leader,
		raftLead: st.RaftLeader, hasISR: st.HasISR, nisr: len(st.ISR)}
	copy(p.isr[:], st.ISR)
	return p
}

// notice follows a step of the core: once the core has finished
// processing (and written its state file), the Node publishes its status
// and, when something the drive loop cares about changed, notifies
// Changes; the drive loop then applies it.
func (r *sysReplica) notice() {
	if r.publishQueued {
		return
	}
	c := r.core
	p := sysPub{serving: c.serving(), unclean: c.unclean, role: roleName(c.raftState), epoch: c.state.Epoch,
		leader: c.state.Leader, raftLead: NoLeader, hasISR: c.state.HasISR, nisr: len(c.state.ISR)}
	if c.lead != raft.None {
		p.raftLead = int32(c.lead)
	}
	copy(p.isr[:], c.state.ISR)
	if p == r.pub {
		return
	}
	r.publishQueued = true
	r.after(r.w.between(500*time.Microsecond, 3*time.Millisecond)+r.diskDelay, func() {
		r.publishQueued = false
		r.status = r.core.status()
		p := sysPubOf(r.status)
		if p == r.pub {
			return
		}
		r.pub = p
		if r.applyQueued {
			return
		}
		r.applyQueued = true
		r.after(max(r.w.between(0, time.Millisecond), r.driveHold-r.w.now), func() {
			r.applyQueued = false
			r.apply()
		})
	})
}

func (r *sysReplica) stepRaft(m *pb.Message) {
	r.core.step(m)
	r.notice()
}

// apply is replica.apply: promote on a served claim, step down when no
// longer serving, steer the follower towards the leader of the latest
// claim.
func (r *sysReplica) apply() {
	st := r.status
	if !st.Unclean {
		// Cleared by the node (its wait ran out) or never set.
		r.unclean = false
	}
	if r.w.cfg.Mut == mutUncleanLeader && r.core.raftState == raft.StateLeader && !st.Serving {
		st.Serving, st.Epoch, st.Leader = true, int32(r.core.term), r.id
	}
	if st.Serving && st.Epoch > 0 {
		if r.ldr != nil && r.ldr.Epoch() == st.Epoch {
			r.isrChanged(st)
			return
		}
		if r.ldr != nil {
			r.stepDown()
		}
		r.promote(st)
		return
	}
	if r.ldr != nil {
		r.w.tracef("r%d steps down (epoch %d, leader %d)", r.id, r.ldr.Epoch(), st.Leader)
		r.stepDown()
	}
	if st.Leader == NoLeader || st.Leader == r.id {
		return
	}
	same := r.leader == st.Leader && r.followedEpoch == st.Epoch
	r.leader, r.followedEpoch = st.Leader, st.Epoch
	if same {
		return
	}
	r.epoch = st.Epoch
	r.w.tracef("r%d follows r%d in epoch %d", r.id, st.Leader, st.Epoch)
	r.setLeader(st.Leader, st.Epoch)
}

func (r *sysReplica) newLeader() *replication.Leader {
	opts := []replication.Option{replication.WithIsrLag(sysIsrLag), replication.WithMinISR(r.w.cfg.MinISR)}
	if r.w.cfg.Silent {
		opts = append(opts, replication.WithSilentRemoval(sysSilentGrace))
	}
	return replication.NewLeader(opts...)
}

// promote is replica.promote.
func (r *sysReplica) promote(st Status) {
	r.clearLeader()
	r.epoch = st.Epoch
	isr := slices.Clone(r.w.ids)
	if st.State.HasISR {
		isr = slices.Clone(st.State.ISR)
	}
	ldr := r.newLeader()
	ldr.Configure(r.w.ids, r.id, isr, st.Epoch)
	// The epoch's clock, which the silent-member grace counts from,
	// starts now rather than at the first tick.
	ldr.Tick(r.wall())
	for _, id := range st.Heard {
		ldr.Heard(id)
	}
	for p, l := range r.logs {
		ldr.AppendLocal(r.tp(p), l.EndOffset(), l.DurableEnd())
		ldr.SeedHighWatermark(r.tp(p), r.hw[p])
	}
	r.ldr, r.leader, r.followedEpoch = ldr, r.id, 0
	r.isrSeen = isr
	r.w.tracef("r%d leads epoch %d, isr %v, hw %v", r.id, st.Epoch, isr, r.hw)
}

// stepDown is replica.stepDown: clients lose their answers, the follower
// may write again.
func (r *sysReplica) stepDown() {
	r.w.cl.leaderGone(r)
	r.ldr = nil
	r.leader = NoLeader
}

// isrChanged feeds a newly applied ISR to the leader.
func (r *sysReplica) isrChanged(st Status) {
	if !st.State.HasISR || r.ldr == nil || slices.Equal(r.isrSeen, st.State.ISR) {
		return
	}
	r.isrSeen = slices.Clone(st.State.ISR)
	r.ldr.ISRCommitted(st.State.ISR, st.Epoch)
	r.w.tracef("r%d: ISR %v committed in epoch %d", r.id, st.State.ISR, st.Epoch)
	r.raiseAll()
	r.w.cl.sweep(r)
}

// tickLeader is replica.tickLeader.
func (r *sysReplica) tickLeader() {
	if r.ldr == nil {
		return
	}
	if st := r.status; st.RaftTerm == uint64(r.ldr.Epoch()) {
		for _, id := range st.Heard {
			r.ldr.Heard(id)
		}
	}
	r.ldr.Tick(r.wall())
	props := r.ldr.Proposals()
	if _, pending := r.ldr.Pending(); !pending && len(props) == 0 && !r.status.State.HasISR {
		props = append(props, replication.ISRChange{Epoch: r.ldr.Epoch(), ISR: slices.Clone(r.isrSeen), Replica: r.id, Expand: true})
	}
	for _, c := range props {
		err := r.core.proposeISR(c)
		r.notice()
		r.w.tracef("r%d proposes ISR %v (replica %d expand %v): %v", r.id, c.ISR, c.Replica, c.Expand, err)
		if err != nil && CertainlyNotProposed(err) && r.ldr != nil {
			// Never appended: it may be proposed again.
			r.ldr.ProposalFailed(c)
			continue
		}
		if err == nil && r.w.cfg.Mut == mutShrinkBeforeCommit && !c.Expand && r.ldr != nil {
			r.ldr.ISRCommitted(c.ISR, c.Epoch)
			r.isrSeen = slices.Clone(c.ISR)
		}
		if r.ldr == nil {
			return
		}
	}
	r.raiseAll()
	r.w.cl.sweep(r)
}

func (r *sysReplica) raiseAll() {
	for p, l := range r.logs {
		r.raiseHW(p, r.ldr.HighWatermark(r.tp(p)), l.DurableEnd())
	}
}

// raiseHW is broker.raiseHW: the broker's high watermark only rises, and
// never above limit.
func (r *sysReplica) raiseHW(p int, hw, limit int64) {
	hw = min(hw, limit)
	if hw <= r.hw[p] {
		return
	}
	r.hw[p] = hw
	if r.ldr != nil {
		r.w.cl.hwRaised(r, p)
	}
}

// Leader side: produce and flush.

type sysProduceCode int

const (
	produceOK sysProduceCode = iota
	produceNotLeader
	produceNotEnoughReplicas
)

// produce appends one batch of values to partition p as the leader does
// (NOT_ENOUGH_REPLICAS before the append when under min.insync.replicas).
func (r *sysReplica) produce(p int, vals []int32) (base, last int64, code sysProduceCode) {
	if r.ldr == nil {
		return 0, 0, produceNotLeader
	}
	if r.ldr.PartitionUnderMinISR(r.tp(p)) {
		return 0, 0, produceNotEnoughReplicas
	}
	recs := make([]recordbatch.Record, len(vals))
	for i, v := range vals {
		recs[i] = recordbatch.Record{Value: []byte(sysValue(v)), Timestamp: r.w.now.Milliseconds()}
	}
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, recs)
	if err != nil {
		r.w.fail("encode: %v", err)
		return 0, 0, produceNotLeader
	}
	l := r.logs[p]
	base, err = l.Append(b, r.epoch)
	if err != nil {
		r.w.fail("r%d partition %d: append: %v", r.id, p, err)
		return 0, 0, produceNotLeader
	}
	r.shadowAppend(p, b)
	last = base + int64(len(vals)) - 1
	r.w.tracef("r%d appends %v at %d..%d epoch %d", r.id, vals, base, last, r.epoch)
	if r.w.cfg.Mut == mutLeaderCountsUnsynced {
		r.ldr.AppendLocal(r.tp(p), l.EndOffset(), l.EndOffset())
		r.raiseHW(p, r.ldr.HighWatermark(r.tp(p)), l.EndOffset())
	}
	r.wakeParked()
	r.scheduleFlush()
	return base, last, produceOK
}

func (r *sysReplica) scheduleFlush() {
	if r.flushQueued {
		return
	}
	r.flushQueued = true
	r.after(r.w.between(500*time.Microsecond, 5*time.Millisecond)+r.diskDelay, func() {
		r.flushQueued = false
		r.flush()
	})
}

// flush is the flusher's pass: fsync every dirty partition and report its
// durable end (replica.synced).
func (r *sysReplica) flush() {
	for p, l := range r.logs {
		if !l.Dirty() {
			continue
		}
		d, err := l.Sync()
		if err != nil {
			r.w.fail("r%d partition %d: sync: %v", r.id, p, err)
			return
		}
		if r.ldr != nil {
			r.ldr.AppendLocal(r.tp(p), l.EndOffset(), d)
			r.raiseHW(p, r.ldr.HighWatermark(r.tp(p)), d)
		}
	}
}

// Writes to a log, each mirrored in the shadow and checked.

func (r *sysReplica) shadowAppend(p int, batch []byte) {
	recs, err := sysBatchRecs(batch)
	if err != nil {
		r.w.fail("r%d partition %d: appended an undecodable batch: %v", r.id, p, err)
		return
	}
	sh := &r.shadow[p]
	if recs[0].base != sh.end() {
		r.w.fail("r%d partition %d: batch appended at %d, shadow ends at %d", r.id, p, recs[0].base, sh.end())
		return
	}
	sh.recs = append(sh.recs, recs...)
	if end := r.logs[p].EndOffset(); end != sh.end() {
		r.w.fail("r%d partition %d: log end %d after an append, expected %d", r.id, p, end, sh.end())
		return
	}
	r.w.ck.appended(r, p)
}

// truncate removes every offset >= off (a whole batch holding off goes),
// after checking that it removes nothing committed.
func (r *sysReplica) truncate(p int, off int64, why string) error {
	l := r.logs[p]
	if off >= l.EndOffset() {
		return nil
	}
	r.w.tracef("r%d partition %d: truncate to %d (%s), log end %d, hw %d", r.id, p, off, why, l.EndOffset(), r.hw[p])
	r.w.ck.beforeTruncate(r, p, off, why)
	if err := l.Truncate(off); err != nil {
		r.w.fail("r%d partition %d: truncate to %d: %v", r.id, p, off, err)
		return err
	}
	sh := &r.shadow[p]
	end := l.EndOffset()
	if end > off || end < sh.start {
		r.w.fail("r%d partition %d: truncate to %d left the log end at %d", r.id, p, off, end)
		return nil
	}
	sh.recs = sh.recs[:end-sh.start]
	r.w.ck.replaced(r, p)
	return nil
}

func (r *sysReplica) resetPartition(tp replication.TopicPartition, off int64) error {
	p := int(tp.Partition)
	r.w.tracef("r%d partition %d: reset to %d", r.id, p, off)
	r.w.ck.beforeTruncate(r, p, r.logs[p].StartOffset(), "reset")
	if err := r.logs[p].TruncateFullyAndStartAt(off); err != nil {
		r.w.fail("r%d partition %d: reset: %v", r.id, p, err)
		return err
	}
	r.shadow[p] = sysShadow{start: off}
	r.w.ck.replaced(r, p)
	return nil
}
