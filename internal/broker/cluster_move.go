package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/cluster/metanode"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication/raftgroup"
)

// Moving a partition between groups (docs/CLUSTER.md, "Moving a
// partition"). Each step is a record of the metadata log, except the
// fence, which is an entry of the source group's own Raft log:
//
//  1. A move starts (AlterPartitionReassignments): the partition's state
//     is copying, from its owner S to a target T. S goes on serving it.
//  2. T's leader copies it: it reads S's leader's committed records over
//     PathMoveRead and appends them as they are (offsets, epochs,
//     producer ids), so its producer and transaction state are rebuilt
//     as a follower's would be. T's followers take the copy from T's
//     leader as they take any partition.
//  3. Caught up, T's leader asks S's leader to fence the partition
//     (PathMoveFence). S's leader refuses new transactions on it and
//     waits a while for the open ones to end (T asks again if they do
//     not, and the refusal lasts across its asks), commits the fence in
//     its group's Raft log (every replica of S that applies it, and so
//     every later leader of S, refuses appends),
//     waits until its high watermark reaches its log end, and answers
//     that end and the epoch it exposed.
//  4. T's leader copies up to that end, waits until T's own high
//     watermark passes it (T's in-sync replicas hold it), and proposes the
//     cut-over with it: T owns the partition from then on, at an epoch
//     base that puts its leader epoch above S's. Then it proposes the
//     finish.
//  5. S's leader drops its copy once the metadata says another group owns
//     the partition, and lifts the fence when S owns it again (a
//     cancelled move, or a later move back).
//
// Every step is retried from the committed state: a kill of either group
// resumes where the metadata log and the groups' Raft logs say it was.

// Paths of the move calls between groups' leaders.
const (
	PathMoveRead  = "/cluster/move/read"
	PathMoveFence = "/cluster/move/fence"
)

// moveReadBytes bounds one read of a copy.
const moveReadBytes = 1 << 20

// moveRetry is how long a copier waits after a failed step.
const moveRetry = 200 * time.Millisecond

// moveDrainWait bounds how long a fence waits for the partition's open
// transactions to end (new ones are refused meanwhile); the target asks
// again after that.
const moveDrainWait = 5 * time.Second

// moveDrainHold is how long after the target's last ask to fence the
// source still refuses new transactions on the partition (placement's
// drainUntil): long enough to span the gap to the next ask.
const moveDrainHold = 3 * moveDrainWait

type moveReadRequest struct {
	TopicID   meta.UUID `json:"topicId"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
}

type moveReadAnswer struct {
	Code          int16  `json:"code"`
	Batches       []byte `json:"batches,omitempty"`
	HighWatermark int64  `json:"highWatermark"`
	LogStart      int64  `json:"logStart"`
}

type moveFenceRequest struct {
	TopicID   meta.UUID `json:"topicId"`
	Partition int32     `json:"partition"`
	Target    string    `json:"target"`
	MoveSeq   int64     `json:"moveSeq"`
}

type moveFenceAnswer struct {
	Code    int16  `json:"code"`
	Message string `json:"message,omitempty"`
	MoveSeq int64  `json:"moveSeq"`
	Epoch   int32  `json:"epoch"`
	Offset  int64  `json:"offset"`
}

// moveKey names a partition in the group's Raft fences.
func moveKey(id [16]byte, index int32) string {
	return meta.UUID(id).String() + "/" + strconv.Itoa(int(index))
}

func parseMoveKey(key string) (meta.UUID, int32, bool) {
	idStr, idxStr, ok := strings.Cut(key, "/")
	if !ok {
		return meta.UUID{}, 0, false
	}
	id, err := meta.ParseUUID(idStr)
	if err != nil {
		return meta.UUID{}, 0, false
	}
	idx, err := strconv.Atoi(idxStr)
	if err != nil {
		return meta.UUID{}, 0, false
	}
	return id, int32(idx), true
}

// movers runs the copiers of the moves into this group, on its leader.
type movers struct {
	mu      sync.Mutex
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// groupFences are the group's Raft fences and floors
// (raftgroup.GroupState), as this replica last applied them.
type groupFences struct {
	fences, floors map[string]uint64
}

// setFences records the group's Raft fences (each marked with the
// number of the move it was taken for) and floors, as this replica
// applied them, and brings every partition's placement up to date.
func (c *clusterMode) setFences(fences, floors map[string]uint64) {
	c.placeMu.Lock()
	defer c.placeMu.Unlock()
	c.fences.Store(&groupFences{fences: fences, floors: floors})
	c.applyPlacementsLocked(c.current())
}

// fenceMark is the mark of a partition's fence as this replica applied
// it, if it is fenced.
func (c *clusterMode) fenceMark(key string) (uint64, bool) {
	f := c.fences.Load()
	if f == nil {
		return 0, false
	}
	m, ok := f.fences[key]
	return m, ok
}

// floor is a partition's floor as this replica applied it (0: none).
func (c *clusterMode) floor(key string) uint64 {
	if f := c.fences.Load(); f != nil {
		return f.floors[key]
	}
	return 0
}

// staleMove reports whether move seq of the partition key is older than
// one the group's Raft log has seen (a fence for a later move, or a
// floor above it): a copy of the metadata that shows it is stale (a
// failover to a broker whose copy lags), and no step of that move may be
// taken on its word.
func (c *clusterMode) staleMove(key string, seq int64) bool {
	m, fenced := c.fenceMark(key)
	return fenced && uint64(seq) < m || uint64(seq) < c.floor(key)
}

// applyPlacements brings every local partition's placement up to date
// with the latest view.
func (c *clusterMode) applyPlacements() {
	c.placeMu.Lock()
	defer c.placeMu.Unlock()
	c.applyPlacementsLocked(c.current())
}

// publishView applies v's placements and then publishes v, as one step
// under placeMu: no client is answered from a view whose epoch bases are
// not in place, and no older view's bases overwrite a newer one's.
func (c *clusterMode) publishView(v *clusterView) {
	c.placeMu.Lock()
	defer c.placeMu.Unlock()
	c.applyPlacementsLocked(v)
	c.noteHandoversLocked(c.view.Load(), v)
	c.view.Store(v)
}

// applyPlacementsLocked sets every local partition's epoch base (from
// the metadata, for the partitions this group owns) and move fence (from
// the group's Raft log). The caller holds placeMu.
func (c *clusterMode) applyPlacementsLocked(v *clusterView) {
	var gf groupFences
	if f := c.fences.Load(); f != nil {
		gf = *f
	}
	for _, t := range c.b.sortedTopics() {
		mt, ok := v.topics[t.name]
		ok = ok && [16]byte(mt.ID) == t.id
		for i, p := range t.partitions {
			pl := placementOf(p)
			key := moveKey(t.id, int32(i))
			_, moved := gf.fences[key]
			if floor := gf.floors[key]; floor > 0 && (!ok || i >= len(mt.Partitions) || uint64(mt.Partitions[i].MoveSeq) < floor) {
				// This copy of the metadata is older than the move
				// that last gave the partition to this group: the
				// owner and epoch base it shows may be stale.
				moved = true
			}
			pl.moved.Store(moved)
			if ok && i < len(mt.Partitions) && mt.Partitions[i].Owner == c.group {
				pl.base.Store(mt.Partitions[i].EpochBase)
			}
		}
	}
}

// lookupByID finds a partition of the view and this broker's copy of it.
func (c *clusterMode) lookupByID(v *clusterView, id meta.UUID, index int32) (meta.Partition, *partition.Partition, int16) {
	name, ok := v.byID[[16]byte(id)]
	if !ok {
		return meta.Partition{}, nil, errUnknownTopicOrPartition
	}
	mp, ok := v.partition(name, index)
	if !ok {
		return meta.Partition{}, nil, errUnknownTopicOrPartition
	}
	t := c.local(name)
	if t == nil || t.id != [16]byte(id) || int(index) >= len(t.partitions) {
		return mp, nil, errUnknownTopicOrPartition
	}
	return mp, t.partitions[index], 0
}

// serveMoveRead answers a move target's read of committed records.
func (c *clusterMode) serveMoveRead(w http.ResponseWriter, hr *http.Request) {
	var req moveReadRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	_, p, code := c.lookupByID(c.current(), req.TopicID, req.Partition)
	if code != 0 {
		writeJSON(w, moveReadAnswer{Code: code})
		return
	}
	ans := moveReadAnswer{HighWatermark: p.HighWatermark(), LogStart: p.Log().StartOffset()}
	if req.Offset < ans.LogStart || req.Offset > ans.HighWatermark {
		ans.Code = errOffsetOutOfRange
		writeJSON(w, ans)
		return
	}
	data, err := p.Log().Read(req.Offset, moveReadBytes, ans.HighWatermark)
	if err != nil {
		c.log.Warn("cluster mode: reading a partition for a move failed", "topic", p.Topic, "partition", p.Index, "err", err)
		ans.Code = errKafkaStorageError
	}
	ans.Batches = data
	writeJSON(w, ans)
}

// serveMoveFence fences a partition this group is moving away, at the
// target leader's request, and answers where its log ends.
func (c *clusterMode) serveMoveFence(w http.ResponseWriter, hr *http.Request) {
	var req moveFenceRequest
	if !c.readJSON(w, hr, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(hr.Context(), forwardTimeout)
	defer cancel()
	writeJSON(w, c.fence(ctx, req))
}

func (c *clusterMode) fence(ctx context.Context, req moveFenceRequest) moveFenceAnswer {
	v := c.current()
	mp, p, code := c.lookupByID(v, req.TopicID, req.Partition)
	if code != 0 {
		return moveFenceAnswer{Code: code, Message: "no such partition here"}
	}
	if mp.Move != meta.MoveCopying || mp.Source != c.group || mp.Target != req.Target || mp.MoveSeq != req.MoveSeq {
		return moveFenceAnswer{Code: kerr.NoReassignmentInProgress.Code,
			Message: fmt.Sprintf("this broker's metadata has no move %d of it from %s to %s (move %d: %s, %s → %s)",
				req.MoveSeq, c.group, req.Target, mp.MoveSeq, mp.Move, mp.Source, mp.Target)}
	}
	r := c.b.repl
	key := moveKey(p.TopicID, p.Index)
	mark := uint64(mp.MoveSeq)
	if c.staleMove(key, mp.MoveSeq) {
		return moveFenceAnswer{Code: kerr.NoReassignmentInProgress.Code,
			Message: fmt.Sprintf("move %d is older than one this group's log has seen (fence %d, floor %d): this broker's metadata is stale", mp.MoveSeq, r.node.State().Fences[key], c.floor(key))}
	}
	if m, fenced := r.node.State().Fences[key]; !fenced || m != mark {
		// No transaction may begin on the partition from now on, and
		// the fence waits (a while) for the open ones to end.
		placementOf(p).drainUntil.Store(c.b.clock.Now().Add(moveDrainHold).UnixNano())
		wctx, cancel := context.WithTimeout(ctx, moveDrainWait)
		drained := waitFor(wctx, func() bool { return len(p.OpenTransactions()) == 0 })
		cancel()
		if !drained {
			return moveFenceAnswer{Code: kerr.ConcurrentTransactions.Code, Message: fmt.Sprintf("%d transactions are still open on it", len(p.OpenTransactions()))}
		}
		if err := r.node.ProposeFence(ctx, raftgroup.FenceChange{Epoch: c.b.epoch.Load(), Key: key, Mark: mark}); err != nil {
			return moveFenceAnswer{Code: errNotLeaderOrFollower, Message: "proposing the fence: " + err.Error()}
		}
	}
	if !waitFor(ctx, func() bool { m, ok := c.fenceMark(key); return ok && m == mark && placementOf(p).moved.Load() }) {
		return moveFenceAnswer{Code: kerr.RequestTimedOut.Code, Message: "the fence did not apply in time"}
	}
	p.Barrier() // every append that passed the fence before it applied has landed
	if open := p.OpenTransactions(); len(open) > 0 {
		// A transaction began between the check and the fence: lift it
		// and let the target ask again once the transaction ended.
		if err := r.node.ProposeFence(ctx, raftgroup.FenceChange{Epoch: c.b.epoch.Load(), Key: key, Mark: mark, Lift: true}); err != nil {
			c.log.Warn("cluster mode: lifting a move's fence failed; the leader pass retries", "topic", p.Topic, "partition", p.Index, "err", err)
		}
		return moveFenceAnswer{Code: kerr.ConcurrentTransactions.Code, Message: fmt.Sprintf("%d transactions are open on it", len(open))}
	}
	end := p.Log().EndOffset()
	if !waitFor(ctx, func() bool { return p.HighWatermark() >= end }) {
		return moveFenceAnswer{Code: kerr.RequestTimedOut.Code, Message: fmt.Sprintf("the high watermark %d did not reach the log end %d in time", p.HighWatermark(), end)}
	}
	return moveFenceAnswer{MoveSeq: mp.MoveSeq, Epoch: c.b.exposedEpoch(p), Offset: end}
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
	return true
}

// tendMoves is the group leader's part of every move: it runs a copier
// for each move into the group, drops the copies of partitions moved out,
// and lifts fences that no move needs any more.
func (c *clusterMode) tendMoves(ctx context.Context, v *clusterView) {
	want := map[string]bool{}
	for name, t := range v.topics {
		for _, mp := range t.Partitions {
			if mp.Move != meta.MoveNone && mp.Target == c.group {
				key := moveKey([16]byte(t.ID), mp.Partition)
				want[key] = true
				c.startMover(ctx, key, name, t.ID, mp.Partition)
			}
		}
	}
	c.movers.mu.Lock()
	for key, cancel := range c.movers.running {
		if !want[key] {
			cancel()
			delete(c.movers.running, key)
		}
	}
	c.movers.mu.Unlock()
	c.tendFences(ctx, v)
}

// tendFences lifts the fences of partitions this group owns again and
// drops the copies of partitions it handed over.
func (c *clusterMode) tendFences(ctx context.Context, v *clusterView) {
	r := c.b.repl
	for key, mark := range r.node.State().Fences {
		id, index, ok := parseMoveKey(key)
		if !ok {
			continue
		}
		name, known := v.byID[[16]byte(id)]
		mp, inView := v.partition(name, index)
		var lift bool
		switch {
		case !known || !inView:
			// The topic is gone, or this copy of the metadata has not
			// heard of it yet: which, it cannot tell. The fence stays;
			// a deleted topic's is a few bytes of the group's state,
			// and a topic created again has a new id.
		case uint64(mp.MoveSeq) < mark:
			// This copy of the metadata has not heard of the fenced
			// move yet.
		case mp.Owner == c.group && (mp.Move != meta.MoveCopying || uint64(mp.MoveSeq) != mark):
			// Owned again: the move was cancelled, or a later move
			// brought the partition back, or a later move is copying
			// it while this group still serves it.
			lift = true
		case mp.Owner != c.group && (mp.Move == meta.MoveNone || mp.Target != c.group):
			// Handed over, and not being copied back in.
			c.dropCopy(name, id, index)
		}
		if lift {
			// The floor: from this move on, a copy of the metadata
			// may make this group serve the partition.
			if err := r.node.ProposeFence(ctx, raftgroup.FenceChange{Epoch: c.b.epoch.Load(), Key: key, Mark: mark, Lift: true, Floor: uint64(mp.MoveSeq)}); err != nil {
				c.warn("cluster mode: lifting a move's fence failed; retrying", "key", key, "err", err)
			}
		}
	}
}

// dropCopy empties this group's copy of a partition another group owns
// now.
func (c *clusterMode) dropCopy(name string, id meta.UUID, index int32) {
	t := c.local(name)
	if t == nil || t.id != [16]byte(id) || int(index) >= len(t.partitions) {
		return
	}
	p := t.partitions[index]
	if p.Log().EndOffset() == 0 && p.Log().StartOffset() == 0 {
		return
	}
	if err := c.resetCopy(p, 0); err != nil {
		c.warn("cluster mode: dropping the copy of a moved partition failed; retrying", "topic", name, "partition", index, "err", err)
		return
	}
	c.log.Info("cluster mode: dropped the copy of a partition another group owns now", "topic", name, "partition", index)
}

// resetCopy empties the group leader's copy of p and restarts it at
// offset. The group's replication state of p starts afresh with it: it
// only ever saw the log grow, and would take the followers, whose copies
// the reset left longer than the leader's, for replicas that lost
// committed records, and drop them from the ISR for good.
func (c *clusterMode) resetCopy(p *partition.Partition, offset int64) error {
	if err := p.ResetCopy(offset); err != nil {
		return err
	}
	c.b.repl.forget(p)
	c.b.repl.track(p)
	return nil
}

func (c *clusterMode) startMover(ctx context.Context, key, name string, id meta.UUID, index int32) {
	c.movers.mu.Lock()
	defer c.movers.mu.Unlock()
	if _, ok := c.movers.running[key]; ok {
		return
	}
	if c.movers.running == nil {
		c.movers.running = map[string]context.CancelFunc{}
	}
	mctx, cancel := context.WithCancel(ctx)
	c.movers.running[key] = cancel
	c.movers.wg.Add(1)
	go func() {
		defer c.movers.wg.Done()
		defer func() {
			c.movers.mu.Lock()
			delete(c.movers.running, key)
			c.movers.mu.Unlock()
			cancel()
		}()
		c.copyPartition(mctx, name, id, index)
	}()
}

// cancelMovers stops every copier (the group leader stepped down).
func (c *clusterMode) cancelMovers() {
	c.movers.mu.Lock()
	for _, cancel := range c.movers.running {
		cancel()
	}
	c.movers.mu.Unlock()
}

// stopMovers stops every copier and waits for them (the broker stops).
func (c *clusterMode) stopMovers() {
	c.cancelMovers()
	c.movers.wg.Wait()
}

// copyPartition is one move's copier on the target group's leader: it
// copies, fences, cuts over and finishes, each step retried until the
// move is over or this broker stops leading.
func (c *clusterMode) copyPartition(ctx context.Context, name string, id meta.UUID, index int32) {
	log := c.log.With("topic", name, "partition", index)
	throttle := pacer{perSecond: c.b.cfg.Cluster.MoveBytesPerSecond, start: time.Now()}
	var fenced *moveFenceAnswer
	retry := func(msg string, args ...any) bool {
		if msg != "" {
			c.warn("cluster mode: move: "+msg, append([]any{"topic", name, "partition", index}, args...)...)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(moveRetry):
			return true
		}
	}
	for ctx.Err() == nil && c.b.repl.role.serving() {
		v := c.current()
		mp, p, code := c.lookupByID(v, id, index)
		switch {
		case mp.Move == meta.MoveNone || mp.Target != c.group:
			return // finished or cancelled
		case mp.Move == meta.MoveCutOver:
			res, err := c.proposeMove(ctx, metanode.MovePartition{Topic: name, Partition: index, Step: metanode.MoveFinish})
			if err != nil {
				if !retry("finishing failed", "err", err) {
					return
				}
				continue
			}
			log.Info("cluster mode: move finished", "from", mp.Source, "to", mp.Target)
			// Gone from the running set only once the view shows it
			// finished, or the leader pass would start it again.
			waitFor(ctx, func() bool { return c.current().applied >= res.Index })
			return
		case code != 0:
			if !retry("") { // the reconcile pass has not created it yet
				return
			}
			continue
		}
		if fenced != nil && fenced.MoveSeq != mp.MoveSeq {
			fenced = nil // a fence of a move since cancelled
		}
		key := moveKey([16]byte(id), index)
		if c.staleMove(key, mp.MoveSeq) {
			// This broker's metadata is older than what the group's
			// Raft log has seen of the partition (a failover to a
			// broker whose copy lags): the move it shows is over.
			if !retry("the metadata here is older than the group's log; waiting for it", "move", mp.MoveSeq) {
				return
			}
			continue
		}
		if _, own := c.fenceMark(key); own || c.floor(key) < uint64(mp.MoveSeq) {
			// Before the first copied batch: this group's fence from
			// handing the partition over before goes, and the floor
			// rises to this move, so a copy of the metadata older than
			// it (a failover's) neither drops what this copy brings in
			// nor serves it at an old epoch base.
			if err := c.takeIn(ctx, key, mp.MoveSeq); err != nil {
				if !retry("taking the partition in failed", "err", err) {
					return
				}
				continue
			}
		}
		src, ok := c.groupState(v, mp.Source)
		if !ok || src.Leader < 0 {
			if !retry("the source group has no leader", "source", mp.Source) {
				return
			}
			continue
		}
		end := p.Log().EndOffset()
		var ans moveReadAnswer
		if err := c.call(ctx, src.Leader, PathMoveRead, moveReadRequest{TopicID: id, Partition: index, Offset: end}, &ans); err != nil {
			if !retry("reading from the source failed", "source_leader", src.Leader, "err", err) {
				return
			}
			continue
		}
		switch {
		case ans.Code == errOffsetOutOfRange && end < ans.LogStart:
			// The source no longer holds what would follow this copy:
			// start over at its log start.
			if err := c.resetCopy(p, ans.LogStart); err != nil {
				if !retry("resetting the copy failed", "err", err) {
					return
				}
			}
			continue
		case ans.Code != 0:
			if !retry("the source refused a read", "code", ans.Code, "source_high_watermark", ans.HighWatermark, "copy_end", end) {
				return
			}
			continue
		}
		if len(ans.Batches) > 0 {
			if err := c.appendCopy(p, ans.Batches, ans.HighWatermark); err != nil {
				if !retry("appending the copy failed", "err", err) {
					return
				}
				continue
			}
			if !throttle.wait(ctx, len(ans.Batches)) {
				return
			}
			continue
		}
		// Caught up with the source's high watermark.
		if fenced == nil {
			var fa moveFenceAnswer
			err := c.call(ctx, src.Leader, PathMoveFence, moveFenceRequest{TopicID: id, Partition: index, Target: c.group, MoveSeq: mp.MoveSeq}, &fa)
			if err == nil && fa.Code != 0 {
				err = fmt.Errorf("%v: %s", kerr.ErrorForCode(fa.Code), fa.Message)
			}
			if err != nil {
				if !retry("fencing the source failed", "source_leader", src.Leader, "err", err) {
					return
				}
				continue
			}
			log.Info("cluster mode: move: the source fenced the partition", "epoch", fa.Epoch, "log_end", fa.Offset)
			fenced = &fa
			continue
		}
		if end < fenced.Offset {
			continue // the source's high watermark is there: read on
		}
		if !waitFor(ctx, func() bool { return p.HighWatermark() >= fenced.Offset }) {
			return
		}
		res, err := c.proposeMove(ctx, metanode.MovePartition{Topic: name, Partition: index, Step: metanode.MoveCutOver,
			MoveSeq: fenced.MoveSeq, FenceEpoch: fenced.Epoch, FenceOffset: fenced.Offset})
		if err != nil {
			if !retry("proposing the cut-over failed", "err", err) {
				return
			}
			continue
		}
		log.Info("cluster mode: move cut over", "from", mp.Source, "to", c.group, "log_end", fenced.Offset)
		waitFor(ctx, func() bool { return c.current().applied >= res.Index })
	}
}

// takeIn lifts this group's own fence of a partition a move copies into
// it, raising its floor to the move's number, and waits until this
// replica applied that.
func (c *clusterMode) takeIn(ctx context.Context, key string, seq int64) error {
	r := c.b.repl
	mark, _ := c.fenceMark(key)
	pctx, cancel := context.WithTimeout(ctx, moveDrainWait)
	defer cancel()
	if err := r.node.ProposeFence(pctx, raftgroup.FenceChange{Epoch: c.b.epoch.Load(), Key: key, Mark: mark, Lift: true, Floor: uint64(seq)}); err != nil {
		return err
	}
	if !waitFor(pctx, func() bool { _, fenced := c.fenceMark(key); return !fenced && c.floor(key) >= uint64(seq) }) {
		return errors.New("the lift did not apply in time")
	}
	return nil
}

// appendCopy appends a read's batches, checking each one's CRC. The
// source's compaction may have removed whole batches: a gap before a
// batch is allowed below highWatermark (the source's, which every batch
// of the read lies below), as a follower allows its leader's.
func (c *clusterMode) appendCopy(p *partition.Partition, data []byte, highWatermark int64) error {
	gapsAllowed := false
	for len(data) > 0 {
		// Not recordbatch.Split: that checks producers' batches, and
		// compaction leaves batches with fewer records than offsets.
		h, err := recordbatch.ParseHeader(data)
		if err != nil || h.Size() > len(data) {
			return fmt.Errorf("copied batch at %d: %v", p.Log().EndOffset(), err)
		}
		b := data[:h.Size()]
		data = data[h.Size():]
		if _, err := recordbatch.Check(b); err != nil {
			return err
		}
		if h.BaseOffset > p.Log().EndOffset() && !gapsAllowed {
			if err := p.Log().AllowGaps(highWatermark); err != nil {
				return err
			}
			gapsAllowed = true
		}
		if err := p.AppendCopy(b); err != nil {
			return err
		}
	}
	return nil
}

func (c *clusterMode) proposeMove(ctx context.Context, m metanode.MovePartition) (metanode.Result, error) {
	pctx, cancel := context.WithTimeout(ctx, clusterProposeTimeout)
	defer cancel()
	return c.propose(pctx, metanode.Command{MovePartition: &m})
}

// startMove starts moving a partition to group target, or cancels its
// move when target is its owner and it is still being copied.
func (c *clusterMode) startMove(ctx context.Context, name string, index int32, target string) (int16, string) {
	v := c.current()
	mp, ok := v.partition(name, index)
	if !ok {
		return errUnknownTopicOrPartition, fmt.Sprintf("no partition %s/%d", name, index)
	}
	if internalTopic(name) && !slices.Contains(coordTopics, name) {
		return errInvalidRequest, "the broker's own topics do not move: in cluster mode they are each group's (users and ACLs live in the metadata log)"
	}
	step := metanode.MovePartition{Topic: name, Partition: index, Step: metanode.MoveStart, Target: target}
	switch {
	case target == mp.Owner && mp.Move == meta.MoveNone:
		return 0, "" // already there
	case target == mp.Owner && mp.Move == meta.MoveCopying:
		step = metanode.MovePartition{Topic: name, Partition: index, Step: metanode.MoveCancel}
	}
	if _, err := c.proposeMove(ctx, step); err != nil {
		if code := meta.ErrorCode(err); code != 0 {
			return code, err.Error()
		}
		return kerr.RequestTimedOut.Code, err.Error()
	}
	return 0, ""
}

// cancelMove cancels a partition's move while it is being copied.
func (c *clusterMode) cancelMove(ctx context.Context, name string, index int32) (int16, string) {
	if _, err := c.proposeMove(ctx, metanode.MovePartition{Topic: name, Partition: index, Step: metanode.MoveCancel}); err != nil {
		if code := meta.ErrorCode(err); code != 0 {
			return code, err.Error()
		}
		return kerr.RequestTimedOut.Code, err.Error()
	}
	return 0, ""
}

// errMoveNoGroup refuses a reassignment whose replicas are not the brokers
// of one group.
var errMoveNoGroup = errors.New("the replicas must all be brokers of one replication group")

// groupOfReplicas is the one group whose brokers replicas lists.
func (c *clusterMode) groupOfReplicas(v *clusterView, replicas []int32) (string, error) {
	group := ""
	for _, id := range replicas {
		br, ok := v.brokers[id]
		if !ok {
			return "", fmt.Errorf("no broker %d: %w", id, errMoveNoGroup)
		}
		if group != "" && br.Group != group {
			return "", errMoveNoGroup
		}
		group = br.Group
	}
	if group == "" {
		return "", errMoveNoGroup
	}
	return group, nil
}

// pacer keeps a copy under perSecond bytes a second on average since
// start (0: no cap).
type pacer struct {
	perSecond int64
	start     time.Time
	sent      int64
}

// wait counts n more bytes and sleeps until they fit the cap; false when
// ctx ended first.
func (p *pacer) wait(ctx context.Context, n int) bool {
	p.sent += int64(n)
	if p.perSecond <= 0 {
		return true
	}
	due := p.start.Add(time.Duration(float64(p.sent) / float64(p.perSecond) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
