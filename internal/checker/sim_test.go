package checker

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// simLog is one partition's single, correct log.
type simLog struct {
	recs    []Record
	open    map[string]int64 // open transaction → its first offset here
	aborted map[int64]bool
}

type simProd struct {
	name  string
	seq   int
	txn   string
	sends []int // indexes into History.Sends of the open transaction
	parts map[int]bool
}

type simCons struct {
	name    string
	rc      bool
	pos     []int64
	lastEnd int64
}

type sim struct {
	rng    *rand.Rand
	now    int64
	h      History
	logs   []*simLog
	prods  []*simProd
	cons   []*simCons
	nval   int
	ntxn   int
	offset int64 // the group's committed offset, -1 if none
	txnOf  map[string]string
}

const simTopic = "sim"

// window returns a start and end around the operation's linearization
// point, so that operations overlap in time.
func (s *sim) window() (at, start, end int64) {
	s.now += 3
	return s.now, s.now - int64(s.rng.Intn(6)), s.now + int64(s.rng.Intn(6))
}

func (s *sim) send(p *simProd) {
	part := s.rng.Intn(len(s.logs))
	if p.txn != "" {
		for q := range p.parts {
			part = q // stay mostly on the partitions already in the transaction
			break
		}
		if s.rng.Intn(3) == 0 {
			part = s.rng.Intn(len(s.logs))
		}
	}
	l := s.logs[part]
	s.nval++
	_, start, end := s.window()
	p.seq++
	snd := Send{Producer: p.name, Seq: p.seq, Topic: simTopic, Partition: int32(part), Value: fmt.Sprintf("v%d", s.nval),
		Start: start, End: end, Txn: p.txn}
	appendIt := true
	switch r := s.rng.Intn(20); {
	case r == 0 && p.txn == "":
		snd.Outcome, appendIt = Failed, false
	case r == 1:
		snd.Outcome, appendIt = Unknown, false
	case r <= 3:
		snd.Outcome = Unknown
	default:
		snd.Outcome = Acked
	}
	if appendIt {
		off := int64(len(l.recs))
		l.recs = append(l.recs, Record{Offset: off, Value: snd.Value})
		if snd.Outcome == Acked {
			snd.Offset = off
		}
		if p.txn != "" {
			if _, ok := l.open[p.txn]; !ok {
				l.open[p.txn] = off
			}
			p.parts[part] = true
		}
	}
	s.h.Sends = append(s.h.Sends, snd)
	s.txnOf[snd.Value] = p.txn
	if p.txn != "" {
		p.sends = append(p.sends, len(s.h.Sends)-1)
	}
}

func (s *sim) endTxn(p *simProd) {
	commit := s.rng.Intn(5) < 3
	s.window()
	for part := range p.parts {
		l := s.logs[part]
		first := l.open[p.txn]
		if !commit {
			for off := first; off < int64(len(l.recs)); off++ {
				if !l.recs[off].Control && s.valueTxn(l.recs[off].Value) == p.txn {
					l.aborted[off] = true
				}
			}
		}
		delete(l.open, p.txn)
		l.recs = append(l.recs, Record{Offset: int64(len(l.recs)), Control: true})
	}
	known := s.rng.Intn(7) != 0
	for _, i := range p.sends {
		switch {
		case !known:
			s.h.Sends[i].TxnOutcome = TxnUnknown
		case commit:
			s.h.Sends[i].TxnOutcome = TxnCommitted
		default:
			s.h.Sends[i].TxnOutcome = TxnAborted
		}
	}
	p.txn, p.sends, p.parts = "", nil, nil
}

// valueTxn finds a value's transaction.
func (s *sim) valueTxn(v string) string { return s.txnOf[v] }

func (s *sim) limit(l *simLog, rc bool) int64 {
	lim := int64(len(l.recs))
	if rc {
		for _, first := range l.open {
			if first < lim {
				lim = first
			}
		}
	}
	return lim
}

// fetch reads up to max records of partition part from pos.
func (s *sim) fetch(part int, pos int64, rc bool, max int) ([]Record, int64) {
	l := s.logs[part]
	lim := s.limit(l, rc)
	var out []Record
	for ; pos < lim && len(out) < max; pos++ {
		r := l.recs[pos]
		if r.Control || (rc && l.aborted[pos]) {
			continue
		}
		out = append(out, r)
	}
	return out, pos
}

func (s *sim) poll(c *simCons, part, limit int) {
	_, start, end := s.window()
	if start <= c.lastEnd { // one consumer's polls do not overlap
		start = c.lastEnd + 1
		end = max(end, start)
	}
	c.lastEnd = end
	rs, pos := s.fetch(part, c.pos[part], c.rc, limit)
	c.pos[part] = pos
	s.h.Polls = append(s.h.Polls, Poll{Consumer: c.name, Mode: Assign, ReadCommitted: c.rc, Topic: simTopic, Partition: int32(part),
		Records: rs, Start: start, End: end, HW: int64(len(s.logs[part].recs))})
}

func (s *sim) groupPoll() {
	part := s.rng.Intn(len(s.logs))
	rc := s.rng.Intn(2) == 0
	_, start, end := s.window()
	from := int64(s.rng.Intn(len(s.logs[part].recs) + 1))
	rs, _ := s.fetch(part, from, rc, 1+s.rng.Intn(8))
	s.h.Polls = append(s.h.Polls, Poll{Consumer: fmt.Sprintf("g%d", s.now), Mode: Group, ReadCommitted: rc, Topic: simTopic,
		Partition: int32(part), Records: rs, Start: start, End: end, HW: int64(len(s.logs[part].recs))})
}

func (s *sim) groupOffsets() {
	_, start, end := s.window()
	if s.rng.Intn(2) == 0 {
		s.h.OffsetFetches = append(s.h.OffsetFetches, OffsetFetch{Group: "g", Topic: simTopic, Offset: s.offset, Start: start, End: end})
		return
	}
	s.nval++ // distinct committed offsets keep witnesses readable
	cm := OffsetCommit{Group: "g", Topic: simTopic, Offset: int64(s.nval), Start: start, End: end}
	switch r := s.rng.Intn(20); {
	case r == 0:
		cm.Outcome = Failed
	case r == 1:
		cm.Outcome = Unknown
	case r == 2:
		cm.Outcome = Unknown
		s.offset = cm.Offset
	default:
		cm.Outcome = Acked
		s.offset = cm.Offset
	}
	s.h.Commits = append(s.h.Commits, cm)
}

// simulate returns a correct history of about ops operations.
func simulate(seed int64, ops int) History {
	s := &sim{rng: rand.New(rand.NewSource(seed)), offset: -1, txnOf: map[string]string{}}
	nparts := 1 + s.rng.Intn(3)
	for i := 0; i < nparts; i++ {
		s.logs = append(s.logs, &simLog{open: map[string]int64{}, aborted: map[int64]bool{}})
	}
	for i := 0; i < 3; i++ {
		s.prods = append(s.prods, &simProd{name: fmt.Sprintf("p%d", i)})
	}
	for i := 0; i < 3; i++ {
		s.cons = append(s.cons, &simCons{name: fmt.Sprintf("c%d", i), rc: i%2 == 0, pos: make([]int64, nparts)})
	}
	for i := 0; i < ops; i++ {
		switch r := s.rng.Intn(20); {
		case r < 9:
			p := s.prods[s.rng.Intn(len(s.prods))]
			if p.txn == "" && s.rng.Intn(4) == 0 {
				s.ntxn++
				p.txn, p.parts = fmt.Sprintf("T%d", s.ntxn), map[int]bool{}
			}
			s.send(p)
			if p.txn != "" && s.rng.Intn(3) == 0 {
				s.endTxn(p)
			}
		case r < 16:
			s.poll(s.cons[s.rng.Intn(len(s.cons))], s.rng.Intn(nparts), 1+s.rng.Intn(8))
		case r < 18:
			s.groupPoll()
		default:
			s.groupOffsets()
		}
	}
	for _, p := range s.prods {
		if p.txn != "" {
			s.endTxn(p)
		}
	}
	for _, c := range s.cons { // final drain
		for part := range s.logs {
			for c.pos[part] < int64(len(s.logs[part].recs)) {
				s.poll(c, part, 50)
			}
		}
	}
	for part, l := range s.logs {
		hw := int64(len(l.recs))
		lag := l.recs[:s.rng.Intn(len(l.recs)+1)]
		for _, r := range []struct {
			id   string
			recs []Record
		}{{"r1", l.recs}, {"r2", l.recs}, {"r3", lag}} {
			s.h.Dumps = append(s.h.Dumps, Dump{Replica: r.id, Topic: simTopic, Partition: int32(part),
				Records: append([]Record(nil), r.recs...), HW: hw, Leader: r.id == "r1"})
		}
	}
	return s.h
}

func clone(h History) History {
	c := History{
		Sends:         append([]Send(nil), h.Sends...),
		Polls:         append([]Poll(nil), h.Polls...),
		Dumps:         append([]Dump(nil), h.Dumps...),
		Commits:       append([]OffsetCommit(nil), h.Commits...),
		OffsetFetches: append([]OffsetFetch(nil), h.OffsetFetches...),
	}
	for i := range c.Polls {
		c.Polls[i].Records = append([]Record(nil), c.Polls[i].Records...)
	}
	for i := range c.Dumps {
		c.Dumps[i].Records = append([]Record(nil), c.Dumps[i].Records...)
	}
	return c
}

var simOpts = Options{MinISR: 2}

func TestRandomCorrectHistories(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 30
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		h := simulate(seed, 400)
		if r := Check(h, simOpts); !r.OK() {
			t.Fatalf("SEED=%d: correct history reported anomalies:\n%s", seed, r)
		}
	}
}

// helpers for faults

func sendOf(h *History, v string) *Send {
	for i := range h.Sends {
		if h.Sends[i].Value == v {
			return &h.Sends[i]
		}
	}
	return nil
}

func dropValue(rs []Record, v string) []Record {
	out := rs[:0]
	for _, r := range rs {
		if r.Control || r.Value != v {
			out = append(out, r)
		}
	}
	return out
}

func plainAcked(s *Send) bool { return s.Outcome == Acked && s.Txn == "" }

type fault struct {
	kind  Kind
	apply func(h *History, rng *rand.Rand) bool // false if the history offers no place for it
}

func removeEverywhere(h *History, v string, fromPolls bool, dumps func(d *Dump) bool) {
	if fromPolls {
		for i := range h.Polls {
			h.Polls[i].Records = dropValue(h.Polls[i].Records, v)
		}
	}
	for i := range h.Dumps {
		if dumps(&h.Dumps[i]) {
			h.Dumps[i].Records = dropValue(h.Dumps[i].Records, v)
		}
	}
}

func pick[T any](rng *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[rng.Intn(len(xs))], true
}

var faults = []fault{
	{LostWrite, func(h *History, rng *rand.Rand) bool {
		maxPolled := map[int32]int64{}
		for _, p := range h.Polls {
			for _, r := range p.Records {
				if r.Offset > maxPolled[p.Partition] {
					maxPolled[p.Partition] = r.Offset
				}
			}
		}
		var cands []string
		for i := range h.Sends {
			if s := &h.Sends[i]; plainAcked(s) && s.Offset < maxPolled[s.Partition] {
				cands = append(cands, s.Value)
			}
		}
		v, ok := pick(rng, cands)
		if ok {
			removeEverywhere(h, v, true, func(*Dump) bool { return true })
		}
		return ok
	}},
	{Unseen, func(h *History, rng *rand.Rand) bool {
		var cands []string
		for i := range h.Sends {
			if plainAcked(&h.Sends[i]) {
				cands = append(cands, h.Sends[i].Value)
			}
		}
		v, ok := pick(rng, cands)
		if ok {
			removeEverywhere(h, v, true, func(d *Dump) bool { return d.Leader })
		}
		return ok
	}},
	{InconsistentOffset, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Dumps)) {
			d := &h.Dumps[i]
			for j := 1; d.Leader && j < len(d.Records); j++ {
				a, b := &d.Records[j-1], &d.Records[j]
				if !a.Control && !b.Control && sendOf(h, a.Value).Outcome == Acked {
					a.Value, b.Value = b.Value, a.Value
					return true
				}
			}
		}
		return false
	}},
	{Duplicate, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Dumps)) {
			d := &h.Dumps[i]
			for _, r := range d.Records {
				if d.Leader && !r.Control {
					d.Records = append(d.Records, Record{Offset: int64(len(d.Records)) + 100, Value: r.Value})
					return true
				}
			}
		}
		return false
	}},
	{AbortedRead, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Sends)) {
			s := h.Sends[i]
			if s.Outcome == Acked && s.Txn != "" && s.TxnOutcome == TxnAborted {
				h.Polls = append(h.Polls, Poll{Consumer: "x", Mode: Group, ReadCommitted: true, Topic: s.Topic, Partition: s.Partition,
					Records: []Record{{Offset: s.Offset, Value: s.Value}}, Start: 1 << 40, End: 1<<40 + 1, HW: 1 << 40})
				return true
			}
		}
		return false
	}},
	{Unexpected, func(h *History, rng *rand.Rand) bool {
		h.Polls = append(h.Polls, Poll{Consumer: "x", Mode: Group, Topic: simTopic,
			Records: []Record{{Offset: 0, Value: "ghost"}}, Start: 1 << 40, End: 1<<40 + 1, HW: 1 << 40})
		return true
	}},
	{PollSkip, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Polls)) {
			p := &h.Polls[i]
			if p.Mode == Assign && len(p.Records) >= 3 && plainAcked(sendOf(h, p.Records[1].Value)) {
				p.Records = append(p.Records[:1], p.Records[2:]...)
				return true
			}
		}
		return false
	}},
	{NonMonotonicPoll, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Polls)) {
			if rs := h.Polls[i].Records; len(rs) >= 2 {
				rs[0], rs[len(rs)-1] = rs[len(rs)-1], rs[0]
				return true
			}
		}
		return false
	}},
	{NonMonotonicSend, func(h *History, rng *rand.Rand) bool {
		last := map[string]int{}
		for _, i := range rng.Perm(len(h.Sends)) {
			s := &h.Sends[i]
			if s.Outcome != Acked {
				continue
			}
			k := fmt.Sprint(s.Producer, s.Partition)
			if j, ok := last[k]; ok {
				h.Sends[j].Offset, s.Offset = s.Offset, h.Sends[j].Offset
				return true
			}
			last[k] = i
		}
		return false
	}},
	{RealTimeOrder, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Sends)) {
			a := &h.Sends[i]
			if a.Outcome != Acked {
				continue
			}
			for j := range h.Sends {
				b := &h.Sends[j]
				if b.Outcome == Acked && b.Partition == a.Partition && a.End < b.Start && a.Offset < b.Offset {
					a.Offset, b.Offset = b.Offset, a.Offset
					return true
				}
			}
		}
		return false
	}},
	{TruncatedRead, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Polls)) {
			if rs := h.Polls[i].Records; len(rs) > 0 {
				v := rs[len(rs)-1].Value
				removeEverywhere(h, v, false, func(d *Dump) bool { return d.Leader })
				return true
			}
		}
		return false
	}},
	{ReadPastHW, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Polls)) {
			if rs := h.Polls[i].Records; len(rs) > 0 {
				h.Polls[i].HW = rs[len(rs)-1].Offset
				return true
			}
		}
		return false
	}},
	{ReplicaDivergence, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Dumps)) {
			if d := &h.Dumps[i]; !d.Leader && len(d.Records) > 0 {
				r := &d.Records[rng.Intn(len(d.Records))]
				r.Value, r.Control = "diverged", false
				return true
			}
		}
		return false
	}},
	{UnderReplicated, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.Sends)) {
			if s := h.Sends[i]; s.Outcome == Acked {
				removeEverywhere(h, s.Value, false, func(d *Dump) bool { return !d.Leader })
				return true
			}
		}
		return false
	}},
	{CommittedOffsetRegression, func(h *History, rng *rand.Rand) bool {
		for _, i := range rng.Perm(len(h.OffsetFetches)) {
			f := &h.OffsetFetches[i]
			for _, c := range h.Commits {
				if c.Outcome == Acked && c.End < f.Start {
					f.Offset = -1
					return true
				}
			}
		}
		return false
	}},
}

func TestRandomInjectedFaults(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for _, f := range faults {
		applied := 0
		for seed := int64(1); seed <= int64(seeds); seed++ {
			h := clone(simulate(seed, 300))
			rng := rand.New(rand.NewSource(seed))
			if !f.apply(&h, rng) {
				continue
			}
			applied++
			if r := Check(h, simOpts); !r.Has(f.kind) {
				t.Fatalf("SEED=%d fault %s not reported; got:\n%s", seed, f.kind, r)
			}
		}
		if applied < seeds/2 {
			t.Errorf("fault %s applicable to only %d of %d seeds", f.kind, applied, seeds)
		}
	}
}

func TestLargeHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("large history")
	}
	h := simulate(7, 300_000)
	ops := len(h.Sends) + len(h.Polls) + len(h.Commits) + len(h.OffsetFetches)
	for _, d := range h.Dumps {
		ops += len(d.Records)
	}
	t0 := time.Now()
	r := Check(h, simOpts)
	t.Logf("%d sends, %d polls, %d dump records... %d items checked in %v", len(h.Sends), len(h.Polls), ops-len(h.Sends)-len(h.Polls), ops, time.Since(t0))
	if !r.OK() {
		t.Fatalf("correct history reported anomalies:\n%s", r)
	}
}
