package raftgroup

// The whole-system deterministic simulation (tier 1 of the checks that
// failover mode never loses an acknowledged record; docs/RELIABILITY.md). This file holds the world: virtual clock,
// seeded scheduler, network and fault injector. sim_replica_test.go is one
// replica (Raft core, broker glue, storage), sim_ship_test.go its log
// shipping, sim_client_test.go the clients, sim_check_test.go the
// invariants, sim_scenario_test.go the scripted scenarios and
// system_sim_test.go the randomized tests. Everything runs in one
// goroutine; the only sources of randomness are the world's generator and
// crypto/rand, which etcd raft uses for election timeouts and which the
// tests pin with testing/cryptotest, so a seed replays exactly.

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/replication"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Timing of the simulated group. The Raft clock and the drive loop follow
// the broker's (50 ms ticks, 10-tick elections, 50 ms drive); the ISR lag
// is shortened from the 10 s default so that shrinks and expands happen
// many times per run.
const (
	sysTick         = 50 * time.Millisecond
	sysElection     = 10
	sysDriveEvery   = 50 * time.Millisecond
	sysIsrLag       = time.Second
	sysSilentGrace  = 150 * time.Millisecond
	sysMaxWait      = 200 * time.Millisecond // follower long-poll
	sysReqTimeout   = 500 * time.Millisecond // beyond the long-poll
	sysMinBackoff   = 50 * time.Millisecond
	sysMaxBackoff   = time.Second
	sysAckTimeout   = 2 * time.Second
	sysUncleanWait  = 5 * time.Second // raftgroup.Config.UncleanWait, shortened
	sysSegmentBytes = 4096            // small, so segments roll
	sysMaxFetch     = 2048            // bytes per fetch answer
)

// sysMutation is a deliberately injected bug, used to show that the
// simulation catches what it claims to catch.
type sysMutation int

const (
	mutNone sysMutation = iota
	// mutLeaderCountsUnsynced: the leader reports its log end as durable
	// before the fsync.
	mutLeaderCountsUnsynced
	// mutFollowerNoSync: a follower reports its log end without fsyncing.
	mutFollowerNoSync
	// mutTruncateToHW: a follower truncates to its own high watermark on a
	// new epoch instead of asking the leader (the bug KIP-101 fixed).
	mutTruncateToHW
	// mutNoTruncation: a follower keeps whatever tail it has.
	mutNoTruncation
	// mutAckOnAppend: acks=all is answered when the leader has appended.
	mutAckOnAppend
	// mutShrinkBeforeCommit: a proposed ISR shrink counts at once.
	mutShrinkBeforeCommit
	// mutUncleanLeader: a Raft leader serves even when it is not eligible
	// (outside the ISR) instead of handing leadership off.
	mutUncleanLeader
)

var sysMutationNames = map[sysMutation]string{
	mutNone: "none", mutLeaderCountsUnsynced: "leader-counts-unsynced", mutFollowerNoSync: "follower-no-sync",
	mutTruncateToHW: "truncate-to-hw", mutNoTruncation: "no-truncation", mutAckOnAppend: "ack-on-append",
	mutShrinkBeforeCommit: "shrink-before-commit", mutUncleanLeader: "unclean-leader",
}

func (m sysMutation) String() string { return sysMutationNames[m] }

// sysConfig is one run's shape.
type sysConfig struct {
	Replicas   int
	Partitions int
	MinISR     int
	// Roles holds each replica's configured role (index id-1); all
	// RoleBoth when nil.
	Roles []replication.Role
	// Steps is the number of events of the chaos phase.
	Steps int
	// Faults turns the random fault injector on; Clients the random
	// producer and consumer.
	Faults, Clients bool
	// Silent gives the leaders WithSilentRemoval (the broker's failover
	// timing work turns it on; the seeds try both).
	Silent bool
	Mut    sysMutation
	// EndToEnd turns the step invariants off: only what clients saw and
	// the final state of the logs are judged (the final check and the
	// history checker). It shows that what the invariants flag turns
	// into lost acknowledged records.
	EndToEnd bool
	// CompactEvery overrides how many applied Raft entries a core keeps
	// before compacting them into its snapshot (default 8).
	CompactEvery int
	// Trace is how many trace lines to keep (0: no tracing).
	Trace int
}

// sysEvent is one scheduled action. Replica events (node != 0) run only if
// the replica is up, in the incarnation that scheduled them (unless
// anyInc: messages outlive a restart of their target), and are held while
// it is paused.
type sysEvent struct {
	at     time.Duration
	seq    uint64
	node   int32
	inc    int
	anyInc bool
	fn     func()
}

type sysQueue []*sysEvent

func (q sysQueue) Len() int { return len(q) }
func (q sysQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q sysQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *sysQueue) Push(x any)   { *q = append(*q, x.(*sysEvent)) }
func (q *sysQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Message classes, for partitions that cut only one kind of traffic.
const (
	classRaft = 1 << iota
	classShip
	classAll = classRaft | classShip
)

// sysBlock cuts messages of class from `from` to `to` while it is active.
type sysBlock struct {
	id       int
	from, to int32
	class    int
}

type sysMsgKind int

const (
	msgRaft sysMsgKind = iota
	msgEpochEndReq
	msgEpochEndResp
	msgFetchReq
	msgFetchResp
)

var sysMsgNames = [...]string{"raft", "epoch-end", "epoch-end-answer", "fetch", "fetch-answer"}

// Fetch answer codes per partition (shipping's).
const (
	codeOK = iota
	codeOutOfRange
)

type sysEpochAsk struct {
	part  int
	epoch int32
}

type sysFetchPos struct {
	part int
	off  int64
}

type sysFetchPart struct {
	part                 int
	code                 int
	hw, logStart, logEnd int64
	records              []byte
}

// sysMsg is a message on the simulated network: a Raft message, or one of
// log shipping's requests and answers (epoch-end, fetch). Shipping answers
// carry the id of the request they answer; a follower ignores answers to
// requests it has given up on, as an abandoned HTTP request would be.
type sysMsg struct {
	kind     sysMsgKind
	from, to int32
	raft     *pb.Message
	req      uint64
	epoch    int32
	// err is the KIP-320 refusal of a shipping request (0: none).
	err     replication.FetchError
	asks    []sysEpochAsk
	answers []replication.LeaderEpochAnswer
	pos     []sysFetchPos
	parts   []sysFetchPart
}

// routine reports a message that keeps things as they are (heartbeats,
// fetches that bring nothing): left out of traces, which would otherwise
// hold little else.
func (m *sysMsg) routine() bool {
	switch m.kind {
	case msgRaft:
		t := m.raft.GetType()
		return t == pb.MsgHeartbeat || t == pb.MsgHeartbeatResp
	case msgFetchReq:
		return true
	case msgFetchResp:
		if m.err != 0 {
			return false
		}
		for _, p := range m.parts {
			if p.code != codeOK || len(p.records) > 0 {
				return false
			}
		}
		return true
	}
	return false
}

func (m *sysMsg) class() int {
	if m.kind == msgRaft {
		return classRaft
	}
	return classShip
}

func (m *sysMsg) String() string {
	switch m.kind {
	case msgRaft:
		r := m.raft
		s := fmt.Sprintf("raft %v %d->%d term %d", r.GetType(), m.from, m.to, r.GetTerm())
		if n := len(r.GetEntries()); n > 0 {
			s += fmt.Sprintf(" ents %d..%d", r.GetEntries()[0].GetIndex(), r.GetEntries()[n-1].GetIndex())
		}
		if r.GetReject() {
			s += " reject"
		}
		return s
	case msgEpochEndReq:
		return fmt.Sprintf("epoch-end req %d %d->%d epoch %d asks %v", m.req, m.from, m.to, m.epoch, m.asks)
	case msgEpochEndResp:
		if m.err != 0 {
			return fmt.Sprintf("epoch-end answer %d %d->%d refused %d (epoch %d)", m.req, m.from, m.to, m.err, m.epoch)
		}
		return fmt.Sprintf("epoch-end answer %d %d->%d %+v", m.req, m.from, m.to, m.answers)
	case msgFetchReq:
		return fmt.Sprintf("fetch req %d %d->%d epoch %d pos %v", m.req, m.from, m.to, m.epoch, m.pos)
	case msgFetchResp:
		if m.err != 0 {
			return fmt.Sprintf("fetch answer %d %d->%d refused %d (epoch %d)", m.req, m.from, m.to, m.err, m.epoch)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "fetch answer %d %d->%d", m.req, m.from, m.to)
		for _, p := range m.parts {
			fmt.Fprintf(&b, " [p%d code %d hw %d end %d bytes %d]", p.part, p.code, p.hw, p.logEnd, len(p.records))
		}
		return b.String()
	}
	return "?"
}

// sysWorld is one simulated run.
type sysWorld struct {
	cfg  sysConfig
	seed int64
	rng  *rand.Rand

	now   time.Duration
	seq   uint64
	queue sysQueue
	steps int
	stop  bool // the run is over (failure or done)

	ids  []int32
	reps []*sysReplica // index id-1
	nreq uint64

	// Network behaviour, changed by the fault injector.
	dropRate, dupRate, slowRate float64
	blocks                      []sysBlock
	nblock                      int

	// Chaos phase switches.
	faults, clients bool
	// noCampaign holds replicas whose campaign messages (pre-votes and
	// votes) are lost: scenarios use it to decide who is elected.
	noCampaign map[int32]bool
	// dropIf, when set, loses the messages it matches (scenarios).
	dropIf func(m *sysMsg) bool

	ck sysChecker
	cl sysClients

	failure  string
	failAt   int
	trace    []string // ring of the last cfg.Trace lines
	tracePos int
}

func newSysWorld(seed int64, cfg sysConfig) *sysWorld {
	w := &sysWorld{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0x6d6f6f6e6d71)), noCampaign: map[int32]bool{}}
	if cfg.Partitions <= 0 {
		w.cfg.Partitions = 2
	}
	w.ck.init(w)
	w.cl.init(w)
	for i := 1; i <= cfg.Replicas; i++ {
		w.ids = append(w.ids, int32(i))
	}
	for _, id := range w.ids {
		r := newSysReplica(w, id)
		w.reps = append(w.reps, r)
	}
	for _, r := range w.reps {
		r.start()
	}
	return w
}

func (w *sysWorld) rep(id int32) *sysReplica { return w.reps[id-1] }

// at schedules a world event.
func (w *sysWorld) at(d time.Duration, fn func()) {
	w.push(&sysEvent{at: w.now + d, fn: fn})
}

func (w *sysWorld) push(e *sysEvent) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.queue, e)
}

// between returns a uniformly random duration in [lo, hi].
func (w *sysWorld) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

func (w *sysWorld) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

// step runs the next event; false when nothing is left or the run stopped.
func (w *sysWorld) step() bool {
	for !w.stop && len(w.queue) > 0 {
		e := heap.Pop(&w.queue).(*sysEvent)
		w.now = e.at
		if e.node != 0 {
			r := w.rep(e.node)
			if !r.up || (!e.anyInc && e.inc != r.inc) {
				continue
			}
			if r.paused {
				r.held = append(r.held, e)
				continue
			}
		}
		w.steps++
		e.fn()
		if !w.stop {
			w.ck.afterStep()
		}
		return !w.stop
	}
	return false
}

// runUntil steps until cond holds (checked after every step), the run
// stops, or max virtual time passes; it reports whether cond held.
func (w *sysWorld) runUntil(max time.Duration, cond func() bool) bool {
	end := w.now + max
	for !w.stop {
		if cond() {
			return true
		}
		if len(w.queue) == 0 || w.queue[0].at > end {
			w.now = end
			return cond()
		}
		w.step()
	}
	return false
}

// runFor steps through d of virtual time.
func (w *sysWorld) runFor(d time.Duration) { w.runUntil(d, func() bool { return false }) }

// fail records the first invariant violation and stops the run.
func (w *sysWorld) fail(format string, args ...any) {
	if w.failure != "" {
		return
	}
	w.failure = fmt.Sprintf(format, args...)
	w.failAt = w.steps
	w.tracef("VIOLATION: %s", w.failure)
	w.stop = true
}

func (w *sysWorld) tracing() bool { return w.cfg.Trace > 0 }

// tracef adds a line to the trace ring; callers that build costly
// arguments check tracing() first.
func (w *sysWorld) tracef(format string, args ...any) {
	if w.cfg.Trace <= 0 {
		return
	}
	line := fmt.Sprintf("%5d %9.3fs ", w.steps, w.now.Seconds()) + fmt.Sprintf(format, args...)
	if len(w.trace) < w.cfg.Trace {
		w.trace = append(w.trace, line)
		return
	}
	w.trace[w.tracePos] = line
	w.tracePos = (w.tracePos + 1) % len(w.trace)
}

// traceLines returns the trace ring oldest first.
func (w *sysWorld) traceLines() []string {
	return append(slices.Clone(w.trace[w.tracePos:]), w.trace[:w.tracePos]...)
}

// blocked reports whether messages of class from -> to are cut.
func (w *sysWorld) blocked(from, to int32, class int) bool {
	for _, b := range w.blocks {
		if b.from == from && b.to == to && b.class&class != 0 {
			return true
		}
	}
	return false
}

// block cuts class from -> to (and back if both) until unblock(id).
func (w *sysWorld) block(from, to int32, class int, both bool) int {
	w.nblock++
	w.blocks = append(w.blocks, sysBlock{id: w.nblock, from: from, to: to, class: class})
	if both {
		w.blocks = append(w.blocks, sysBlock{id: w.nblock, from: to, to: from, class: class})
	}
	return w.nblock
}

func (w *sysWorld) unblock(id int) {
	w.blocks = slices.DeleteFunc(w.blocks, func(b sysBlock) bool { return b.id == id })
}

// isolate cuts id off from every other replica, both ways, for class.
func (w *sysWorld) isolate(id int32, class int) int {
	w.nblock++
	for _, o := range w.ids {
		if o != id {
			w.blocks = append(w.blocks, sysBlock{id: w.nblock, from: id, to: o, class: class},
				sysBlock{id: w.nblock, from: o, to: id, class: class})
		}
	}
	return w.nblock
}

// send puts m on the network: it may be dropped, duplicated or delayed
// (which reorders it), and is lost if its link is cut when it is sent or
// when it arrives.
func (w *sysWorld) send(m *sysMsg) {
	if m.kind == msgRaft && w.noCampaign[m.from] {
		if t := m.raft.GetType(); t == pb.MsgPreVote || t == pb.MsgVote {
			return
		}
	}
	if w.blocked(m.from, m.to, m.class()) || w.chance(w.dropRate) || (w.dropIf != nil && w.dropIf(m)) {
		if w.tracing() && !m.routine() {
			w.tracef("  lost %v", m)
		}
		return
	}
	n := 1
	if w.chance(w.dupRate) {
		n = 2
	}
	for range n {
		d := w.between(500*time.Microsecond, 4*time.Millisecond)
		if w.chance(w.slowRate) {
			d = w.between(20*time.Millisecond, 600*time.Millisecond)
		}
		w.push(&sysEvent{at: w.now + d, node: m.to, anyInc: true, fn: func() { w.deliver(m) }})
	}
}

func (w *sysWorld) deliver(m *sysMsg) {
	if w.blocked(m.from, m.to, m.class()) {
		if w.tracing() && !m.routine() {
			w.tracef("  cut %v", m)
		}
		return
	}
	r := w.rep(m.to)
	if w.tracing() && !m.routine() {
		w.tracef("r%d recv %v", m.to, m)
	}
	switch m.kind {
	case msgRaft:
		r.stepRaft(m.raft)
	case msgEpochEndReq:
		r.serveEpochEnd(m)
	case msgFetchReq:
		r.serveFetch(m)
	case msgEpochEndResp, msgFetchResp:
		r.onAnswer(m)
	}
}

// Fault injection. Every fault undoes itself after a while; the final
// phase undoes whatever is left.

func (w *sysWorld) scheduleFault() {
	w.at(w.between(200*time.Millisecond, 1200*time.Millisecond), func() {
		if !w.faults {
			return
		}
		w.injectFault()
		w.scheduleFault()
	})
}

// upIDs lists the replicas that are up, in id order.
func (w *sysWorld) upIDs() []int32 {
	var out []int32
	for _, r := range w.reps {
		if r.up {
			out = append(out, r.id)
		}
	}
	return out
}

func (w *sysWorld) pick(ids []int32) int32 { return ids[w.rng.IntN(len(ids))] }

// leaderID is a replica that leads at the broker level (the newest epoch
// if several believe they do), or 0.
func (w *sysWorld) leaderID() int32 {
	var best *sysReplica
	for _, r := range w.reps {
		if r.up && r.ldr != nil && (best == nil || r.ldr.Epoch() > best.ldr.Epoch()) {
			best = r
		}
	}
	if best == nil {
		return 0
	}
	return best.id
}

func (w *sysWorld) injectFault() {
	up := w.upIDs()
	victim := func() int32 {
		// The leader half of the time: that is where failover happens.
		if l := w.leaderID(); l != 0 && w.chance(0.5) {
			return l
		}
		return w.pick(up)
	}
	switch k := w.rng.IntN(100); {
	case k < 30 && len(up) > 0:
		id := victim()
		kind := sysCrashKind(w.rng.IntN(4))
		w.crash(id, kind)
		w.at(w.between(100*time.Millisecond, 3*time.Second), func() { w.restart(id) })
	case k < 45 && len(up) > 0:
		id := victim()
		b := w.isolate(id, classAll)
		w.tracef("fault: isolate r%d (block %d)", id, b)
		w.at(w.between(200*time.Millisecond, 3*time.Second), func() { w.tracef("heal block %d", b); w.unblock(b) })
	case k < 55:
		// One-way cuts: the symptom of asymmetric partitions.
		from, to := w.pick(w.ids), w.pick(w.ids)
		if from == to {
			return
		}
		class := []int{classAll, classRaft, classShip}[w.rng.IntN(3)]
		b := w.block(from, to, class, false)
		w.tracef("fault: cut r%d->r%d class %d (block %d)", from, to, class, b)
		w.at(w.between(200*time.Millisecond, 3*time.Second), func() { w.tracef("heal block %d", b); w.unblock(b) })
	case k < 65 && len(up) > 0:
		// Shipping only: Raft sees a healthy follower that does not copy,
		// which is what shrinks the ISR.
		id := victim()
		b := w.isolate(id, classShip)
		w.tracef("fault: cut shipping of r%d (block %d)", id, b)
		w.at(w.between(500*time.Millisecond, 4*time.Second), func() { w.tracef("heal block %d", b); w.unblock(b) })
	case k < 75 && len(up) > 0:
		id := victim()
		r := w.rep(id)
		if r.paused {
			return
		}
		w.pause(id)
		w.at(w.between(100*time.Millisecond, 2500*time.Millisecond), func() { w.resume(id) })
	case k < 80 && len(up) > 0:
		id := victim()
		r := w.rep(id)
		r.diskDelay = w.between(20*time.Millisecond, 300*time.Millisecond)
		w.tracef("fault: slow disk on r%d (%v per fsync)", id, r.diskDelay)
		w.at(w.between(500*time.Millisecond, 4*time.Second), func() { r.diskDelay = 0 })
	case k < 90:
		w.dropRate = []float64{0, 0, 0.02, 0.1, 0.3}[w.rng.IntN(5)]
		w.dupRate = []float64{0, 0.02, 0.1}[w.rng.IntN(3)]
		w.slowRate = []float64{0, 0.01, 0.05, 0.2}[w.rng.IntN(4)]
		w.tracef("fault: network drop %.2f dup %.2f slow %.2f", w.dropRate, w.dupRate, w.slowRate)
	case k < 93:
		// Everybody at once, with power loss: what only fsync survives.
		w.tracef("fault: power loss of every replica")
		for _, id := range up {
			w.crash(id, crashPower)
		}
		for _, id := range up {
			w.at(w.between(50*time.Millisecond, 1500*time.Millisecond), func() { w.restart(id) })
		}
	default:
		// Leader isolated from its followers but not from its clients,
		// which the simulated clients are never cut from.
		if l := w.leaderID(); l != 0 {
			b := w.isolate(l, classAll)
			w.tracef("fault: isolate leader r%d (block %d)", l, b)
			w.at(w.between(500*time.Millisecond, 3*time.Second), func() { w.tracef("heal block %d", b); w.unblock(b) })
		}
	}
}

type sysCrashKind int

const (
	// crashKill: the process dies; the page cache keeps unsynced bytes.
	crashKill sysCrashKind = iota
	// crashPower: power loss; only fsynced bytes survive.
	crashPower
	// crashTorn: power loss mid-write; a random prefix of each file's
	// unsynced appends survives.
	crashTorn
	// crashClean: a clean stop (logs synced, clean-shutdown marker
	// written); the restart is not unclean.
	crashClean
)

var sysCrashNames = [...]string{"kill", "power-loss", "torn-power-loss", "clean-stop"}

func (w *sysWorld) crash(id int32, kind sysCrashKind) {
	r := w.rep(id)
	if !r.up {
		return
	}
	w.tracef("fault: crash r%d (%s)", id, sysCrashNames[kind])
	r.crash(kind)
}

func (w *sysWorld) restart(id int32) {
	r := w.rep(id)
	if r.up {
		return
	}
	w.tracef("restart r%d", id)
	r.start()
}

// pause stops a replica as SIGSTOP would: nothing it would do runs and
// messages to it wait, until resume.
func (w *sysWorld) pause(id int32) {
	r := w.rep(id)
	if !r.up || r.paused {
		return
	}
	w.tracef("fault: pause r%d", id)
	r.paused = true
}

func (w *sysWorld) resume(id int32) {
	r := w.rep(id)
	if !r.paused {
		return
	}
	w.tracef("resume r%d (%d held events)", id, len(r.held))
	r.paused = false
	held := r.held
	r.held = nil
	for _, e := range held {
		e.at = w.now
		w.push(e)
	}
}

// heal ends every fault: links, network chaos, pauses and crashes.
func (w *sysWorld) heal() {
	w.tracef("heal everything")
	w.blocks = nil
	clear(w.noCampaign)
	w.dropIf = nil
	w.dropRate, w.dupRate, w.slowRate = 0, 0, 0
	for _, r := range w.reps {
		r.noTick = false
		r.diskDelay = 0
		r.driveHold = 0
		if r.paused {
			w.resume(r.id)
		}
		if !r.up {
			w.restart(r.id)
		}
	}
}
