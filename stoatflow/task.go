package stoatflow

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// tp names a topic partition.
type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return fmt.Sprintf("%s/%d", p.topic, p.partition) }

// task runs one sub-topology for one partition. Its fields are owned by
// the goroutine processing it in a round, and by the coordinator between
// rounds (commits, rewinds).
type task struct {
	app       *App
	sub       *subTopology
	partition int32
	id        string
	log       *slog.Logger

	procs   []*procCtx          // in graph order
	sources map[string]*procCtx // by topic
	stores  map[string]*storeHandle
	txns    map[*state.Engine]*state.Txn

	// queues hold fetched input not yet processed, per source partition.
	queues map[tp][]*kgo.Record
	// positions is the next offset to process per source partition;
	// committed what the last commit stored.
	positions map[tp]int64
	committed map[tp]int64

	streamTime int64
	current    struct {
		topic     string
		partition int32
		offset    int64
	}
	puncts []*punctuation
	caches []*changeCache // in graph order
	err    error          // the first processing error of the round

	inCounters map[string]prometheus.Counter // records-in per topic
	processed  int64

	mu       sync.Mutex // guards counters (read by /metrics)
	counters map[string]int64
}

type punctuation struct {
	interval time.Duration
	kind     PunctuationType
	next     int64 // stream time or wall time, ms
	fn       func(time.Time) error
	pc       *procCtx
}

// procCtx is one node instance inside a task.
type procCtx struct {
	task     *task
	node     *node
	proc     nodeProc
	children []*procCtx
}

func (pc *procCtx) forward(r record, child string) {
	t := pc.task
	for _, c := range pc.children {
		if child != "" && c.node.name != child {
			continue
		}
		if t.err != nil {
			return
		}
		if err := c.proc.process(r); err != nil && t.err == nil {
			t.err = fmt.Errorf("processor %s: %w", c.node.name, err)
		}
	}
}

func (pc *procCtx) schedule(iv time.Duration, kind PunctuationType, fn func(time.Time) error) {
	if iv <= 0 {
		pc.task.err = fmt.Errorf("processor %s: punctuation interval must be positive", pc.node.name)
		return
	}
	p := &punctuation{interval: iv, kind: kind, fn: fn, pc: pc}
	if kind == WallClockTime {
		p.next = time.Now().Add(iv).UnixMilli()
	} else {
		p.next = -1 // first fires once stream time is known
	}
	pc.task.puncts = append(pc.task.puncts, p)
}

func (pc *procCtx) store(name string) (AnyStore, error) {
	allowed := false
	for _, s := range pc.node.stores {
		allowed = allowed || s == name
	}
	h := pc.task.stores[name]
	if !allowed || h == nil {
		return nil, fmt.Errorf("processor %s is not connected to store %q (name it when adding the processor)", pc.node.name, name)
	}
	return h, nil
}

func (t *task) count(name string, n int64) {
	t.mu.Lock()
	t.counters[name] += n
	t.mu.Unlock()
	// Also into the App's metrics: a task's counters start over when an
	// abort rebuilds it, and a Prometheus counter must not go back.
	t.app.metrics.countTask(name, n)
}

// storeHandle is a task's view of one store partition.
type storeHandle struct {
	spec *storeSpec
	task *task
	part *state.Partition
	txn  *state.Txn
	// dirty holds the latest buffered value per key of this transaction
	// (nil: deleted), to be written to the changelog at commit.
	dirty map[string][]byte
	// clOffset is the highest changelog offset acknowledged for this
	// transaction's records (-1: none yet).
	clOffset int64
	topic    string
}

func (h *storeHandle) handle() *storeHandle { return h }

// get reads a key: this transaction's latest write of it first (a map
// lookup, much cheaper than the indexed batch), then the buffer over the
// committed state.
func (h *storeHandle) get(k []byte) ([]byte, bool, error) {
	if v, ok := h.dirty[string(k)]; ok {
		return v, v != nil, nil
	}
	return h.txn.Get(h.part, k)
}

// put buffers a write (v nil: delete).
func (h *storeHandle) put(k, v []byte) error {
	var err error
	if v == nil {
		err = h.txn.Delete(h.part, k)
	} else {
		err = h.txn.Put(h.part, k, v)
	}
	if err != nil {
		return err
	}
	if h.spec.changelog {
		h.dirty[string(k)] = v
	}
	h.task.app.metrics.pending[h.spec.name].Add(1)
	return nil
}

func (h *storeHandle) scan(lo, hi []byte, reverse bool, fn func(k, v []byte) bool) error {
	return h.txn.Scan(h.part, lo, hi, reverse, fn)
}

func prefixEnd(p []byte) []byte { return state.PrefixEnd(p) }

// newTask builds the processors of sub for one partition.
func (a *App) newTask(sub *subTopology, p int32) (*task, error) {
	t := &task{
		app: a, sub: sub, partition: p, id: fmt.Sprintf("%d_%d", sub.id, p),
		sources: map[string]*procCtx{}, stores: map[string]*storeHandle{},
		txns: map[*state.Engine]*state.Txn{}, queues: map[tp][]*kgo.Record{},
		positions: map[tp]int64{}, committed: map[tp]int64{}, counters: map[string]int64{},
		inCounters: map[string]prometheus.Counter{},
		streamTime: -1,
	}
	t.log = a.log.With("task", t.id)
	for _, s := range sub.stores {
		e := a.engineFor(s)
		if t.txns[e] == nil {
			t.txns[e] = e.NewTxn()
		}
		h := &storeHandle{spec: s, task: t, part: e.Partition(s.name, p), txn: t.txns[e],
			dirty: map[string][]byte{}, clOffset: -1, topic: a.changelogTopic(s)}
		t.stores[s.name] = h
		// What the changelog brought back although the restored state
		// says it expired (window segments) goes before anything reads.
		if s.sweep != nil {
			if err := s.sweep(h.part); err != nil {
				return nil, fmt.Errorf("task %s: store %s: drop expired segments: %w", t.id, s.name, err)
			}
		}
	}
	byNode := map[*node]*procCtx{}
	for _, n := range sub.nodes {
		pc := &procCtx{task: t, node: n}
		switch {
		case n.source != nil:
			pc.proc = &passProc{pc: pc}
			for _, topic := range n.source.topics {
				t.sources[a.topicName(topic, n.source.internal)] = pc
			}
		case n.sink != nil:
			pc.proc = &sinkProc{pc: pc, a: a, spec: n.sink, topic: a.topicName(n.sink.topic, n.sink.internal)}
		default:
			pc.proc = n.make()
		}
		byNode[n] = pc
		t.procs = append(t.procs, pc)
	}
	for _, n := range sub.nodes {
		for _, c := range n.children {
			if cp := byNode[c]; cp != nil {
				byNode[n].children = append(byNode[n].children, cp)
			}
		}
	}
	for _, pc := range t.procs {
		if err := pc.proc.init(pc); err != nil {
			return nil, fmt.Errorf("task %s: init %s: %w", t.id, pc.node.name, err)
		}
		if t.err != nil {
			return nil, fmt.Errorf("task %s: init %s: %w", t.id, pc.node.name, t.err)
		}
	}
	return t, nil
}

type passProc struct{ pc *procCtx }

func (p *passProc) init(*procCtx) error    { return nil }
func (p *passProc) process(r record) error { p.pc.forward(r, ""); return nil }

// run processes everything queued, oldest timestamp first across the
// task's input partitions, firing punctuations as stream time passes
// them.
func (t *task) run(wall int64) error {
	t.err = nil
	for _, p := range t.puncts {
		if p.kind == WallClockTime && wall >= p.next {
			p.next = wall + p.interval.Milliseconds()
			t.current.topic, t.current.offset = "", -1
			if err := p.fn(time.UnixMilli(wall)); err != nil {
				return fmt.Errorf("punctuation of %s: %w", p.pc.node.name, err)
			}
		}
	}
	for {
		var pick tp
		var best *kgo.Record
		for k, q := range t.queues {
			if len(q) > 0 && (best == nil || q[0].Timestamp.Before(best.Timestamp)) {
				pick, best = k, q[0]
			}
		}
		if best == nil {
			return nil
		}
		t.queues[pick] = t.queues[pick][1:]
		if err := t.processOne(best); err != nil {
			return err
		}
	}
}

func (t *task) processOne(kr *kgo.Record) error {
	src := t.sources[kr.Topic]
	spec := src.node.source
	t.current.topic, t.current.partition, t.current.offset = kr.Topic, kr.Partition, kr.Offset
	t.positions[tp{kr.Topic, kr.Partition}] = kr.Offset + 1
	r := record{ts: kr.Timestamp.UnixMilli(), headers: kr.Headers}
	if spec.ts != nil {
		r.ts = spec.ts(kr)
	}
	var err error
	if kr.Key != nil {
		if r.key, err = spec.key.dec(kr.Key); err != nil {
			return fmt.Errorf("cannot decode the key of %s/%d offset %d: %w", kr.Topic, kr.Partition, kr.Offset, err)
		}
	}
	if kr.Value != nil {
		if r.value, err = spec.val.dec(kr.Value); err != nil {
			return fmt.Errorf("cannot decode the value of %s/%d offset %d: %w", kr.Topic, kr.Partition, kr.Offset, err)
		}
	}
	if r.ts > t.streamTime {
		t.streamTime = r.ts
	}
	c := t.inCounters[kr.Topic]
	if c == nil {
		c = t.app.metrics.recordsIn.WithLabelValues(kr.Topic)
		t.inCounters[kr.Topic] = c
	}
	c.Inc()
	// The latency histogram samples one record in 64: timing every one
	// costs more than the small processors it measures.
	if t.processed++; t.processed%64 == 0 {
		start := time.Now()
		src.forward(r, "")
		t.app.metrics.processLatency.Observe(time.Since(start).Seconds())
	} else {
		src.forward(r, "")
	}
	if t.err != nil {
		return t.err
	}
	for _, p := range t.puncts {
		if p.kind != StreamTime {
			continue
		}
		if p.next < 0 {
			p.next = t.streamTime + p.interval.Milliseconds()
			continue
		}
		if t.streamTime >= p.next {
			p.next = t.streamTime + p.interval.Milliseconds()
			if err := p.fn(time.UnixMilli(t.streamTime)); err != nil {
				return fmt.Errorf("punctuation of %s: %w", p.pc.node.name, err)
			}
			if t.err != nil {
				return t.err
			}
		}
	}
	return nil
}

// dirtyKeys returns a handle's dirty keys in order, so the changelog gets
// them in a stable order.
func (h *storeHandle) dirtyKeys() []string {
	ks := make([]string, 0, len(h.dirty))
	for k := range h.dirty {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// sinkProc writes records to a topic.
type sinkProc struct {
	pc    *procCtx
	a     *App
	spec  *sinkSpec
	topic string
}

func (s *sinkProc) init(*procCtx) error { return nil }

func (s *sinkProc) process(r record) error {
	var kb, vb []byte
	var err error
	if r.key != nil {
		if kb, err = s.spec.key.enc(r.key); err != nil {
			return fmt.Errorf("encode key for %s: %w", s.topic, err)
		}
	}
	if r.value != nil {
		if vb, err = s.spec.val.enc(r.value); err != nil {
			return fmt.Errorf("encode value for %s: %w", s.topic, err)
		}
		if vb == nil {
			vb = []byte{}
		}
	}
	ts := time.UnixMilli(r.ts)
	if r.ts <= 0 {
		ts = time.Now()
	}
	partition := int32(-1)
	if s.spec.partitionOf != nil {
		n := s.a.partitions[s.topic]
		if partition = s.spec.partitionOf(kb, r.value, n); partition < 0 || int(partition) >= n {
			return fmt.Errorf("sink %s: partition %d picked for a topic of %d partitions", s.topic, partition, n)
		}
	}
	s.a.produce(&kgo.Record{Topic: s.topic, Key: kb, Value: vb, Headers: r.headers, Timestamp: ts}, partition)
	return nil
}
