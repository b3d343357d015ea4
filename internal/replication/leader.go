package replication

import (
	"slices"
	"time"
)

// DefaultIsrLag is how long a follower may stay away from the leader's log
// end before it is proposed out of the ISR (Replication.IsrLagSeconds).
const DefaultIsrLag = 10 * time.Second

// DefaultMinISR is the default minimum ISR size below which the high
// watermark stops advancing (KIP-966). See WithMinISR for 3- and 5-replica
// groups.
const DefaultMinISR = 1

// ISRChange is a change of the in-sync set to propose to the group's Raft
// log. ISR is the complete new set, sorted; Replica is the one follower it
// adds (Expand) or removes. Epoch is the leader epoch that proposed it: the
// Raft-log applier accepts it only while that epoch is still the latest
// leadership claim (AcceptISRChange).
type ISRChange struct {
	// Epoch is the proposing leader's epoch.
	Epoch int32
	// ISR is the proposed in-sync set, sorted ascending.
	ISR []int32
	// Replica is the follower added or removed.
	Replica int32
	// Expand is true when Replica is added, false when it is removed.
	Expand bool
}

// Equal reports whether c and o are the same change.
func (c ISRChange) Equal(o ISRChange) bool {
	return c.Epoch == o.Epoch && c.Replica == o.Replica && c.Expand == o.Expand && slices.Equal(c.ISR, o.ISR)
}

// AcceptISRChange is the rule the applier of the group's Raft log uses for
// an ISR-change entry: it takes effect only if it was proposed in the epoch
// of the latest leadership claim applied before it. An entry proposed by an
// older leader that commits later is ignored, so a deposed leader's view
// can never overwrite the ISR the current leader works from.
func AcceptISRChange(latestClaimEpoch int32, c ISRChange) bool {
	return c.Epoch == latestClaimEpoch
}

type leaderConfig struct {
	isrLag      time.Duration
	minISR      int
	static      bool
	lagMax      int64
	silentGrace time.Duration
}

// Option configures a Leader.
type Option func(*leaderConfig)

// WithIsrLag sets how long a follower may stay away from the leader's log
// end before it is proposed out of the ISR. Values <= 0 mean DefaultIsrLag.
func WithIsrLag(d time.Duration) Option {
	return func(c *leaderConfig) {
		if d > 0 {
			c.isrLag = d
		}
	}
}

// WithMinISR sets the minimum ISR size (min.insync.replicas) below which
// the high watermark does not advance (KIP-966): acknowledged records are
// then always on at least n replicas. Values < 1 mean DefaultMinISR.
//
// With 3 replicas the default of 1 lets the ISR shrink to the leader alone
// and keep acknowledging: a record acknowledged then lives on one disk and
// is lost if that disk is (the "last replica standing"). MinISR 2 keeps
// every acknowledged record on two replicas, so the loss of any one replica
// (a minority) never loses it, at the price of acks=all stalling while two
// replicas are out. For 5 replicas use 3. MinISR never exceeds the replica
// count in practice; if it does, the high watermark never advances.
func WithMinISR(n int) Option {
	return func(c *leaderConfig) {
		if n >= 1 {
			c.minISR = n
		}
	}
}

// WithSilentRemoval lets a new leader propose out of the ISR, without
// waiting for the ISR lag, a follower that has shown no sign of life in its
// epoch: it has not fetched, and the group's consensus layer has not
// reported hearing from it (Heard), for grace since the epoch's clock
// started. That is what a leader that has just taken over from a dead one
// sees of the dead one: waiting the ISR lag for it would stall every
// acks=all produce for that long (the set acks=all waits for still holds
// it). Values <= 0 disable the rule (the default).
//
// Removal is always safe for acknowledged records: a shrink only makes the
// set that counts smaller once it has committed, and every remaining member
// holds everything below the high watermark. What it costs is eligibility
// (only ISR members may lead), so the rule never takes the ISR below the
// group's minimum (WithMinISR): below it the high watermark stops anyway,
// and a member removed then would be a replica that holds every
// acknowledged record yet may no longer lead. The ordinary ISR-lag rule
// still applies to such a member.
func WithSilentRemoval(grace time.Duration) Option {
	return func(c *leaderConfig) {
		if grace > 0 {
			c.silentGrace = grace
		}
	}
}

// WithStatic selects static mode (Replication.Failover off): there is no
// ISR and no proposal; a follower counts towards a partition's high
// watermark only while its position is within lagMax records of the
// leader's log end (Replication.LagMax, default 0). With lagMax 0 only a
// follower exactly at the log end counts, so the high watermark is in
// practice the leader's durable end, which is static mode's behaviour
// before LagMax existed. MinISR does not apply in static mode.
func WithStatic(lagMax int64) Option {
	return func(c *leaderConfig) {
		c.static = true
		if lagMax > 0 {
			c.lagMax = lagMax
		}
	}
}

// Leader is the leader side of one replication group, covering all of its
// partitions. It is a pure state machine: the owner feeds it the committed
// ISR and epoch (Configure, ISRCommitted), the leader's own log ends
// (AppendLocal), follower fetches (FollowerFetch) and the passage of time
// (Tick), and reads back high watermarks, the acks=all set and ISR changes
// to propose.
//
// Pending changes: at most one ISR change is pending (proposed, not yet
// committed) at a time. While it is pending no other change is proposed.
// The acks=all set is the committed ISR plus the pending change's set (a
// pending expand counts at once, a pending shrink's member keeps counting
// until the shrink commits, KIP-497: until then it is still in the ISR an
// election reads, so it may still lead and must hold every acknowledged
// record).
//
// High watermark: for each partition it is the lowest durable position
// over the acks=all set (the leader's durable end for itself), never
// decreases within an epoch, and does not advance while the ISR is, or is
// about to be, smaller than the partition's minimum ISR (SetMinISR, else
// WithMinISR; a pending shrink counts as done, a pending expand as not yet
// done).
type Leader struct {
	cfg leaderConfig

	configured bool
	replicas   []int32
	self       int32
	epoch      int32
	isr        []int32
	pending    *ISRChange
	handedOut  bool

	parts     map[TopicPartition]*partState
	followers map[int32]*followerState
	// ackSet is AckSet's answer, kept because every fetch reads it: it
	// changes only with the ISR and the pending change (setISR).
	ackSet []int32
	// minISR holds per-partition overrides of cfg.minISR (the topic's
	// min.insync.replicas). It is configuration, not epoch state: it
	// survives Configure.
	minISR map[TopicPartition]int

	haveNow    bool
	now        time.Time
	epochStart time.Time
}

type partState struct {
	logEnd     int64
	durableEnd int64
	hw         int64
	// epochStart is the leader's log end when the partition was first
	// reported in this epoch. Every record committed before the epoch is
	// below it, while the high watermark may still be lower (it starts
	// from what this replica knew, the log start after a restart), so a
	// follower is not in sync before it has reached it (KAFKA-7128).
	epochStart int64
	appeared   time.Time
	hasAppear  bool
	// pos holds each follower's position on this partition, one entry
	// per follower from the moment the partition is reported.
	pos map[int32]*replicaPos
}

type followerState struct {
	seen  bool // fetched in this epoch
	heard bool // reported alive by the consensus layer in this epoch
	lost  bool // in the ISR, fetched below the high watermark it had reached
	// caughtUp orders this follower's positions by when it was last
	// caught up on them, so the lag check reads the oldest one instead of
	// walking every partition on every fetch.
	caughtUp caughtUpHeap
}

type replicaPos struct {
	offset             int64
	caughtUp           time.Time
	hasCaughtUp        bool
	lastFetch          time.Time
	lastFetchLeaderEnd int64
	// since is the latest of the partition's appearance and caughtUp (the
	// zero time if neither is known): the follower has been in sync on
	// this partition since max(epoch start, since). It is the heap key.
	since   time.Time
	heapIdx int
}

// NewLeader returns an unconfigured Leader. Call Configure before anything
// else; until then every input is ignored.
func NewLeader(opts ...Option) *Leader {
	cfg := leaderConfig{isrLag: DefaultIsrLag, minISR: DefaultMinISR}
	for _, o := range opts {
		o(&cfg)
	}
	return &Leader{cfg: cfg}
}

// Configure starts (or restarts) leadership for epoch: replicas is the
// whole group, self this replica, isr the ISR committed in the Raft log
// when this leader's claim committed. It forgets all per-epoch state:
// follower positions, the pending change, partitions and high watermarks.
// The caller then reports every partition with AppendLocal and may restore
// each high watermark it already knew with SeedHighWatermark. Configure
// returns false, and changes nothing, if epoch is not newer than the
// current one.
func (l *Leader) Configure(replicas []int32, self int32, isr []int32, epoch int32) bool {
	if l.configured && epoch <= l.epoch {
		return false
	}
	l.configured = true
	l.replicas = sortedSet(replicas)
	l.self = self
	l.epoch = epoch
	l.setISR(isr, nil)
	l.handedOut = false
	l.parts = map[TopicPartition]*partState{}
	l.followers = map[int32]*followerState{}
	for _, r := range l.replicas {
		if r != self {
			l.followers[r] = &followerState{}
		}
	}
	// The epoch's clock starts at the next input that carries a time.
	l.haveNow = false
	return true
}

// Epoch returns the configured leader epoch.
func (l *Leader) Epoch() int32 { return l.epoch }

// ISR returns the committed ISR, sorted.
func (l *Leader) ISR() []int32 { return slices.Clone(l.isr) }

// Pending returns the pending ISR change, if there is one.
func (l *Leader) Pending() (ISRChange, bool) {
	if l.pending == nil {
		return ISRChange{}, false
	}
	c := *l.pending
	c.ISR = slices.Clone(c.ISR)
	return c, true
}

// SeedHighWatermark raises tp's high watermark to hw, the value this
// replica learned while it was a follower (every offset below it was on
// every committed ISR member then, and still is). It is clamped to the
// leader's durable end, so call it after AppendLocal. It never lowers the
// high watermark.
func (l *Leader) SeedHighWatermark(tp TopicPartition, hw int64) {
	p := l.parts[tp]
	if p == nil {
		return
	}
	hw = min(hw, p.durableEnd)
	if hw > p.hw {
		p.hw = hw
	}
}

// AppendLocal reports the leader's own log end and durable (fsynced) end
// for tp. The first report of a partition creates it. Ends never move
// backwards within an epoch; a smaller value is ignored.
func (l *Leader) AppendLocal(tp TopicPartition, logEnd, durableEnd int64) {
	if !l.configured {
		return
	}
	p := l.parts[tp]
	if p == nil {
		p = &partState{epochStart: logEnd, pos: make(map[int32]*replicaPos, len(l.followers))}
		if l.haveNow {
			p.appeared, p.hasAppear = l.now, true
		}
		for r, f := range l.followers {
			rp := &replicaPos{offset: -1, since: p.appeared}
			p.pos[r] = rp
			f.caughtUp.push(rp)
		}
		l.parts[tp] = p
	}
	durableEnd = min(durableEnd, logEnd)
	p.logEnd = max(p.logEnd, logEnd)
	p.durableEnd = max(p.durableEnd, durableEnd)
	l.recompute(tp, p)
}

// FollowerFetch records that replica fetched tp at fetchOffset, its durable
// log end, at now. Within an epoch a follower's position only moves
// forward (its truncation happens before its first fetch of the epoch;
// its fetches are sequential), unless it lost records it had reported
// durable: a fetch below the previous one is therefore taken as its true
// position, and an ISR member whose position falls below the high
// watermark is proposed out of the ISR at once (it no longer holds every
// committed record; it returns by the expand rule once it has caught up,
// which is the KIP-966 rule for a replica that restarted uncleanly). It
// returns false if the fetch was ignored: unknown replica, the leader
// itself, or a partition the leader has not reported with AppendLocal.
func (l *Leader) FollowerFetch(replica int32, tp TopicPartition, fetchOffset int64, now time.Time) bool {
	if !l.configured {
		return false
	}
	f := l.followers[replica]
	p := l.parts[tp]
	if f == nil || p == nil {
		return false
	}
	l.observe(now)
	now = l.now
	f.seen = true
	rp := p.pos[replica]
	// Caught-up time (as Kafka does it): at the log end now, or at least
	// at the log end the previous fetch saw, which was at that fetch's time.
	if fetchOffset >= p.logEnd {
		rp.caughtUp, rp.hasCaughtUp = now, true
	} else if rp.offset >= 0 && fetchOffset >= rp.lastFetchLeaderEnd && (!rp.hasCaughtUp || rp.lastFetch.After(rp.caughtUp)) {
		rp.caughtUp, rp.hasCaughtUp = rp.lastFetch, true
	}
	rp.lastFetch = now
	rp.lastFetchLeaderEnd = p.logEnd
	// A position past the leader's log end says nothing about offsets the
	// leader has not written yet.
	at := min(fetchOffset, p.logEnd)
	if at < rp.offset {
		// Went backwards: the follower lost records it had reported
		// durable (an unclean restart on a disk that did not keep what
		// it synced, or a replaced disk). Its old position would count
		// records it no longer holds.
		rp.offset = at
		rp.hasCaughtUp = false
		if at < p.hw && slices.Contains(l.isr, replica) {
			// It lacks committed records: it must leave the ISR (and
			// with it eligibility and the min.insync.replicas count)
			// until it has caught up again.
			f.lost = true
		}
	}
	rp.offset = max(rp.offset, at)
	f.caughtUp.update(rp, p)
	l.recompute(tp, p)
	l.maybePropose()
	return true
}

// Heard tells the leader that the group's consensus layer (Raft) has
// received a message from replica during this leader's epoch, so the
// replica is alive even if it has not fetched yet: WithSilentRemoval does
// not remove it. Unknown replicas and the leader itself are ignored.
func (l *Leader) Heard(replica int32) {
	if f := l.followers[replica]; f != nil {
		f.heard = true
	}
}

// ISRCommitted applies an ISR change committed in the Raft log. A change
// stamped with another epoch is ignored (AcceptISRChange). It clears the
// pending change and returns true when applied.
func (l *Leader) ISRCommitted(isr []int32, epoch int32) bool {
	if !l.configured || epoch != l.epoch || l.cfg.static {
		return false
	}
	l.setISR(isr, nil)
	l.handedOut = false
	for r, f := range l.followers {
		if !slices.Contains(l.isr, r) {
			f.lost = false // out: it comes back by the expand rule
		}
	}
	l.recomputeAll()
	l.maybePropose()
	return true
}

// ProposalFailed tells the leader that change will certainly never commit
// (Raft dropped the proposal). Only call it when that is certain: a change
// reported failed that commits anyway can put a replica into the ISR
// without the acks=all set having waited for it. The change stops being
// pending and may be proposed again later.
func (l *Leader) ProposalFailed(c ISRChange) {
	if l.pending == nil || !l.pending.Equal(c) {
		return
	}
	l.setISR(l.isr, nil)
	l.handedOut = false
	l.recomputeAll()
	l.maybePropose()
}

// Tick advances the leader's clock to now (time never runs backwards: an
// earlier now is treated as the latest seen) and proposes a shrink for a
// follower that has lagged for longer than the ISR lag.
func (l *Leader) Tick(now time.Time) {
	if !l.configured {
		return
	}
	l.observe(now)
	l.maybePropose()
}

// Proposals returns the ISR changes to propose to Raft that have not been
// returned before: the pending change, once. Each is stamped with the
// leader's epoch. The caller proposes it and later reports ISRCommitted or
// ProposalFailed.
func (l *Leader) Proposals() []ISRChange {
	if l.pending == nil || l.handedOut {
		return nil
	}
	l.handedOut = true
	c, _ := l.Pending()
	return []ISRChange{c}
}

// HighWatermark returns tp's high watermark, 0 for an unknown partition.
func (l *Leader) HighWatermark(tp TopicPartition) int64 {
	if p := l.parts[tp]; p != nil {
		return p.hw
	}
	return 0
}

// AckSet returns, sorted, the replicas acks=all waits for: the committed
// ISR, the members of a pending change's set and the leader itself. In
// static mode it is the leader alone (the static high watermark decides).
func (l *Leader) AckSet() []int32 {
	if !l.configured {
		return nil
	}
	return slices.Clone(l.ackSet)
}

// setISR sets the committed ISR and the pending change, and with them the
// acks=all set.
func (l *Leader) setISR(isr []int32, pending *ISRChange) {
	l.isr = sortedSet(isr)
	l.pending = pending
	if l.cfg.static {
		l.ackSet = []int32{l.self}
		return
	}
	s := append(slices.Clone(l.isr), l.self)
	if pending != nil {
		s = append(s, pending.ISR...)
	}
	l.ackSet = sortedSet(s)
}

// UnderMinISR reports whether the ISR is, or is about to be, smaller than
// MinISR, in which case the high watermark does not advance and acks=all
// produce should be refused (NOT_ENOUGH_REPLICAS). Always false in static
// mode. It judges the group default; a partition with its own minimum
// (SetMinISR) is judged by PartitionUnderMinISR.
func (l *Leader) UnderMinISR() bool {
	return !l.cfg.static && l.settledISRSize() < l.cfg.minISR
}

// RemovePartition forgets a deleted partition: its positions no longer
// count, and followers that stopped fetching it do not lag because of it
// (otherwise every follower would leave the ISR after a topic deletion and
// never come back, as the partition never catches up again).
func (l *Leader) RemovePartition(tp TopicPartition) {
	if p := l.parts[tp]; p != nil {
		for r, f := range l.followers {
			f.caughtUp.remove(p.pos[r])
		}
	}
	delete(l.parts, tp)
	delete(l.minISR, tp)
	l.maybePropose()
}

// SetMinISR sets tp's minimum ISR size (its topic's min.insync.replicas),
// overriding the group default of WithMinISR; n < 1 restores the default.
// The setting outlives Configure, so it may be given before tp is reported
// and before the Leader is configured; set it before the first AppendLocal
// of tp so that no high watermark is computed under a smaller minimum.
//
// The ISR is one set for the whole group, so a partition's in-sync count
// is the size of that set: a topic asking for more replicas than the
// group's ISR holds (or than the group has) gets no high watermark progress
// until the ISR grows, while other topics keep going.
func (l *Leader) SetMinISR(tp TopicPartition, n int) {
	if n < 1 {
		delete(l.minISR, tp)
	} else {
		if l.minISR == nil {
			l.minISR = map[TopicPartition]int{}
		}
		if l.minISR[tp] == n {
			return
		}
		l.minISR[tp] = n
	}
	if p := l.parts[tp]; p != nil {
		l.recompute(tp, p)
	}
}

// MinISR returns tp's minimum ISR size: its SetMinISR value or the group
// default.
func (l *Leader) MinISR(tp TopicPartition) int {
	if n, ok := l.minISR[tp]; ok {
		return n
	}
	return l.cfg.minISR
}

// PartitionUnderMinISR reports whether the ISR is, or is about to be,
// smaller than tp's minimum (MinISR(tp)): tp's high watermark then does not
// advance and an acks=all produce to tp is refused with NOT_ENOUGH_REPLICAS.
// A pending shrink counts as done and a pending expand as not yet done, so
// the answer never overstates the replicas that hold what is acknowledged.
// Always false in static mode.
func (l *Leader) PartitionUnderMinISR(tp TopicPartition) bool {
	return !l.cfg.static && l.settledISRSize() < l.MinISR(tp)
}

// InSyncCount is the number of replicas that are in the committed ISR and
// stay in it whatever happens to the pending change: the count
// min.insync.replicas is compared with.
func (l *Leader) InSyncCount() int { return l.settledISRSize() }

// settledISRSize counts the replicas that are in the ISR and will stay in
// it whatever happens to the pending change.
func (l *Leader) settledISRSize() int {
	if l.pending == nil {
		return len(l.isr)
	}
	n := 0
	for _, r := range l.isr {
		if slices.Contains(l.pending.ISR, r) {
			n++
		}
	}
	return n
}

func (l *Leader) observe(now time.Time) {
	if !l.haveNow {
		l.haveNow = true
		l.now = now
		l.epochStart = now
		return
	}
	if now.After(l.now) {
		l.now = now
	}
}

func (l *Leader) recomputeAll() {
	for tp, p := range l.parts {
		l.recompute(tp, p)
	}
}

// recompute raises tp's high watermark to the lowest durable position over
// the set that counts, if that is higher.
func (l *Leader) recompute(tp TopicPartition, p *partState) {
	cand := p.durableEnd
	if l.cfg.static {
		for _, rp := range p.pos {
			if rp.offset >= 0 && p.logEnd-rp.offset <= l.cfg.lagMax {
				cand = min(cand, rp.offset)
			}
		}
	} else {
		if l.PartitionUnderMinISR(tp) {
			return
		}
		for _, r := range l.ackSet {
			if r == l.self {
				continue
			}
			rp := p.pos[r]
			if rp == nil || rp.offset < 0 {
				// Not fetched yet, or an ISR member outside the configured
				// replicas, which can never report a position: hold the
				// high watermark.
				return
			}
			cand = min(cand, rp.offset)
		}
	}
	if cand > p.hw {
		p.hw = cand
	}
}

// caughtUpAt is when follower f was last at the leader's log end on every
// partition: the earliest over partitions of the latest of the epoch's
// start, the partition's appearance and the follower's last catch-up on it.
func (l *Leader) caughtUpAt(f *followerState) time.Time {
	oldest, ok := f.caughtUp.oldest()
	if !ok {
		return l.epochStart
	}
	t := l.epochStart
	if oldest.After(t) {
		t = oldest
	}
	if t.After(l.now) {
		t = l.now
	}
	return t
}

func (l *Leader) lagging(f *followerState) bool {
	return l.now.Sub(l.caughtUpAt(f)) > l.cfg.isrLag
}

// inSyncForExpand reports whether a follower outside the ISR may be
// proposed in: it has fetched this epoch, reached the high watermark and
// the leader's log end at the start of the epoch on every partition, and
// is not lagging (so it is not shrunk at once).
func (l *Leader) inSyncForExpand(r int32, f *followerState) bool {
	if !f.seen || l.lagging(f) {
		return false
	}
	for _, p := range l.parts {
		if rp := p.pos[r]; rp == nil || rp.offset < max(p.hw, p.epochStart) {
			return false
		}
	}
	return true
}

// silent reports whether f may be removed by the WithSilentRemoval rule.
func (l *Leader) silent(f *followerState) bool {
	return l.cfg.silentGrace > 0 && !f.seen && !f.heard && l.now.Sub(l.epochStart) >= l.cfg.silentGrace &&
		len(l.isr)-1 >= l.cfg.minISR
}

// maybePropose makes at most one change pending: a shrink of the
// lowest-numbered silent (WithSilentRemoval) or lagging ISR follower
// first, else an expand of the lowest-numbered caught-up follower outside
// the ISR.
func (l *Leader) maybePropose() {
	if l.cfg.static || l.pending != nil || !l.haveNow {
		return
	}
	for _, r := range l.isr {
		if f := l.followers[r]; f != nil && (f.lost || l.silent(f)) {
			l.setPending(r, false)
			return
		}
	}
	for _, r := range l.isr {
		if f := l.followers[r]; f != nil && l.lagging(f) {
			l.setPending(r, false)
			return
		}
	}
	for _, r := range l.replicas {
		if r == l.self || slices.Contains(l.isr, r) {
			continue
		}
		if f := l.followers[r]; f != nil && l.inSyncForExpand(r, f) {
			l.setPending(r, true)
			return
		}
	}
}

func (l *Leader) setPending(r int32, expand bool) {
	var isr []int32
	if expand {
		isr = sortedSet(append(slices.Clone(l.isr), r))
	} else {
		for _, m := range l.isr {
			if m != r {
				isr = append(isr, m)
			}
		}
	}
	l.setISR(l.isr, &ISRChange{Epoch: l.epoch, ISR: isr, Replica: r, Expand: expand})
	l.handedOut = false
	l.recomputeAll()
}

// sortedSet returns a sorted copy of s without duplicates.
func sortedSet(s []int32) []int32 {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
