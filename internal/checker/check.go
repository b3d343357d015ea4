package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Report is the result of Check.
type Report struct {
	// Anomalies found, grouped by the order checks run, at most
	// Options.MaxPerKind of each kind.
	Anomalies []Anomaly
	// Counts is the number of anomalies found per kind, including any
	// dropped from Anomalies by the bound.
	Counts map[Kind]int
}

// OK reports whether no anomaly was found.
func (r Report) OK() bool { return len(r.Counts) == 0 }

// Has reports whether at least one anomaly of kind k was found.
func (r Report) Has(k Kind) bool { return r.Counts[k] > 0 }

// String renders the counts and the first anomalies of each kind with
// their witnesses, for a test failure message.
func (r Report) String() string {
	if r.OK() {
		return "checker: no anomalies"
	}
	var b strings.Builder
	b.WriteString("checker: anomalies:")
	for _, k := range Kinds {
		if n := r.Counts[k]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", k, n)
		}
	}
	b.WriteByte('\n')
	shown := map[Kind]int{}
	const perKind = 5
	for _, a := range r.Anomalies {
		if shown[a.Kind] >= perKind {
			continue
		}
		shown[a.Kind]++
		fmt.Fprintf(&b, "- %s %s/%d", a.Kind, a.Topic, a.Partition)
		if a.Offset >= 0 {
			fmt.Fprintf(&b, " offset=%d", a.Offset)
		}
		if a.Value != "" {
			fmt.Fprintf(&b, " value=%q", a.Value)
		}
		b.WriteByte('\n')
		for _, w := range a.Witness {
			b.WriteString("    ")
			b.WriteString(w)
			b.WriteByte('\n')
		}
	}
	for _, k := range Kinds {
		if n := r.Counts[k]; n > shown[k] {
			fmt.Fprintf(&b, "  (%d more %s not shown)\n", n-shown[k], k)
		}
	}
	return b.String()
}

type tp struct {
	topic     string
	partition int32
}

func (t tp) String() string { return fmt.Sprintf("%s/%d", t.topic, t.partition) }

func tpLess(a, b tp) bool {
	if a.topic != b.topic {
		return a.topic < b.topic
	}
	return a.partition < b.partition
}

// source kinds of an observation of (offset, value).
const (
	srcSend uint8 = iota + 1
	srcPoll
	srcDump
)

// src locates one observation: a send, a record of a poll, a record of a
// dump. Descriptions are formatted only when an anomaly is reported.
type src struct {
	kind uint8
	idx  int32 // index into Sends, Polls or Dumps
	rec  int32 // record index within a poll or dump
}

// part is the per-partition index.
type part struct {
	key     tp
	dumps   []int // indexes into History.Dumps
	leader  int   // index into History.Dumps, -1 if none
	hw      int64 // final high watermark, -1 if unknown
	leadLog map[int64]int32
	// required offsets (sorted) a read_uncommitted / read_committed
	// consumer must not skip, from the final leader's log.
	reqRU, reqRC []int64
	maxPolled    int64
	offVal       map[int64]string
	offSrc       map[int64]src
	reported     map[string]bool
}

const controlValue = "\x00control"

type checker struct {
	h       *History
	opt     Options
	rep     Report
	parts   map[tp]*part
	order   []tp
	byValue map[string]int32 // value → index into Sends (first)
	read    map[string]bool  // values returned by some poll
	valPos  map[string]src   // first observation of a value, for duplicates
	valTP   map[string]tp
	valOff  map[string]int64
	dupSeen map[string]bool
	dumpIdx []map[int64]int32 // per dump, offset → record index, built on demand
}

// Check verifies h and returns every anomaly found.
func Check(h History, opt Options) Report {
	if opt.MaxPerKind == 0 {
		opt.MaxPerKind = 1000
	}
	c := &checker{
		h: &h, opt: opt,
		rep:     Report{Counts: map[Kind]int{}},
		parts:   map[tp]*part{},
		byValue: make(map[string]int32, len(h.Sends)),
		read:    map[string]bool{},
		valPos:  map[string]src{},
		valTP:   map[string]tp{},
		valOff:  map[string]int64{},
		dupSeen: map[string]bool{},
	}
	c.index()
	c.checkObservations()
	c.checkPolls()
	c.checkSends()
	c.checkDurability()
	c.checkReplicas()
	c.checkGroupOffsets()
	c.checkRefusedCommits()
	return c.rep
}

func (c *checker) add(a Anomaly) {
	c.rep.Counts[a.Kind]++
	if c.opt.MaxPerKind > 0 && c.rep.Counts[a.Kind] > c.opt.MaxPerKind {
		return
	}
	c.rep.Anomalies = append(c.rep.Anomalies, a)
}

func (c *checker) part(t tp) *part {
	p := c.parts[t]
	if p == nil {
		p = &part{key: t, leader: -1, hw: -1, maxPolled: -1,
			offVal: map[int64]string{}, offSrc: map[int64]src{}, reported: map[string]bool{}}
		c.parts[t] = p
		c.order = append(c.order, t)
	}
	return p
}

// aborted reports whether a read_committed consumer may legitimately never
// see the value (its send failed, or its transaction aborted or was never
// confirmed).
func (c *checker) mayBeInvisibleRC(v string) bool {
	i, ok := c.byValue[v]
	if !ok {
		return false
	}
	s := &c.h.Sends[i]
	return s.Outcome == Failed || (s.Txn != "" && s.TxnOutcome != TxnCommitted)
}

func (c *checker) index() {
	h := c.h
	for i := range h.Sends {
		s := &h.Sends[i]
		if _, dup := c.byValue[s.Value]; !dup {
			c.byValue[s.Value] = int32(i)
		}
		c.part(tp{s.Topic, s.Partition})
	}
	for i := range h.Polls {
		p := &h.Polls[i]
		pp := c.part(tp{p.Topic, p.Partition})
		for _, r := range p.Records {
			c.read[r.Value] = true
			if r.Offset > pp.maxPolled {
				pp.maxPolled = r.Offset
			}
		}
	}
	for i := range h.Dumps {
		d := &h.Dumps[i]
		p := c.part(tp{d.Topic, d.Partition})
		p.dumps = append(p.dumps, i)
		if d.Leader && p.leader < 0 {
			p.leader = i
			p.hw = d.HW
		}
	}
	sort.Slice(c.order, func(i, j int) bool { return tpLess(c.order[i], c.order[j]) })
	for _, t := range c.order {
		p := c.parts[t]
		if len(p.dumps) == 0 {
			continue
		}
		if p.leader < 0 {
			best, bestEnd := -1, int64(math.MinInt64)
			for _, di := range p.dumps {
				d := &h.Dumps[di]
				end := d.LogStart - 1
				if n := len(d.Records); n > 0 {
					end = d.Records[n-1].Offset
				}
				if best < 0 || end > bestEnd || (end == bestEnd && d.Replica < h.Dumps[best].Replica) {
					best, bestEnd = di, end
				}
				if d.HW > p.hw {
					p.hw = d.HW
				}
			}
			p.leader = best
		}
		ld := &h.Dumps[p.leader]
		p.leadLog = make(map[int64]int32, len(ld.Records))
		for ri, r := range ld.Records {
			if r.Offset < ld.LogStart {
				continue
			}
			p.leadLog[r.Offset] = int32(ri)
			if r.Control {
				continue
			}
			p.reqRU = append(p.reqRU, r.Offset)
			if !c.mayBeInvisibleRC(r.Value) {
				p.reqRC = append(p.reqRC, r.Offset)
			}
		}
		sort.Slice(p.reqRU, func(i, j int) bool { return p.reqRU[i] < p.reqRU[j] })
		sort.Slice(p.reqRC, func(i, j int) bool { return p.reqRC[i] < p.reqRC[j] })
	}
}

func span(start, end int64) string { return fmt.Sprintf("[t=%d..%d]", start, end) }

func (c *checker) descSend(i int32) string {
	s := &c.h.Sends[i]
	out := fmt.Sprintf("send %s#%d %s/%d value=%q %s", s.Producer, s.Seq, s.Topic, s.Partition, s.Value, s.Outcome)
	if s.Outcome == Acked {
		out += fmt.Sprintf("@%d", s.Offset)
	}
	if s.Txn != "" {
		out += fmt.Sprintf(" txn=%s(%s)", s.Txn, s.TxnOutcome)
	}
	return out + " " + span(s.Start, s.End)
}

func (c *checker) descPoll(i int32) string {
	p := &c.h.Polls[i]
	mode := "assign"
	if p.Mode == Group {
		mode = "group"
	}
	iso := "read_uncommitted"
	if p.ReadCommitted {
		iso = "read_committed"
	}
	var offs string
	if n := len(p.Records); n > 0 {
		offs = fmt.Sprintf("%d records, offsets %d..%d", n, p.Records[0].Offset, p.Records[n-1].Offset)
	} else {
		offs = "no records"
	}
	return fmt.Sprintf("poll #%d %s (%s, %s) %s/%d %s hw=%d %s", i, p.Consumer, mode, iso, p.Topic, p.Partition, offs, p.HW, span(p.Start, p.End))
}

func (c *checker) desc(s src) string {
	switch s.kind {
	case srcSend:
		return c.descSend(s.idx)
	case srcPoll:
		r := c.h.Polls[s.idx].Records[s.rec]
		return fmt.Sprintf("read offset=%d value=%q in %s", r.Offset, r.Value, c.descPoll(s.idx))
	default:
		d := &c.h.Dumps[s.idx]
		r := d.Records[s.rec]
		v := fmt.Sprintf("%q", r.Value)
		if r.Control {
			v = "<control>"
		}
		lead := ""
		if d.Leader {
			lead = " (leader)"
		}
		return fmt.Sprintf("dump of replica %s%s %s/%d offset=%d value=%s hw=%d", d.Replica, lead, d.Topic, d.Partition, r.Offset, v, d.HW)
	}
}

// observe records that offset off of partition p held value v according
// to s, reporting inconsistent offsets, duplicates and unexpected values.
func (c *checker) observe(p *part, off int64, v string, s src) {
	if prev, ok := p.offVal[off]; !ok {
		p.offVal[off] = v
		p.offSrc[off] = s
	} else if prev != v {
		key := fmt.Sprintf("%d\x00%s", off, v)
		if !p.reported[key] {
			p.reported[key] = true
			shown := v
			if v == controlValue {
				shown = "<control>"
			}
			c.add(Anomaly{Kind: InconsistentOffset, Topic: p.key.topic, Partition: p.key.partition, Offset: off, Value: shown,
				Witness: []string{c.desc(p.offSrc[off]), c.desc(s)}})
		}
	}
	if v == controlValue {
		return
	}
	if s.kind != srcSend {
		si, ok := c.byValue[v]
		if !ok || c.h.Sends[si].Topic != p.key.topic || c.h.Sends[si].Partition != p.key.partition {
			if key := "u\x00" + v; !p.reported[key] {
				p.reported[key] = true
				w := []string{c.desc(s)}
				if ok {
					w = append(w, "sent elsewhere: "+c.descSend(si))
				} else {
					w = append(w, "no send has this value")
				}
				c.add(Anomaly{Kind: Unexpected, Topic: p.key.topic, Partition: p.key.partition, Offset: off, Value: v, Witness: w})
			}
		}
	}
	if ft, ok := c.valTP[v]; !ok {
		c.valTP[v] = p.key
		c.valOff[v] = off
		c.valPos[v] = s
	} else if (ft != p.key || c.valOff[v] != off) && !c.dupSeen[v] {
		c.dupSeen[v] = true
		c.add(Anomaly{Kind: Duplicate, Topic: p.key.topic, Partition: p.key.partition, Offset: off, Value: v,
			Witness: []string{c.desc(c.valPos[v]), c.desc(s)}})
	}
}

// checkObservations builds offset → value from acknowledged sends, polls
// and the final leader logs; it also reports aborted reads.
func (c *checker) checkObservations() {
	h := c.h
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome == Acked {
			c.observe(c.parts[tp{s.Topic, s.Partition}], s.Offset, s.Value, src{srcSend, int32(i), 0})
		}
	}
	for i := range h.Polls {
		pl := &h.Polls[i]
		p := c.parts[tp{pl.Topic, pl.Partition}]
		for ri, r := range pl.Records {
			c.observe(p, r.Offset, r.Value, src{srcPoll, int32(i), int32(ri)})
			si, ok := c.byValue[r.Value]
			if !ok {
				continue
			}
			s := &h.Sends[si]
			if s.Outcome == Failed || (pl.ReadCommitted && s.Txn != "" && s.TxnOutcome == TxnAborted) {
				why := "the send failed"
				if s.Outcome != Failed {
					why = "read_committed poll returned a record of an aborted transaction"
				}
				c.add(Anomaly{Kind: AbortedRead, Topic: pl.Topic, Partition: pl.Partition, Offset: r.Offset, Value: r.Value,
					Witness: []string{why, c.desc(src{srcPoll, int32(i), int32(ri)}), c.descSend(si)}})
			}
		}
	}
	for _, t := range c.order {
		p := c.parts[t]
		if p.leader < 0 {
			continue
		}
		for ri, r := range h.Dumps[p.leader].Records {
			v := r.Value
			if r.Control {
				v = controlValue
			}
			c.observe(p, r.Offset, v, src{srcDump, int32(p.leader), int32(ri)})
		}
	}
	// Values held only by non-leader replicas may still be unexpected.
	for di := range h.Dumps {
		d := &h.Dumps[di]
		p := c.parts[tp{d.Topic, d.Partition}]
		if p.leader == di {
			continue
		}
		for ri, r := range d.Records {
			if r.Control {
				continue
			}
			si, ok := c.byValue[r.Value]
			if ok && h.Sends[si].Topic == d.Topic && h.Sends[si].Partition == d.Partition {
				continue
			}
			if key := "u\x00" + r.Value; !p.reported[key] {
				p.reported[key] = true
				c.add(Anomaly{Kind: Unexpected, Topic: d.Topic, Partition: d.Partition, Offset: r.Offset, Value: r.Value,
					Witness: []string{c.desc(src{srcDump, int32(di), int32(ri)}), "no send to this partition has this value"}})
			}
		}
	}
}

// firstBetween returns the smallest offset in sorted offs strictly between
// lo and hi.
func firstBetween(offs []int64, lo, hi int64) (int64, bool) {
	i := sort.Search(len(offs), func(i int) bool { return offs[i] > lo })
	if i < len(offs) && offs[i] < hi {
		return offs[i], true
	}
	return 0, false
}

// checkStep judges the step from prev to cur (offsets read consecutively
// by one consumer); a and b describe the two reads.
func (c *checker) checkStep(p *part, rc bool, prev, cur int64, a, b src) {
	if cur <= prev {
		c.add(Anomaly{Kind: NonMonotonicPoll, Topic: p.key.topic, Partition: p.key.partition, Offset: cur,
			Value:   c.h.Polls[b.idx].Records[b.rec].Value,
			Witness: []string{c.desc(a), "then " + c.desc(b)}})
		return
	}
	if p.leader < 0 {
		return
	}
	req := p.reqRU
	if rc {
		req = p.reqRC
	}
	if off, ok := firstBetween(req, prev, cur); ok {
		r := c.h.Dumps[p.leader].Records[p.leadLog[off]]
		c.add(Anomaly{Kind: PollSkip, Topic: p.key.topic, Partition: p.key.partition, Offset: off, Value: r.Value,
			Witness: []string{c.desc(a), "then " + c.desc(b), "skipped " + c.desc(src{srcDump, int32(p.leader), p.leadLog[off]})}})
	}
}

// checkPolls checks order and skips within polls and across consecutive
// polls of assign-mode consumers, reads past the high watermark and reads
// absent from the final leader's log.
func (c *checker) checkPolls() {
	h := c.h
	type cons struct {
		name string
		t    tp
		rc   bool
	}
	seqs := map[cons][]int32{}
	var keys []cons
	for i := range h.Polls {
		pl := &h.Polls[i]
		t := tp{pl.Topic, pl.Partition}
		p := c.parts[t]
		for ri, r := range pl.Records {
			s := src{srcPoll, int32(i), int32(ri)}
			if ri > 0 {
				c.checkStep(p, pl.ReadCommitted, pl.Records[ri-1].Offset, r.Offset, src{srcPoll, int32(i), int32(ri - 1)}, s)
			}
			if pl.HW >= 0 && r.Offset >= pl.HW {
				c.add(Anomaly{Kind: ReadPastHW, Topic: pl.Topic, Partition: pl.Partition, Offset: r.Offset, Value: r.Value,
					Witness: []string{c.desc(s)}})
			}
			if p.leader >= 0 {
				ld := &h.Dumps[p.leader]
				if r.Offset >= ld.LogStart {
					li, ok := p.leadLog[r.Offset]
					if !ok || ld.Records[li].Control || ld.Records[li].Value != r.Value {
						w := []string{c.desc(s)}
						if ok {
							w = append(w, "final leader holds "+c.desc(src{srcDump, int32(p.leader), li}))
						} else {
							w = append(w, fmt.Sprintf("final leader %s has no offset %d", ld.Replica, r.Offset))
						}
						c.add(Anomaly{Kind: TruncatedRead, Topic: pl.Topic, Partition: pl.Partition, Offset: r.Offset, Value: r.Value, Witness: w})
					}
				}
			}
		}
		if pl.Mode == Assign && len(pl.Records) > 0 {
			k := cons{pl.Consumer, t, pl.ReadCommitted}
			if _, ok := seqs[k]; !ok {
				keys = append(keys, k)
			}
			seqs[k] = append(seqs[k], int32(i))
		}
	}
	for _, k := range keys {
		idx := seqs[k]
		sort.SliceStable(idx, func(a, b int) bool { return h.Polls[idx[a]].Start < h.Polls[idx[b]].Start })
		p := c.parts[k.t]
		for j := 1; j < len(idx); j++ {
			a, b := &h.Polls[idx[j-1]], &h.Polls[idx[j]]
			last := int32(len(a.Records) - 1)
			c.checkStep(p, k.rc, a.Records[last].Offset, b.Records[0].Offset,
				src{srcPoll, idx[j-1], last}, src{srcPoll, idx[j], 0})
		}
	}
}

// checkSends checks per-producer order and real-time order of acknowledged
// sends.
func (c *checker) checkSends() {
	h := c.h
	type prodKey struct {
		producer string
		t        tp
	}
	byProd := map[prodKey][]int32{}
	var prodKeys []prodKey
	byTP := map[tp][]int32{}
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome != Acked {
			continue
		}
		t := tp{s.Topic, s.Partition}
		k := prodKey{s.Producer, t}
		if _, ok := byProd[k]; !ok {
			prodKeys = append(prodKeys, k)
		}
		byProd[k] = append(byProd[k], int32(i))
		byTP[t] = append(byTP[t], int32(i))
	}
	for _, k := range prodKeys {
		idx := byProd[k]
		sort.SliceStable(idx, func(a, b int) bool { return h.Sends[idx[a]].Seq < h.Sends[idx[b]].Seq })
		maxAt := int32(-1)
		for _, i := range idx {
			s := &h.Sends[i]
			if maxAt >= 0 && s.Offset < h.Sends[maxAt].Offset {
				c.add(Anomaly{Kind: NonMonotonicSend, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Value: s.Value,
					Witness: []string{c.descSend(maxAt), "later send landed lower: " + c.descSend(i)}})
			}
			if maxAt < 0 || s.Offset > h.Sends[maxAt].Offset {
				maxAt = i
			}
		}
	}
	for _, t := range c.order {
		idx := byTP[t]
		if len(idx) < 2 {
			continue
		}
		byEnd := append([]int32(nil), idx...)
		sort.SliceStable(byEnd, func(a, b int) bool { return h.Sends[byEnd[a]].End < h.Sends[byEnd[b]].End })
		byStart := idx
		sort.SliceStable(byStart, func(a, b int) bool { return h.Sends[byStart[a]].Start < h.Sends[byStart[b]].Start })
		j, maxAt := 0, int32(-1)
		for _, i := range byStart {
			s := &h.Sends[i]
			for j < len(byEnd) && h.Sends[byEnd[j]].End < s.Start {
				e := byEnd[j]
				if maxAt < 0 || h.Sends[e].Offset > h.Sends[maxAt].Offset {
					maxAt = e
				}
				j++
			}
			if maxAt >= 0 && s.Offset < h.Sends[maxAt].Offset {
				c.add(Anomaly{Kind: RealTimeOrder, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Value: s.Value,
					Witness: []string{c.descSend(maxAt), "started after that ack, landed lower: " + c.descSend(i)}})
			}
		}
	}
}

// checkDurability reports lost, unseen and under-replicated acknowledged
// records.
func (c *checker) checkDurability() {
	h := c.h
	inDump := map[string]bool{}
	inLeader := map[string]bool{}
	for di := range h.Dumps {
		d := &h.Dumps[di]
		p := c.parts[tp{d.Topic, d.Partition}]
		for _, r := range d.Records {
			if r.Control {
				continue
			}
			inDump[r.Value] = true
			if p.leader == di {
				inLeader[r.Value] = true
			}
		}
	}
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome != Acked {
			continue
		}
		p := c.parts[tp{s.Topic, s.Partition}]
		if c.opt.MinISR > 0 && len(p.dumps) > 0 {
			held := 0
			var missing []string
			for _, di := range p.dumps {
				d := &h.Dumps[di]
				if s.Offset < d.LogStart || c.dumpHolds(di, s.Offset, s.Value) {
					held++
				} else {
					missing = append(missing, d.Replica)
				}
			}
			if held < c.opt.MinISR {
				c.add(Anomaly{Kind: UnderReplicated, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Value: s.Value,
					Witness: []string{c.descSend(int32(i)), fmt.Sprintf("held by %d of %d replicas (min.insync.replicas=%d); missing on %s",
						held, len(p.dumps), c.opt.MinISR, strings.Join(missing, ","))}})
			}
		}
		if s.Txn != "" && s.TxnOutcome != TxnCommitted {
			continue
		}
		if c.read[s.Value] {
			continue
		}
		trimmed := p.leader >= 0 && s.Offset < h.Dumps[p.leader].LogStart
		if trimmed {
			continue
		}
		if !inDump[s.Value] && s.Offset < p.maxPolled {
			c.add(Anomaly{Kind: LostWrite, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Value: s.Value,
				Witness: []string{c.descSend(int32(i)), fmt.Sprintf("never read, in no final dump; polls reached offset %d", p.maxPolled)}})
			continue
		}
		if !inLeader[s.Value] {
			w := []string{c.descSend(int32(i)), "never read"}
			if p.leader >= 0 {
				w = append(w, "absent from the final leader "+h.Dumps[p.leader].Replica)
			}
			c.add(Anomaly{Kind: Unseen, Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Value: s.Value, Witness: w})
		}
	}
}

// dumpHolds reports whether dump di holds value v at offset off.
func (c *checker) dumpHolds(di int, off int64, v string) bool {
	if c.dumpIdx == nil {
		c.dumpIdx = make([]map[int64]int32, len(c.h.Dumps))
	}
	m := c.dumpIdx[di]
	d := &c.h.Dumps[di]
	if m == nil {
		m = make(map[int64]int32, len(d.Records))
		for ri, r := range d.Records {
			m[r.Offset] = int32(ri)
		}
		c.dumpIdx[di] = m
	}
	ri, ok := m[off]
	return ok && !d.Records[ri].Control && d.Records[ri].Value == v
}

// checkReplicas reports replicas that disagree below the final high
// watermark.
func (c *checker) checkReplicas() {
	h := c.h
	for _, t := range c.order {
		p := c.parts[t]
		if len(p.dumps) < 2 || p.hw <= 0 {
			continue
		}
		type ref struct {
			dump, rec int32
		}
		seen := map[int64]ref{}
		reported := map[int64]bool{}
		order := append([]int{p.leader}, p.dumps...)
		for n, di := range order {
			if n > 0 && di == p.leader {
				continue
			}
			d := &h.Dumps[di]
			for ri, r := range d.Records {
				if r.Offset >= p.hw || r.Offset < d.LogStart {
					continue
				}
				f, ok := seen[r.Offset]
				if !ok {
					seen[r.Offset] = ref{int32(di), int32(ri)}
					continue
				}
				o := h.Dumps[f.dump].Records[f.rec]
				if (o.Control != r.Control || (!r.Control && o.Value != r.Value)) && !reported[r.Offset] {
					reported[r.Offset] = true
					c.add(Anomaly{Kind: ReplicaDivergence, Topic: t.topic, Partition: t.partition, Offset: r.Offset, Value: r.Value,
						Witness: []string{fmt.Sprintf("final high watermark %d", p.hw),
							c.desc(src{srcDump, f.dump, f.rec}), c.desc(src{srcDump, int32(di), int32(ri)})}})
				}
			}
		}
	}
}

// checkGroupOffsets checks each (group, partition)'s committed offset as a
// linearizable register: a fetch must return the value of a commit that
// began before the fetch ended and that did not complete before the start
// of some commit that completed before the fetch began. Failed commits
// write nothing; commits of unknown outcome may take effect any time after
// they start. It is sufficient to test against the completed commit with
// the latest start.
func (c *checker) checkGroupOffsets() {
	h := c.h
	if len(h.OffsetFetches) == 0 {
		return
	}
	type key struct {
		group string
		t     tp
	}
	type reg struct {
		byEnd   []int32           // successful commits sorted by End
		maxStrt []int32           // prefix argmax of Start over byEnd
		byValue map[int64][]int32 // successful or unknown commits by offset
		failed  map[int64][]int32 // failed commits by offset, for witnesses
	}
	regs := map[key]*reg{}
	get := func(k key) *reg {
		r := regs[k]
		if r == nil {
			r = &reg{byValue: map[int64][]int32{}, failed: map[int64][]int32{}}
			regs[k] = r
		}
		return r
	}
	for i := range h.Commits {
		cm := &h.Commits[i]
		r := get(key{cm.Group, tp{cm.Topic, cm.Partition}})
		if cm.Outcome == Failed {
			r.failed[cm.Offset] = append(r.failed[cm.Offset], int32(i))
			continue
		}
		r.byValue[cm.Offset] = append(r.byValue[cm.Offset], int32(i))
		if cm.Outcome == Acked {
			r.byEnd = append(r.byEnd, int32(i))
		}
	}
	for _, r := range regs {
		sort.SliceStable(r.byEnd, func(a, b int) bool { return h.Commits[r.byEnd[a]].End < h.Commits[r.byEnd[b]].End })
		r.maxStrt = make([]int32, len(r.byEnd))
		for j, ci := range r.byEnd {
			r.maxStrt[j] = ci
			if j > 0 && h.Commits[r.maxStrt[j-1]].Start > h.Commits[ci].Start {
				r.maxStrt[j] = r.maxStrt[j-1]
			}
		}
	}
	descC := func(i int32) string {
		cm := &h.Commits[i]
		d := fmt.Sprintf("commit %s %s/%d offset=%d %s %s", cm.Group, cm.Topic, cm.Partition, cm.Offset, cm.Outcome, span(cm.Start, cm.End))
		if cm.Attempts > 0 {
			d += fmt.Sprintf(" in %d attempt(s) via nodes %v", cm.Attempts, cm.Brokers)
		}
		return d
	}
	for i := range h.OffsetFetches {
		f := &h.OffsetFetches[i]
		r := get(key{f.Group, tp{f.Topic, f.Partition}})
		n := sort.Search(len(r.byEnd), func(j int) bool { return h.Commits[r.byEnd[j]].End >= f.Start })
		latest := int32(-1)
		if n > 0 {
			latest = r.maxStrt[n-1]
		}
		ok := false
		if f.Offset < 0 && latest < 0 {
			ok = true
		}
		for _, wi := range r.byValue[f.Offset] {
			w := &h.Commits[wi]
			if w.Start >= f.End {
				continue
			}
			if latest >= 0 && w.Outcome == Acked && w.End < h.Commits[latest].Start {
				continue
			}
			ok = true
			break
		}
		if ok {
			continue
		}
		wit := []string{fmt.Sprintf("fetch %s %s/%d returned offset=%d %s", f.Group, f.Topic, f.Partition, f.Offset, span(f.Start, f.End))}
		if latest >= 0 {
			wit = append(wit, "after "+descC(latest)+" completed")
		}
		if ws := r.byValue[f.Offset]; len(ws) > 0 {
			wit = append(wit, "value written by "+descC(ws[len(ws)-1]))
		} else if fs := r.failed[f.Offset]; len(fs) > 0 {
			wit = append(wit, "no commit wrote this offset; a failed one carried it: "+descC(fs[len(fs)-1]))
		} else if f.Offset >= 0 {
			wit = append(wit, "no commit wrote this offset")
		}
		c.add(Anomaly{Kind: CommittedOffsetRegression, Topic: f.Topic, Partition: f.Partition, Offset: f.Offset, Witness: wit})
	}
}

// checkRefusedCommits looks for refused commits in the final
// __consumer_offsets. A commit is identified by its group, partition,
// offset and member (franz-go sends the member id as the commit
// metadata), so a logged record matches a refused commit only when no
// commit of that member with that offset was acknowledged or unknown.
func (c *checker) checkRefusedCommits() {
	h := c.h
	if len(h.OffsetsLog) == 0 {
		return
	}
	type id struct {
		group, member string
		t             tp
		offset        int64
	}
	logged := map[id]LoggedCommit{}
	for _, l := range h.OffsetsLog {
		logged[id{l.Group, l.Metadata, tp{l.Topic, l.Partition}, l.Offset}] = l
	}
	other := map[id]bool{}
	for i := range h.Commits {
		cm := &h.Commits[i]
		if cm.Outcome != Failed && cm.Member != "" {
			other[id{cm.Group, cm.Member, tp{cm.Topic, cm.Partition}, cm.Offset}] = true
		}
	}
	for i := range h.Commits {
		cm := &h.Commits[i]
		if cm.Outcome != Failed || cm.Member == "" {
			continue
		}
		k := id{cm.Group, cm.Member, tp{cm.Topic, cm.Partition}, cm.Offset}
		l, ok := logged[k]
		if !ok || other[k] {
			continue
		}
		via := ""
		if cm.Attempts > 0 {
			via = fmt.Sprintf(" in %d attempt(s) via nodes %v", cm.Attempts, cm.Brokers)
		}
		c.add(Anomaly{Kind: RefusedCommitWritten, Topic: cm.Topic, Partition: cm.Partition, Offset: cm.Offset, Witness: []string{
			fmt.Sprintf("commit %s %s/%d offset=%d by member %s refused %s%s", cm.Group, cm.Topic, cm.Partition, cm.Offset, cm.Member, span(cm.Start, cm.End), via),
			fmt.Sprintf("__consumer_offsets holds it at log offset %d (leader epoch %d)", l.LogOffset, l.Epoch),
		}})
		delete(logged, k) // one anomaly per record
	}
}
