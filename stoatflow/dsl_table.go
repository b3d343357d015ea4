package stoatflow

import "fmt"

// Table is a changelog stream materialized in a key-value store: the
// latest value per key. Interactive queries read its store by name.
type Table[K, V any] struct {
	t     *Topology
	n     *node // forwards change values
	store string
	ks    Serde[K]
	vs    Serde[V]
	// win is set on a windowed aggregation's table (and what Suppress
	// makes of it): its store is a window or session store, not a
	// key-value one, and Suppress needs to know when windows close.
	win *windowSpec
}

// change is the value a table forwards: the new value (nil: deleted) and
// the one it replaced (nil: none).
type change struct{ new, old any }

// Store is the name of the table's store: a key-value store, or the window
// or session store of a windowed aggregation; empty for a table that is not
// materialized (what Suppress returns).
func (t Table[K, V]) Store() string { return t.store }

// kvStore names the table's store for a join, which needs a key-value
// store; it records a topology error when the table has none.
func (t Table[K, V]) kvStore(op string) string {
	if t.win != nil || t.store == "" {
		t.t.fail("%s: table %q is windowed or not materialized; join only key-value tables", op, t.store)
	}
	return t.store
}

// ToStream is the table's stream of updates; a deletion arrives with a
// nil value (written as a tombstone by To).
func (t Table[K, V]) ToStream() Stream[K, V] {
	n := t.t.addNode("", "to-stream", t.n)
	n.make = func() nodeProc {
		return &funcProc{fn: func(r record, fwd func(record)) error {
			c, _ := r.value.(change)
			r.value = c.new
			fwd(r)
			return nil
		}}
	}
	return Stream[K, V]{t: t.t, n: n}
}

// TableFrom reads a topic as a table materialized in store; a tombstone
// deletes its key.
func TableFrom[K, V any](t *Topology, topic, store string, ks Serde[K], vs Serde[V], opts ...StoreOption) Table[K, V] {
	src := Source(t, ks, vs, []string{topic})
	AddKeyValueStore(t, store, ks, vs, opts...)
	n := t.addNode(store+"-materialize", "table", src.n)
	n.stores = []string{store}
	n.make = func() nodeProc { return &materializeProc[K, V]{store: store} }
	return Table[K, V]{t: t, n: n, store: store, ks: ks, vs: vs}
}

type materializeProc[K, V any] struct {
	store string
	kv    *kvStore[K, V]
	cache *changeCache
	pc    *procCtx
}

func (m *materializeProc[K, V]) init(pc *procCtx) error {
	m.pc = pc
	var err error
	m.kv, err = kvStoreOf[K, V](pc.store(m.store))
	m.cache = newChangeCache(pc)
	return err
}

func (m *materializeProc[K, V]) process(r record) error {
	if r.key == nil {
		m.pc.task.count("dropped-null-key", 1)
		return nil
	}
	kb, err := m.kv.ks.Encode(key[K](r))
	if err != nil {
		return err
	}
	old, had, err := m.kv.getEncoded(kb)
	if err != nil {
		return err
	}
	c := change{}
	if had {
		c.old = old
	}
	if r.value == nil {
		if !had {
			return nil
		}
		err = m.kv.h.put(kb, nil)
	} else {
		c.new = r.value
		err = m.kv.putEncoded(kb, value[V](r))
	}
	if err != nil {
		return err
	}
	r.value = c
	return forwardChange(m.pc, m.cache, kb, r)
}

// Grouped is a stream grouped by key, ready to aggregate.
type Grouped[K, V any] struct {
	s  Stream[K, V]
	ks Serde[K]
	vs Serde[V]
}

// GroupByKey groups by the current key. After a key change it goes
// through a repartition topic.
func (s Stream[K, V]) GroupByKey(ks Serde[K], vs Serde[V]) Grouped[K, V] {
	return Grouped[K, V]{s: s, ks: ks, vs: vs}
}

// GroupBy groups by a new key, through a repartition topic.
func GroupBy[K, V, K2 any](s Stream[K, V], fn func(K, V) K2, ks Serde[K2], vs Serde[V]) Grouped[K2, V] {
	return Grouped[K2, V]{s: SelectKey(s, fn), ks: ks, vs: vs}
}

// input is the stream an aggregation reads: repartitioned by key when the
// key may have changed.
func (g Grouped[K, V]) input(store string) Stream[K, V] {
	if g.s.rekeyed {
		return through(g.s, store, g.ks, g.vs)
	}
	return g.s
}

// Count counts records per key in store.
func (g Grouped[K, V]) Count(store string, opts ...StoreOption) Table[K, int64] {
	return Aggregate(g, store, func() int64 { return 0 }, func(_ K, _ V, n int64) int64 { return n + 1 }, Int64, opts...)
}

// Reduce folds values per key with fn; the first value is kept as is.
func (g Grouped[K, V]) Reduce(store string, fn func(agg, v V) V, opts ...StoreOption) Table[K, V] {
	in := g.input(store)
	AddKeyValueStore(g.s.t, store, g.ks, g.vs, opts...)
	n := g.s.t.addNode(store+"-reduce", "aggregate", in.n)
	n.stores = []string{store}
	n.make = func() nodeProc {
		return &aggProc[K, V, V]{store: store, first: func(_ K, v V) V { return v }, add: func(_ K, v V, agg V) V { return fn(agg, v) }}
	}
	return Table[K, V]{t: g.s.t, n: n, store: store, ks: g.ks, vs: g.vs}
}

// Aggregate folds records per key into an A, starting from init().
func Aggregate[K, V, A any](g Grouped[K, V], store string, init func() A, fn func(k K, v V, agg A) A, as Serde[A], opts ...StoreOption) Table[K, A] {
	in := g.input(store)
	AddKeyValueStore(g.s.t, store, g.ks, as, opts...)
	n := g.s.t.addNode(store+"-aggregate", "aggregate", in.n)
	n.stores = []string{store}
	n.make = func() nodeProc {
		return &aggProc[K, V, A]{store: store, first: func(k K, v V) A { return fn(k, v, init()) }, add: fn}
	}
	return Table[K, A]{t: g.s.t, n: n, store: store, ks: g.ks, vs: as}
}

type aggProc[K, V, A any] struct {
	store string
	first func(K, V) A
	add   func(K, V, A) A
	kv    *kvStore[K, A]
	cache *changeCache
	pc    *procCtx
}

func (a *aggProc[K, V, A]) init(pc *procCtx) error {
	a.pc = pc
	var err error
	a.kv, err = kvStoreOf[K, A](pc.store(a.store))
	a.cache = newChangeCache(pc)
	return err
}

func (a *aggProc[K, V, A]) process(r record) error {
	// As Kafka Streams: records without a key or value do not aggregate.
	if r.key == nil || r.value == nil {
		a.pc.task.count("dropped-null", 1)
		return nil
	}
	k, v := key[K](r), value[V](r)
	kb, err := a.kv.ks.Encode(k)
	if err != nil {
		return err
	}
	old, had, err := a.kv.getEncoded(kb)
	if err != nil {
		return err
	}
	var next A
	c := change{}
	if had {
		next = a.add(k, v, old)
		c.old = old
	} else {
		next = a.first(k, v)
	}
	if err := a.kv.putEncoded(kb, next); err != nil {
		return err
	}
	c.new = next
	r.value = c
	return forwardChange(a.pc, a.cache, kb, r)
}

// JoinTable joins each stream record with the table's current value for
// its key; records without a match are dropped. The stream and the table
// must be co-partitioned (checked at start).
func JoinTable[K, V, VT, VR any](s Stream[K, V], t Table[K, VT], fn func(V, VT) VR) Stream[K, VR] {
	return streamTableJoin(s, t, false, func(v V, vt VT, _ bool) VR { return fn(v, vt) })
}

// LeftJoinTable is JoinTable that keeps records without a match (ok is
// false and vt the zero value).
func LeftJoinTable[K, V, VT, VR any](s Stream[K, V], t Table[K, VT], fn func(v V, vt VT, ok bool) VR) Stream[K, VR] {
	return streamTableJoin(s, t, true, fn)
}

func streamTableJoin[K, V, VT, VR any](s Stream[K, V], t Table[K, VT], left bool, fn func(V, VT, bool) VR) Stream[K, VR] {
	if s.rekeyed {
		s.t.fail("join with table %s: the stream's key was changed; Repartition it first", t.store)
	}
	n := s.t.addNode("", "join", s.n)
	store := t.kvStore("JoinTable")
	n.stores = []string{store}
	n.make = func() nodeProc {
		var kv KeyValueStore[K, VT]
		var pc *procCtx
		return &initProc{
			initFn: func(c *procCtx) error {
				pc = c
				var err error
				kv, err = KeyValueStoreOf[K, VT](c.store(store))
				return err
			},
			fn: func(r record) error {
				if r.key == nil {
					return nil
				}
				vt, ok, err := kv.Get(key[K](r))
				if err != nil {
					return err
				}
				if !ok && !left {
					return nil
				}
				r.value = fn(value[V](r), vt, ok)
				pc.forward(r, "")
				return nil
			},
		}
	}
	return Stream[K, VR]{t: s.t, n: n}
}

// initProc is a node built from two closures.
type initProc struct {
	initFn func(*procCtx) error
	fn     func(record) error
}

func (p *initProc) init(pc *procCtx) error { return p.initFn(pc) }
func (p *initProc) process(r record) error { return p.fn(r) }

// JoinTables is the inner join of two co-partitioned tables, materialized
// in store: an update on either side looks up the other.
func JoinTables[K, V1, V2, VR any](a Table[K, V1], b Table[K, V2], store string, fn func(V1, V2) VR, vrs Serde[VR], opts ...StoreOption) Table[K, VR] {
	t := a.t
	a.kvStore("JoinTables")
	b.kvStore("JoinTables")
	AddKeyValueStore(t, store, a.ks, vrs, opts...)
	side := func(from *node, self, other string, join func(c change, otherV []byte, found bool) (any, error)) *node {
		n := t.addNode("", "table-join", from)
		n.stores = []string{self, other}
		n.make = func() nodeProc {
			var pc *procCtx
			var h *storeHandle
			return &initProc{
				initFn: func(c *procCtx) error {
					pc = c
					s, err := c.store(other)
					if err != nil {
						return err
					}
					h = s.handle()
					return nil
				},
				fn: func(r record) error {
					c, _ := r.value.(change)
					kb, err := a.ks.Encode(key[K](r))
					if err != nil {
						return err
					}
					ob, found, err := h.get(kb)
					if err != nil {
						return err
					}
					v, err := join(c, ob, found)
					if err != nil {
						return err
					}
					r.value = v
					pc.forward(r, "")
					return nil
				},
			}
		}
		return n
	}
	left := side(a.n, a.store, b.store, func(c change, ob []byte, found bool) (any, error) {
		if c.new == nil || !found {
			return nil, nil
		}
		v2, err := b.vs.Decode(ob)
		if err != nil {
			return nil, err
		}
		return fn(c.new.(V1), v2), nil
	})
	right := side(b.n, b.store, a.store, func(c change, ob []byte, found bool) (any, error) {
		if c.new == nil || !found {
			return nil, nil
		}
		v1, err := a.vs.Decode(ob)
		if err != nil {
			return nil, err
		}
		return fn(v1, c.new.(V2)), nil
	})
	m := t.addNode(store+"-materialize", "table", left, right)
	m.stores = []string{store}
	m.make = func() nodeProc { return &materializeProc[K, VR]{store: store} }
	return Table[K, VR]{t: t, n: m, store: store, ks: a.ks, vs: vrs}
}

// String names the table.
func (t Table[K, V]) String() string { return fmt.Sprintf("table %s", t.store) }
