package raftgroup

// The simulated clients: producers with acks=all semantics (a record is
// acknowledged only once the high watermark of the leader that appended it
// covers it) and an assign-mode consumer that reads below the high
// watermark. Every operation is recorded as a checker.History.

import (
	"time"

	"github.com/moonmq/moonmq/internal/checker"
)

// sysPending is a produce waiting for its acknowledgement.
type sysPending struct {
	rep   *sysReplica
	inc   int
	epoch int32
	part  int
	base  int64
	last  int64
	vals  []int32
	sends []int // indexes into sysClients.sends
	done  bool
}

type sysClients struct {
	w       *sysWorld
	nextVal int32
	sends   []checker.Send
	pending []*sysPending
	polls   []checker.Poll
	// The consumer's position and the newest leader epoch it has seen
	// (KIP-320: it refuses answers from older leaders).
	pos      []int64
	epochMax []int32
	// acked maps each acknowledged value to its offset.
	acked map[int32]int64
}

func (c *sysClients) init(w *sysWorld) {
	c.w = w
	c.pos = make([]int64, w.cfg.Partitions)
	c.epochMax = make([]int32, w.cfg.Partitions)
	c.acked = map[int32]int64{}
}

func (c *sysClients) micros() int64 { return int64(c.w.now / time.Microsecond) }

// start runs the random producer and consumer while w.clients is set.
func (c *sysClients) start() {
	w := c.w
	var produce, consume func()
	produce = func() {
		if !w.clients {
			return
		}
		c.produce(w.rng.IntN(w.cfg.Partitions), 1+w.rng.IntN(3))
		w.at(w.between(5*time.Millisecond, 40*time.Millisecond), produce)
	}
	consume = func() {
		if !w.clients {
			return
		}
		for p := range w.cfg.Partitions {
			c.consume(p)
		}
		w.at(w.between(20*time.Millisecond, 150*time.Millisecond), consume)
	}
	w.at(w.between(0, 20*time.Millisecond), produce)
	w.at(w.between(0, 50*time.Millisecond), consume)
}

// leaders lists the replicas a client could be talking to as the leader:
// every live one that believes it leads, including a deposed leader that
// has not noticed yet. A paused one would not answer: skipping it is the
// same as a send that never reached it.
func (c *sysClients) leaders(minEpoch int32) []*sysReplica {
	var out []*sysReplica
	for _, r := range c.w.reps {
		if r.up && !r.paused && r.ldr != nil && r.ldr.Epoch() >= minEpoch {
			out = append(out, r)
		}
	}
	return out
}

// produce sends n new unique values to partition p through a leader and
// returns the pending produce (nil when it failed at once).
func (c *sysClients) produce(p, n int) *sysPending {
	w := c.w
	vals := make([]int32, n)
	idx := make([]int, n)
	for i := range vals {
		c.nextVal++
		vals[i] = c.nextVal
		idx[i] = len(c.sends)
		c.sends = append(c.sends, checker.Send{Producer: "p", Seq: int(c.nextVal), Topic: sysTopic, Partition: int32(p),
			Value: sysValue(vals[i]), Start: c.micros(), Outcome: checker.Unknown})
	}
	cands := c.leaders(0)
	if len(cands) == 0 {
		c.finish(idx, checker.Failed, 0)
		return nil
	}
	r := cands[w.rng.IntN(len(cands))]
	base, last, code := r.produce(p, vals)
	if code != produceOK {
		// NOT_LEADER and NOT_ENOUGH_REPLICAS come before any append.
		c.finish(idx, checker.Failed, 0)
		return nil
	}
	c.prune()
	pp := &sysPending{rep: r, inc: r.inc, epoch: r.ldr.Epoch(), part: p, base: base, last: last, vals: vals, sends: idx}
	c.pending = append(c.pending, pp)
	if w.cfg.Mut == mutAckOnAppend {
		c.ack(pp)
		return pp
	}
	w.at(sysAckTimeout, func() { c.giveUp(pp, "timeout") })
	return pp
}

func (c *sysClients) finish(idx []int, o checker.Outcome, base int64) {
	for i, k := range idx {
		s := &c.sends[k]
		s.Outcome, s.End = o, c.micros()
		if o == checker.Acked {
			s.Offset = base + int64(i)
		}
	}
}

// giveUp ends a produce with an unknown outcome: a timeout, the leader
// gone, or NOT_ENOUGH_REPLICAS_AFTER_APPEND.
func (c *sysClients) giveUp(pp *sysPending, why string) {
	if pp.done {
		return
	}
	pp.done = true
	c.finish(pp.sends, checker.Unknown, 0)
	c.w.tracef("client: produce of %v at r%d %d..%d unknown (%s)", pp.vals, pp.rep.id, pp.base, pp.last, why)
}

func (c *sysClients) ack(pp *sysPending) {
	if pp.done {
		return
	}
	pp.done = true
	c.finish(pp.sends, checker.Acked, pp.base)
	c.w.tracef("client: acked %v at %d..%d by r%d epoch %d", pp.vals, pp.base, pp.last, pp.rep.id, pp.epoch)
	for i, v := range pp.vals {
		off := pp.base + int64(i)
		c.acked[v] = off
		c.w.ck.onAck(pp.rep, pp.part, off, v)
	}
}

// prune forgets finished produces; never called while iterating.
func (c *sysClients) prune() {
	n := 0
	for _, pp := range c.pending {
		if !pp.done {
			c.pending[n] = pp
			n++
		}
	}
	clear(c.pending[n:])
	c.pending = c.pending[:n]
}

// hwRaised acknowledges what r's high watermark of p now covers.
func (c *sysClients) hwRaised(r *sysReplica, p int) {
	for _, pp := range c.pending {
		if !pp.done && pp.rep == r && pp.part == p && pp.inc == r.inc && r.ldr != nil && r.ldr.Epoch() == pp.epoch &&
			r.hw[p] > pp.last {
			c.ack(pp)
		}
	}
}

// sweep answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (an unknown outcome) for
// writes whose high watermark is held under min.insync.replicas.
func (c *sysClients) sweep(r *sysReplica) {
	if r.ldr == nil {
		return
	}
	for _, pp := range c.pending {
		if !pp.done && pp.rep == r && r.ldr.PartitionUnderMinISR(r.tp(pp.part)) {
			c.giveUp(pp, "not enough replicas after append")
		}
	}
}

// leaderGone ends r's pending produces: its client connections close.
func (c *sysClients) leaderGone(r *sysReplica) {
	for _, pp := range c.pending {
		if !pp.done && pp.rep == r {
			c.giveUp(pp, "leader gone")
		}
	}
}

// consume reads partition p from the consumer's position up to the high
// watermark of a leader no older than the newest the consumer has seen.
func (c *sysClients) consume(p int) {
	w := c.w
	cands := c.leaders(c.epochMax[p])
	if len(cands) == 0 {
		return
	}
	r := cands[w.rng.IntN(len(cands))]
	c.epochMax[p] = r.ldr.Epoch()
	hw := r.hw[p]
	pos := c.pos[p]
	if pos >= hw {
		return
	}
	b, err := r.logs[p].Read(pos, 1024, hw)
	if err != nil {
		w.fail("consumer: r%d partition %d: read at %d below hw %d: %v", r.id, p, pos, hw, err)
		return
	}
	poll := checker.Poll{Consumer: "c", Mode: checker.Assign, Topic: sysTopic, Partition: int32(p), Start: c.micros(),
		End: c.micros(), HW: hw}
	for len(b) > 0 {
		recs, err := sysBatchRecs(b[:sysBatchSize(b)])
		if err != nil {
			w.fail("consumer: r%d partition %d: bad batch: %v", r.id, p, err)
			return
		}
		b = b[sysBatchSize(b):]
		for i, rec := range recs {
			off := rec.base + int64(i)
			if off < pos {
				continue
			}
			if off >= hw {
				w.fail("consumer: r%d partition %d returned offset %d at or above its high watermark %d", r.id, p, off, hw)
				return
			}
			poll.Records = append(poll.Records, checker.Record{Offset: off, Value: sysValue(rec.val)})
			w.ck.onRead(r, p, off, rec.val)
			c.pos[p] = off + 1
		}
	}
	if len(poll.Records) > 0 {
		c.polls = append(c.polls, poll)
		w.tracef("consumer: read p%d %d..%d from r%d (hw %d)", p, poll.Records[0].Offset, c.pos[p]-1, r.id, hw)
	}
}

func sysBatchSize(b []byte) int {
	if len(b) < 12 {
		return len(b)
	}
	n := 12 + int(int32(uint32(b[8])<<24|uint32(b[9])<<16|uint32(b[10])<<8|uint32(b[11])))
	return min(max(n, 12), len(b))
}
