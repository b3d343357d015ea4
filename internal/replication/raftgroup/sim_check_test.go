package raftgroup

// The simulation's invariants, checked after every step, and the final
// check after healing.

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/checker"
	"github.com/moonmq/moonmq/internal/replication"
)

// sysChecker holds what the invariants are judged against.
//
// The committed log of a partition is every offset some leader's high
// watermark has covered, with the record it covered: it only grows, and
// two leaders covering one offset must agree on it. For each replica and
// partition, agree is the length of the prefix of its log that equals the
// committed log; most checks are comparisons with it.
type sysChecker struct {
	w *sysWorld

	committed [][]sysRec
	agree     [][]int64 // [replica id-1][partition]
	ackedEnd  []int64

	hwByEpoch      map[int32][]int64
	servingByEpoch map[int32]int32
	ldrByEpoch     map[int32]int32
	maxEpoch       int32 // the newest epoch any replica has led
	appliedAt      map[uint64]GroupState
	latestIndex    uint64
	latest         GroupState

	lastDeep int
	stats    sysStats
}

// sysStats counts what a run did, for the test log.
type sysStats struct {
	epochs, acked, reads, truncations int
	// olderEpochAnswers counts epoch-end answers about an older epoch than
	// asked (KIP-279's case: the leader never had the follower's latest
	// epoch).
	olderEpochAnswers int
	// notLeaderAnswers counts NOT_LEADER answers to followers (the
	// replica named by the latest claim had not promoted itself yet, or
	// no longer leads).
	notLeaderAnswers int
}

func (c *sysChecker) init(w *sysWorld) {
	c.w = w
	n := w.cfg.Partitions
	c.committed = make([][]sysRec, n)
	c.ackedEnd = make([]int64, n)
	c.agree = make([][]int64, w.cfg.Replicas)
	for i := range c.agree {
		c.agree[i] = make([]int64, n)
	}
	c.hwByEpoch = map[int32][]int64{}
	c.servingByEpoch = map[int32]int32{}
	c.ldrByEpoch = map[int32]int32{}
	c.appliedAt = map[uint64]GroupState{}
	c.latest = initialState()
}

// onApply: every replica applies the same group state at each index.
func (c *sysChecker) onApply(id int32, index uint64, st GroupState) {
	if prev, ok := c.appliedAt[index]; ok && !prev.Equal(st) {
		c.w.fail("r%d applied %+v at index %d where another replica applied %+v", id, st, index, prev)
		return
	}
	c.appliedAt[index] = st.clone()
	if index > c.latestIndex {
		c.latestIndex, c.latest = index, st.clone()
	}
}

func (c *sysChecker) extendAgree(r *sysReplica, p int) {
	a := &c.agree[r.id-1][p]
	com := c.committed[p]
	for *a < int64(len(com)) {
		rec, ok := r.shadow[p].at(*a)
		if !ok || rec != com[*a] {
			return
		}
		*a++
	}
}

func (c *sysChecker) appended(r *sysReplica, p int) { c.extendAgree(r, p) }

// replaced: r's log of p was cut or rebuilt.
func (c *sysChecker) replaced(r *sysReplica, p int) {
	a := &c.agree[r.id-1][p]
	*a = min(*a, r.shadow[p].end())
	if r.shadow[p].start > 0 {
		*a = 0
	}
	c.extendAgree(r, p)
}

// agreeDurable is how far r's durable log of p holds the committed log.
func (c *sysChecker) agreeDurable(r *sysReplica, p int) int64 {
	return min(c.agree[r.id-1][p], r.logs[p].DurableEnd())
}

// observeLeader extends the committed log to r's high watermark of p.
func (c *sysChecker) observeLeader(r *sysReplica, p int) {
	h := r.ldr.HighWatermark(r.tp(p))
	com := c.committed[p]
	if h <= int64(len(com)) {
		return
	}
	for off := int64(len(com)); off < h; off++ {
		rec, ok := r.shadow[p].at(off)
		if !ok {
			c.w.fail("r%d epoch %d partition %d: high watermark %d beyond its log [%d, %d)", r.id, r.ldr.Epoch(), p, h,
				r.shadow[p].start, r.shadow[p].end())
			return
		}
		com = append(com, rec)
	}
	c.committed[p] = com
	for _, o := range c.w.reps {
		c.extendAgree(o, p)
	}
}

func (c *sysChecker) onAck(r *sysReplica, p int, off int64, v int32) {
	c.stats.acked++
	if c.w.cfg.EndToEnd {
		return
	}
	if r.ldr != nil {
		c.observeLeader(r, p)
	}
	com := c.committed[p]
	if off >= int64(len(com)) {
		c.w.fail("value %d acknowledged at partition %d offset %d by r%d, above every high watermark (%d)", v, p, off, r.id, len(com))
		return
	}
	if com[off].val != v {
		c.w.fail("value %d acknowledged at partition %d offset %d, but the committed record there is value %d", v, p, off, com[off].val)
		return
	}
	c.ackedEnd[p] = max(c.ackedEnd[p], off+1)
}

func (c *sysChecker) onRead(r *sysReplica, p int, off int64, v int32) {
	c.stats.reads++
	if c.w.cfg.EndToEnd {
		return
	}
	com := c.committed[p]
	if off >= int64(len(com)) || com[off].val != v {
		want := "nothing"
		if off < int64(len(com)) {
			want = fmt.Sprintf("value %d", com[off].val)
		}
		c.w.fail("consumer read value %d at partition %d offset %d from r%d; committed there: %s", v, p, off, r.id, want)
	}
}

// beforeTruncate: nothing below a high watermark is ever truncated, neither
// below the replica's own nor any committed record it holds.
func (c *sysChecker) beforeTruncate(r *sysReplica, p int, off int64, why string) {
	c.stats.truncations++
	if c.w.cfg.EndToEnd {
		return
	}
	if off < r.hw[p] {
		c.w.fail("r%d partition %d: %s to %d, below its own high watermark %d", r.id, p, why, off, r.hw[p])
		return
	}
	if a := min(c.agree[r.id-1][p], int64(len(c.committed[p]))); off < a {
		c.w.fail("r%d partition %d: %s to %d removes committed offsets %d..%d", r.id, p, why, off, off, a-1)
	}
}

// afterStep checks every invariant that must hold between any two steps.
func (c *sysChecker) afterStep() {
	w := c.w
	if w.cfg.EndToEnd {
		return
	}
	for _, r := range w.reps {
		if !r.up {
			continue
		}
		if r.core.serving() {
			e := r.core.state.Epoch
			if prev, ok := c.servingByEpoch[e]; ok && prev != r.id {
				w.fail("epoch %d served by r%d and r%d", e, prev, r.id)
				return
			}
			if _, ok := c.servingByEpoch[e]; !ok {
				c.stats.epochs++
			}
			c.servingByEpoch[e] = r.id
		}
		if r.ldr != nil && !c.checkLeader(r) {
			return
		}
		for p, l := range r.logs {
			if r.hw[p] > c.agreeDurable(r, p) {
				w.fail("r%d partition %d: high watermark %d, but its durable log holds the committed log only up to %d (durable end %d)",
					r.id, p, r.hw[p], c.agreeDurable(r, p), l.DurableEnd())
				return
			}
			if !c.checkHistory(r, p) {
				return
			}
		}
	}
	// The leader of the newest epoch holds every acknowledged record: a
	// replica that may lack one never leads (no unclean election). A
	// deposed leader that has not noticed yet is not judged.
	var newest *sysReplica
	for _, r := range w.reps {
		if r.up && r.ldr != nil && r.ldr.Epoch() == c.maxEpoch {
			newest = r
		}
	}
	if newest != nil {
		for p, end := range c.ackedEnd {
			if got := c.agreeDurable(newest, p); got < end {
				w.fail("r%d leads epoch %d, but holds partition %d's acknowledged records only up to %d; acknowledged up to %d",
					newest.id, newest.ldr.Epoch(), p, got, end)
				return
			}
		}
	}
	// Every acknowledged offset is on the durable log of every member of
	// the latest committed ISR (the whole group before any).
	isr := w.ids
	if c.latest.HasISR {
		isr = c.latest.ISR
	}
	for p, end := range c.ackedEnd {
		for _, id := range isr {
			r := w.rep(id)
			if got := c.agreeDurable(r, p); got < end {
				w.fail("ISR %v member r%d (up %v) holds partition %d's acknowledged records only up to %d; acknowledged up to %d",
					isr, id, r.up, p, got, end)
				return
			}
		}
	}
	if w.steps-c.lastDeep >= 500 {
		c.lastDeep = w.steps
		c.deepCheck()
	}
}

// checkLeader: one leader per epoch; the high watermark never decreases
// within an epoch, never exceeds the leader's durable end, and every
// member of the set acks=all waits for holds the committed log up to it
// on its disk.
func (c *sysChecker) checkLeader(r *sysReplica) bool {
	w := c.w
	e := r.ldr.Epoch()
	if prev, ok := c.ldrByEpoch[e]; ok && prev != r.id {
		w.fail("epoch %d led by r%d and r%d", e, prev, r.id)
		return false
	}
	c.ldrByEpoch[e] = r.id
	c.maxEpoch = max(c.maxEpoch, e)
	hws := c.hwByEpoch[e]
	if hws == nil {
		hws = make([]int64, w.cfg.Partitions)
		c.hwByEpoch[e] = hws
	}
	ackSet := r.ldr.AckSet()
	for p, l := range r.logs {
		c.observeLeader(r, p)
		if w.stop {
			return false
		}
		h := r.ldr.HighWatermark(r.tp(p))
		if h < hws[p] {
			w.fail("r%d epoch %d partition %d: high watermark went down from %d to %d", r.id, e, p, hws[p], h)
			return false
		}
		hws[p] = h
		if h > l.DurableEnd() {
			w.fail("r%d epoch %d partition %d: high watermark %d above the leader's durable end %d", r.id, e, p, h, l.DurableEnd())
			return false
		}
		for _, id := range ackSet {
			m := w.rep(id)
			if got := c.agreeDurable(m, p); got < h {
				w.fail("r%d epoch %d partition %d: high watermark %d, but r%d of the acks=all set %v holds the committed log durably only up to %d (log end %d, durable %d)",
					r.id, e, p, h, id, ackSet, got, m.logs[p].EndOffset(), m.logs[p].DurableEnd())
				return false
			}
		}
	}
	return true
}

// checkHistory: epoch histories strictly increase, in epoch and in start
// offset, and lie within the log.
func (c *sysChecker) checkHistory(r *sysReplica, p int) bool {
	l := r.logs[p]
	h := l.EpochHistory()
	for i, e := range h {
		if i > 0 && (e.Epoch <= h[i-1].Epoch || e.StartOffset <= h[i-1].StartOffset) {
			c.w.fail("r%d partition %d: epoch history not strictly increasing: %v", r.id, p, h)
			return false
		}
		if e.StartOffset < l.StartOffset() || e.StartOffset >= l.EndOffset() {
			c.w.fail("r%d partition %d: epoch history %v outside the log [%d, %d)", r.id, p, h, l.StartOffset(), l.EndOffset())
			return false
		}
	}
	return true
}

// deepCheck compares every shadow with the bytes on disk, and every
// batch's epoch with the epoch history.
func (c *sysChecker) deepCheck() {
	for _, r := range c.w.reps {
		for p, l := range r.logs {
			sh, err := sysReadShadow(l)
			if err != nil {
				c.w.fail("r%d partition %d: reading the log: %v", r.id, p, err)
				return
			}
			if sh.start != r.shadow[p].start || !slices.Equal(sh.recs, r.shadow[p].recs) {
				c.w.fail("r%d partition %d: log on disk differs from what was written to it", r.id, p)
				return
			}
			h := l.EpochHistory()
			for i, rec := range sh.recs {
				off := sh.start + int64(i)
				want := int32(-1)
				for _, e := range h {
					if e.StartOffset <= off {
						want = e.Epoch
					}
				}
				if rec.epoch != want {
					c.w.fail("r%d partition %d: offset %d has epoch %d, the epoch history %v says %d", r.id, p, off, rec.epoch, h, want)
					return
				}
			}
		}
	}
}

// finish ends the chaos: it stops faults and new produces, heals
// everything, waits until the group has converged and runs the final
// checks.
func (w *sysWorld) finish() {
	w.faults, w.clients = false, false
	w.heal()
	var l *sysReplica
	converged := w.runUntil(120*time.Second, func() bool {
		l = w.converged()
		return l != nil
	})
	if w.stop {
		return
	}
	if !converged {
		w.fail("no convergence within 120 s of healing: %s", w.describe())
		return
	}
	w.tracef("converged on leader r%d", l.id)
	if !w.cfg.EndToEnd {
		w.ck.deepCheck()
		if w.stop {
			return
		}
	}
	w.finalCheck(l)
}

// converged returns the leader once the healed group has settled: one
// leader, every other replica following it with the same log ends, the
// leader's high watermarks at the log end, no produce waiting.
func (w *sysWorld) converged() *sysReplica {
	w.cl.prune()
	if len(w.cl.pending) > 0 {
		return nil
	}
	var l *sysReplica
	for _, r := range w.reps {
		if !r.up {
			return nil
		}
		if r.ldr != nil {
			if l != nil || !r.core.serving() {
				return nil
			}
			l = r
		}
	}
	if l == nil {
		return nil
	}
	for _, r := range w.reps {
		if r != l {
			id, e := r.fetcher.Leader()
			if id != l.id || e != l.ldr.Epoch() || r.fetcher.State() != replication.StateFetching {
				return nil
			}
		}
		for p, lg := range r.logs {
			if lg.EndOffset() != l.logs[p].EndOffset() || l.hw[p] != lg.EndOffset() {
				return nil
			}
		}
	}
	return l
}

func (w *sysWorld) describe() string {
	var b strings.Builder
	for _, r := range w.reps {
		fmt.Fprintf(&b, "\n  r%d up=%v paused=%v", r.id, r.up, r.paused)
		if !r.up {
			continue
		}
		st := r.core.status()
		fmt.Fprintf(&b, " raft=%s term=%d serving=%v epoch=%d leader=%d isr=%v handoff=%v unclean=%v", st.Role, st.RaftTerm,
			st.Serving, st.Epoch, st.Leader, st.ISR, st.HandingOff, st.Unclean)
		if r.ldr != nil {
			pend, ok := r.ldr.Pending()
			fmt.Fprintf(&b, " LEADER epoch=%d ackset=%v pending=%v(%v)", r.ldr.Epoch(), r.ldr.AckSet(), ok, pend)
		} else {
			id, e := r.fetcher.Leader()
			fmt.Fprintf(&b, " follows=%d/%d state=%v", id, e, r.fetcher.State())
		}
		for p, l := range r.logs {
			fmt.Fprintf(&b, " p%d[end %d durable %d hw %d epochs %v]", p, l.EndOffset(), l.DurableEnd(), r.hw[p], l.EpochHistory())
		}
	}
	fmt.Fprintf(&b, "\n  pending produces %d, committed ends", len(w.cl.pending))
	for p := range w.ck.committed {
		fmt.Fprintf(&b, " %d", len(w.ck.committed[p]))
	}
	return b.String()
}

// finalCheck: every replica holds byte-identical logs, every acknowledged
// value is present exactly once at its offset on every replica, and the
// history checker finds no anomaly in what the clients saw.
func (w *sysWorld) finalCheck(l *sysReplica) {
	hist := checker.History{Sends: w.cl.sends, Polls: w.cl.polls}
	for p := range w.cfg.Partitions {
		ref, err := sysReadBatches(l.logs[p])
		if err != nil {
			w.fail("final: r%d partition %d: %v", l.id, p, err)
			return
		}
		for _, r := range w.reps {
			bs, err := sysReadBatches(r.logs[p])
			if err != nil {
				w.fail("final: r%d partition %d: %v", r.id, p, err)
				return
			}
			if len(bs) != len(ref) {
				w.fail("final: partition %d: r%d holds %d batches, leader r%d %d", p, r.id, len(bs), l.id, len(ref))
				return
			}
			for i := range bs {
				if !bytes.Equal(bs[i], ref[i]) {
					w.fail("final: partition %d: batch %d differs between r%d and r%d", p, i, r.id, l.id)
					return
				}
			}
			seen := map[int32]int64{}
			dump := checker.Dump{Replica: fmt.Sprint(r.id), Topic: sysTopic, Partition: int32(p), LogStart: r.shadow[p].start,
				HW: r.hw[p], Leader: r == l}
			for i, rec := range r.shadow[p].recs {
				off := r.shadow[p].start + int64(i)
				if prev, dup := seen[rec.val]; dup {
					w.fail("final: r%d partition %d holds value %d twice, at %d and %d", r.id, p, rec.val, prev, off)
					return
				}
				seen[rec.val] = off
				dump.Records = append(dump.Records, checker.Record{Offset: off, Value: sysValue(rec.val)})
			}
			hist.Dumps = append(hist.Dumps, dump)
			for _, s := range w.cl.sends {
				if s.Outcome != checker.Acked || int(s.Partition) != p {
					continue
				}
				v, _ := sysValueID([]byte(s.Value))
				if off, ok := seen[v]; !ok {
					w.fail("final: acknowledged value %d (partition %d offset %d) is lost: r%d does not hold it", v, p, s.Offset, r.id)
					return
				} else if off != s.Offset {
					w.fail("final: acknowledged value %d (partition %d offset %d) is at offset %d on r%d", v, p, s.Offset, off, r.id)
					return
				}
			}
		}
	}
	rep := checker.Check(hist, checker.Options{MinISR: w.cfg.MinISR})
	if !rep.OK() {
		w.fail("final: history checker: %s", rep)
	}
}
