package stoatflow

import (
	"bytes"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is what flows between processors.
type Record[K, V any] struct {
	Key       K
	Value     V
	Timestamp time.Time
	Headers   []kgo.RecordHeader
}

// Processor is the low-level API the DSL compiles to. One instance exists
// per task (per input partition); it is called from one goroutine at a
// time. It must keep its state in stores: anything held in fields is lost
// when an aborted transaction makes the task start over.
type Processor[KIn, VIn, KOut, VOut any] interface {
	Init(ctx ProcessorContext[KOut, VOut]) error
	Process(r Record[KIn, VIn]) error
}

// PunctuationType says which clock a punctuation follows.
type PunctuationType int

const (
	// StreamTime punctuations fire as the task's stream time (the largest
	// record timestamp seen) passes each interval.
	StreamTime PunctuationType = iota
	// WallClockTime punctuations fire on the local clock.
	WallClockTime
)

// ProcessorContext is what a processor may do.
type ProcessorContext[K, V any] interface {
	// Forward sends r to every child.
	Forward(r Record[K, V])
	// ForwardTo sends r to the named child only.
	ForwardTo(child string, r Record[K, V])
	// Schedule calls fn every interval on the given clock.
	Schedule(interval time.Duration, t PunctuationType, fn func(now time.Time) error)
	// StreamTime is the largest record timestamp the task has seen.
	StreamTime() time.Time
	// Partition is the task's partition.
	Partition() int32
	// Input names the record being processed (empty in a punctuation).
	Input() (topic string, partition int32, offset int64)
	// Logger logs with the task named.
	Logger() *slog.Logger
	// Store returns a store the processor was connected to (see Process).
	Store(name string) (AnyStore, error)
	// Counter adds n to a per-task counter exported as a metric (dropped
	// late records, for example).
	Counter(name string, n int64)
}

// AnyStore is a store handle before its types are known; use
// KeyValueStoreOf, WindowStoreOf or SessionStoreOf.
type AnyStore interface{ handle() *storeHandle }

// ProcessorSupplier makes one processor per task.
type ProcessorSupplier[KIn, VIn, KOut, VOut any] func() Processor[KIn, VIn, KOut, VOut]

// Process adds a low-level processor under s, connected to the named
// stores, and returns the stream of what it forwards.
func Process[KIn, VIn, KOut, VOut any](s Stream[KIn, VIn], name string, supplier ProcessorSupplier[KIn, VIn, KOut, VOut], stores ...string) Stream[KOut, VOut] {
	n := s.t.addNode(name, "process", s.n)
	n.stores = append(n.stores, stores...)
	n.make = func() nodeProc { return &typedProc[KIn, VIn, KOut, VOut]{p: supplier()} }
	return Stream[KOut, VOut]{t: s.t, n: n}
}

// typedProc adapts a typed Processor to the graph's untyped records.
type typedProc[KIn, VIn, KOut, VOut any] struct {
	p   Processor[KIn, VIn, KOut, VOut]
	ctx *typedCtx[KOut, VOut]
}

func (t *typedProc[KIn, VIn, KOut, VOut]) init(pc *procCtx) error {
	t.ctx = &typedCtx[KOut, VOut]{pc: pc}
	return t.p.Init(t.ctx)
}

func (t *typedProc[KIn, VIn, KOut, VOut]) process(r record) error {
	k, _ := r.key.(KIn)
	v, _ := r.value.(VIn)
	return t.p.Process(Record[KIn, VIn]{Key: k, Value: v, Timestamp: time.UnixMilli(r.ts), Headers: r.headers})
}

type typedCtx[K, V any] struct{ pc *procCtx }

func (c *typedCtx[K, V]) Forward(r Record[K, V]) { c.pc.forward(fromTyped(r), "") }
func (c *typedCtx[K, V]) ForwardTo(child string, r Record[K, V]) {
	c.pc.forward(fromTyped(r), child)
}
func (c *typedCtx[K, V]) Schedule(iv time.Duration, t PunctuationType, fn func(time.Time) error) {
	c.pc.schedule(iv, t, fn)
}
func (c *typedCtx[K, V]) StreamTime() time.Time { return time.UnixMilli(c.pc.task.streamTime) }
func (c *typedCtx[K, V]) Partition() int32      { return c.pc.task.partition }
func (c *typedCtx[K, V]) Input() (string, int32, int64) {
	in := c.pc.task.current
	return in.topic, in.partition, in.offset
}
func (c *typedCtx[K, V]) Logger() *slog.Logger { return c.pc.task.log }
func (c *typedCtx[K, V]) Store(name string) (AnyStore, error) {
	return c.pc.store(name)
}
func (c *typedCtx[K, V]) Counter(name string, n int64) { c.pc.task.count(name, n) }

func fromTyped[K, V any](r Record[K, V]) record {
	ts := int64(0)
	if !r.Timestamp.IsZero() {
		ts = r.Timestamp.UnixMilli()
	}
	return record{key: r.Key, value: r.Value, ts: ts, headers: r.Headers}
}

// KeyValueStore is a typed key-value store. Reads see this task's writes
// of the current transaction; writes become visible to interactive
// queries once the transaction commits.
type KeyValueStore[K, V any] interface {
	Get(k K) (v V, ok bool, err error)
	Put(k K, v V) error
	Delete(k K) error
	// Range calls fn in key-byte order for keys in [from, to); a nil
	// bound is open.
	Range(from, to *K, fn func(k K, v V) bool) error
	// Prefix calls fn for each key whose encoded bytes start with the
	// encoding of prefix.
	Prefix(prefix K, fn func(k K, v V) bool) error
}

// KeyValueStoreOf gives the typed view of a key-value store.
func KeyValueStoreOf[K, V any](s AnyStore, err error) (KeyValueStore[K, V], error) {
	kv, err := kvStoreOf[K, V](s, err)
	if err != nil {
		return nil, err
	}
	return kv, nil
}

func kvStoreOf[K, V any](s AnyStore, err error) (*kvStore[K, V], error) {
	if err != nil {
		return nil, err
	}
	h := s.handle()
	ks, ok1 := h.spec.keySerde.(Serde[K])
	vs, ok2 := h.spec.valSerde.(Serde[V])
	if !ok1 || !ok2 || h.spec.kind != kindKeyValue {
		return nil, fmt.Errorf("store %s is a %s store of %s, not a key-value store of %T to %T", h.spec.name, h.spec.kind, h.spec.types, *new(K), *new(V))
	}
	return &kvStore[K, V]{h: h, ks: ks, vs: vs}, nil
}

type kvStore[K, V any] struct {
	h  *storeHandle
	ks Serde[K]
	vs Serde[V]
}

func (s *kvStore[K, V]) Get(k K) (V, bool, error) {
	kb, err := s.ks.Encode(k)
	if err != nil {
		var zero V
		return zero, false, err
	}
	return s.getEncoded(kb)
}

// getEncoded and putEncoded take the key already encoded, for the DSL's
// processors that also need its bytes.
func (s *kvStore[K, V]) getEncoded(kb []byte) (V, bool, error) {
	var zero V
	b, ok, err := s.h.get(kb)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vs.Decode(b)
	return v, err == nil, err
}

func (s *kvStore[K, V]) Put(k K, v V) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	return s.putEncoded(kb, v)
}

func (s *kvStore[K, V]) putEncoded(kb []byte, v V) error {
	vb, err := s.vs.Encode(v)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{}
	}
	return s.h.put(kb, vb)
}

func (s *kvStore[K, V]) Delete(k K) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	return s.h.put(kb, nil)
}

func (s *kvStore[K, V]) Range(from, to *K, fn func(K, V) bool) error {
	var lo, hi []byte
	var err error
	if from != nil {
		if lo, err = s.ks.Encode(*from); err != nil {
			return err
		}
	}
	if to != nil {
		if hi, err = s.ks.Encode(*to); err != nil {
			return err
		}
	}
	return s.scan(lo, hi, fn)
}

func (s *kvStore[K, V]) Prefix(prefix K, fn func(K, V) bool) error {
	p, err := s.ks.Encode(prefix)
	if err != nil {
		return err
	}
	return s.scan(p, prefixEnd(p), fn)
}

func (s *kvStore[K, V]) scan(lo, hi []byte, fn func(K, V) bool) error {
	var derr error
	err := s.h.scan(lo, hi, false, func(kb, vb []byte) bool {
		// The iterator reuses its buffers: a serde that keeps the slice it
		// decodes (Bytes) must get copies.
		kb, vb = bytes.Clone(kb), bytes.Clone(vb)
		k, err := s.ks.Decode(kb)
		if err != nil {
			derr = err
			return false
		}
		v, err := s.vs.Decode(vb)
		if err != nil {
			derr = err
			return false
		}
		return fn(k, v)
	})
	if err != nil {
		return err
	}
	return derr
}
