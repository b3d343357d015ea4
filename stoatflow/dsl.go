package stoatflow

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stream is an unbounded sequence of keyed records.
type Stream[K, V any] struct {
	t *Topology
	n *node
	// rekeyed is set once an operation may have changed the key: a
	// grouping after it goes through a repartition topic.
	rekeyed bool
}

// SourceOption changes how a source reads its topic.
type SourceOption func(*sourceSpec, *string)

// WithTimestamp sets the event time of each record from the record
// itself (the default is the record's Kafka timestamp).
func WithTimestamp(fn func(r *kgo.Record) time.Time) SourceOption {
	return func(s *sourceSpec, _ *string) { s.ts = func(r *kgo.Record) int64 { return fn(r).UnixMilli() } }
}

// Named names the source node.
func Named(name string) SourceOption { return func(_ *sourceSpec, n *string) { *n = name } }

// Source reads one or more topics as a stream.
func Source[K, V any](t *Topology, ks Serde[K], vs Serde[V], topics []string, opts ...SourceOption) Stream[K, V] {
	spec := &sourceSpec{topics: topics, key: erase(ks), val: erase(vs)}
	name := ""
	for _, o := range opts {
		o(spec, &name)
	}
	if len(topics) == 0 {
		t.fail("a source needs at least one topic")
	}
	n := t.addNode(name, "source", nil...)
	n.source = spec
	return Stream[K, V]{t: t, n: n}
}

// funcProc is a stateless node: fn gets the record and a forward function.
type funcProc struct {
	fn func(r record, fwd func(record)) error
	pc *procCtx
}

func (f *funcProc) init(pc *procCtx) error { f.pc = pc; return nil }
func (f *funcProc) process(r record) error {
	return f.fn(r, func(o record) { f.pc.forward(o, "") })
}

func stateless[K, V, K2, V2 any](s Stream[K, V], kind string, rekey bool, fn func(r record, fwd func(record)) error) Stream[K2, V2] {
	n := s.t.addNode("", kind, s.n)
	n.make = func() nodeProc { return &funcProc{fn: fn} }
	return Stream[K2, V2]{t: s.t, n: n, rekeyed: s.rekeyed || rekey}
}

func key[K any](r record) K   { k, _ := r.key.(K); return k }
func value[V any](r record) V { v, _ := r.value.(V); return v }

// Map changes key and value.
func Map[K, V, K2, V2 any](s Stream[K, V], fn func(K, V) (K2, V2)) Stream[K2, V2] {
	return stateless[K, V, K2, V2](s, "map", true, func(r record, fwd func(record)) error {
		k, v := fn(key[K](r), value[V](r))
		r.key, r.value = k, v
		fwd(r)
		return nil
	})
}

// MapValues changes the value and keeps the key (no repartition needed).
func MapValues[K, V, V2 any](s Stream[K, V], fn func(V) V2) Stream[K, V2] {
	return stateless[K, V, K, V2](s, "map-values", false, func(r record, fwd func(record)) error {
		r.value = fn(value[V](r))
		fwd(r)
		return nil
	})
}

// SelectKey sets a new key from the record.
func SelectKey[K, V, K2 any](s Stream[K, V], fn func(K, V) K2) Stream[K2, V] {
	return stateless[K, V, K2, V](s, "select-key", true, func(r record, fwd func(record)) error {
		r.key = fn(key[K](r), value[V](r))
		fwd(r)
		return nil
	})
}

// KeyValue is one output of FlatMap.
type KeyValue[K, V any] struct {
	Key   K
	Value V
}

// FlatMap turns each record into zero or more.
func FlatMap[K, V, K2, V2 any](s Stream[K, V], fn func(K, V) []KeyValue[K2, V2]) Stream[K2, V2] {
	return stateless[K, V, K2, V2](s, "flat-map", true, func(r record, fwd func(record)) error {
		for _, kv := range fn(key[K](r), value[V](r)) {
			o := r
			o.key, o.value = kv.Key, kv.Value
			fwd(o)
		}
		return nil
	})
}

// FlatMapValues turns each value into zero or more, keeping the key.
func FlatMapValues[K, V, V2 any](s Stream[K, V], fn func(V) []V2) Stream[K, V2] {
	return stateless[K, V, K, V2](s, "flat-map-values", false, func(r record, fwd func(record)) error {
		for _, v := range fn(value[V](r)) {
			o := r
			o.value = v
			fwd(o)
		}
		return nil
	})
}

// Filter keeps the records fn accepts.
func (s Stream[K, V]) Filter(fn func(K, V) bool) Stream[K, V] {
	return stateless[K, V, K, V](s, "filter", false, func(r record, fwd func(record)) error {
		if fn(key[K](r), value[V](r)) {
			fwd(r)
		}
		return nil
	})
}

// FilterNot drops the records fn accepts.
func (s Stream[K, V]) FilterNot(fn func(K, V) bool) Stream[K, V] {
	return s.Filter(func(k K, v V) bool { return !fn(k, v) })
}

// Peek calls fn for each record and passes it on unchanged. fn runs again
// for records reprocessed after an abort.
func (s Stream[K, V]) Peek(fn func(K, V)) Stream[K, V] {
	return stateless[K, V, K, V](s, "peek", false, func(r record, fwd func(record)) error {
		fn(key[K](r), value[V](r))
		fwd(r)
		return nil
	})
}

// Merge interleaves two streams of the same types.
func (s Stream[K, V]) Merge(o Stream[K, V]) Stream[K, V] {
	n := s.t.addNode("", "merge", s.n, o.n)
	n.make = func() nodeProc { return &funcProc{fn: func(r record, fwd func(record)) error { fwd(r); return nil }} }
	return Stream[K, V]{t: s.t, n: n, rekeyed: s.rekeyed || o.rekeyed}
}

// Branch splits the stream: each record goes to the first branch whose
// predicate accepts it, or nowhere.
func (s Stream[K, V]) Branch(preds ...func(K, V) bool) []Stream[K, V] {
	b := s.t.addNode("", "branch", s.n)
	out := make([]Stream[K, V], len(preds))
	names := make([]string, len(preds))
	for i := range preds {
		c := s.t.addNode("", "branch-out", b)
		c.make = func() nodeProc { return &funcProc{fn: func(r record, fwd func(record)) error { fwd(r); return nil }} }
		names[i] = c.name
		out[i] = Stream[K, V]{t: s.t, n: c, rekeyed: s.rekeyed}
	}
	b.make = func() nodeProc {
		return &branchProc{preds: func(r record) int {
			for i, p := range preds {
				if p(key[K](r), value[V](r)) {
					return i
				}
			}
			return -1
		}, names: names}
	}
	return out
}

type branchProc struct {
	preds func(record) int
	names []string
	pc    *procCtx
}

func (b *branchProc) init(pc *procCtx) error { b.pc = pc; return nil }
func (b *branchProc) process(r record) error {
	if i := b.preds(r); i >= 0 {
		b.pc.forward(r, b.names[i])
	}
	return nil
}

// To writes the stream to a topic. A nil value (a table's deletion) is
// written as a tombstone.
func (s Stream[K, V]) To(topic string, ks Serde[K], vs Serde[V]) {
	n := s.t.addNode("", "sink", s.n)
	n.sink = &sinkSpec{topic: topic, key: erase(ks), val: erase(vs)}
}

// through sends the stream through an internal repartition topic keyed by
// its current key, so that equal keys meet in one task.
func through[K, V any](s Stream[K, V], name string, ks Serde[K], vs Serde[V]) Stream[K, V] {
	topic := name + "-repartition"
	sink := s.t.addNode(name+"-repartition-sink", "sink", s.n)
	sink.sink = &sinkSpec{topic: topic, key: erase(ks), val: erase(vs), internal: true}
	src := s.t.addNode(name+"-repartition-source", "source")
	src.source = &sourceSpec{topics: []string{topic}, key: erase(ks), val: erase(vs), internal: true}
	return Stream[K, V]{t: s.t, n: src}
}

// Repartition sends the stream through an internal topic keyed by its
// current key (what grouping after a key change does by itself).
func Repartition[K, V any](s Stream[K, V], name string, ks Serde[K], vs Serde[V]) Stream[K, V] {
	return through(s, s.t.name(name, "repartition"), ks, vs)
}
