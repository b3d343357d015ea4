package stoatflow

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Windowed is the key of a windowed aggregation's table: the record key
// and its window. A time window spans [Start, End); a session spans
// [Start, End] where End is the time of its last record.
type Windowed[K any] struct {
	Key        K
	Start, End time.Time
}

func (w Windowed[K]) String() string {
	return fmt.Sprintf("%v@%s/%s", w.Key, w.Start.UTC().Format(time.RFC3339Nano), w.End.UTC().Format(time.RFC3339Nano))
}

// WindowedSerde writes a Windowed key as the key's bytes followed by the
// window's start and end, each 8 bytes big-endian milliseconds. Its text
// form (interactive queries, ParseText) is key@start/end, the times in
// milliseconds or RFC 3339.
func WindowedSerde[K any](ks Serde[K]) TextSerde[Windowed[K]] { return windowedSerde[K]{ks} }

type windowedSerde[K any] struct{ ks Serde[K] }

func (s windowedSerde[K]) Encode(w Windowed[K]) ([]byte, error) {
	kb, err := s.ks.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(kb)+16)
	out = append(out, kb...)
	out = binary.BigEndian.AppendUint64(out, uint64(w.Start.UnixMilli()))
	return binary.BigEndian.AppendUint64(out, uint64(w.End.UnixMilli())), nil
}

func (s windowedSerde[K]) Decode(b []byte) (Windowed[K], error) {
	var w Windowed[K]
	if b == nil {
		return w, nil
	}
	if len(b) < 16 {
		return w, fmt.Errorf("windowed serde: %d bytes, want at least 16", len(b))
	}
	n := len(b) - 16
	k, err := s.ks.Decode(b[:n])
	if err != nil {
		return w, err
	}
	w.Key = k
	w.Start = time.UnixMilli(int64(binary.BigEndian.Uint64(b[n:])))
	w.End = time.UnixMilli(int64(binary.BigEndian.Uint64(b[n+8:])))
	return w, nil
}

func (s windowedSerde[K]) ParseText(t string) (Windowed[K], error) {
	var w Windowed[K]
	ts, ok := s.ks.(TextSerde[K])
	if !ok {
		return w, fmt.Errorf("windowed serde: the key serde %T has no text form", s.ks)
	}
	i := strings.LastIndexByte(t, '@')
	if i < 0 {
		return w, fmt.Errorf("windowed key %q: want key@start/end", t)
	}
	start, end, ok := strings.Cut(t[i+1:], "/")
	if !ok {
		return w, fmt.Errorf("windowed key %q: want key@start/end", t)
	}
	var err error
	if w.Key, err = ts.ParseText(t[:i]); err != nil {
		return w, err
	}
	if w.Start, err = parseTime(start); err != nil {
		return w, err
	}
	w.End, err = parseTime(end)
	return w, err
}

// parseTime reads milliseconds since the epoch or an RFC 3339 time.
func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("time %q: want milliseconds since the epoch or RFC 3339", s)
	}
	return t, nil
}

// TimeWindows are fixed-size windows aligned to the epoch: a new one
// starts every Advance and lasts Size, so a record belongs to Size/Advance
// of them (one, for tumbling windows). A window accepts records until
// stream time reaches its end plus Grace; later records for it are
// dropped (stoatflow_dropped_records_total{reason="late"}).
type TimeWindows struct {
	Size, Advance, Grace time.Duration
}

// Tumbling is windows of size that do not overlap.
func Tumbling(size, grace time.Duration) TimeWindows {
	return TimeWindows{Size: size, Advance: size, Grace: grace}
}

// Hopping is windows of size starting every advance (advance <= size).
func Hopping(size, advance, grace time.Duration) TimeWindows {
	return TimeWindows{Size: size, Advance: advance, Grace: grace}
}

func (w TimeWindows) check() error {
	switch {
	case w.Size.Milliseconds() < 1:
		return fmt.Errorf("window size %v is below a millisecond", w.Size)
	case w.Advance.Milliseconds() < 1 || w.Advance > w.Size:
		return fmt.Errorf("window advance %v must be at least a millisecond and at most the size %v", w.Advance, w.Size)
	case w.Grace < 0:
		return fmt.Errorf("window grace %v is negative", w.Grace)
	}
	return nil
}

// SessionWindows group a key's records into sessions: a record within Gap
// of a session (before its start or after its end) joins it, and may merge
// two. A session closes once stream time passes its end plus Gap plus
// Grace. A closed session is final: a record that would have extended it
// but arrives after it closed starts a session of its own (Kafka Streams
// would reopen it), and a record that falls inside it is dropped as late.
type SessionWindows struct {
	Gap, Grace time.Duration
}

// Sessions is session windows with the given inactivity gap and grace.
func Sessions(gap, grace time.Duration) SessionWindows {
	return SessionWindows{Gap: gap, Grace: grace}
}

func (w SessionWindows) check() error {
	switch {
	case w.Gap.Milliseconds() < 1:
		return fmt.Errorf("session gap %v is below a millisecond", w.Gap)
	case w.Grace < 0:
		return fmt.Errorf("session grace %v is negative", w.Grace)
	}
	return nil
}

// windowSpec is what a windowed table knows of its windows: when a window
// closes, for Suppress.
type windowSpec struct {
	grace, gap int64 // milliseconds
	session    bool
}

// closeAt is the stream time at which a window is closed: no record can
// change it any more. Time windows end exclusively, sessions inclusively
// and stay open for the gap (a record up to end + gap joins them).
func (w *windowSpec) closeAt(start, end int64) int64 {
	if w.session {
		return end + w.gap + w.grace + 1
	}
	return end + w.grace
}

// TimeWindowed is a grouped stream cut into time windows, ready to
// aggregate.
type TimeWindowed[K, V any] struct {
	g Grouped[K, V]
	w TimeWindows
}

// WindowedBy cuts the grouped stream into time windows. It is a function,
// not a method of Grouped, as are SessionWindowedBy and Suppress: a method
// reaching Table[Windowed[K], ...] from Grouped[K, ...] would let Go's
// generics instantiate Windowed[Windowed[...]] without end.
func WindowedBy[K, V any](g Grouped[K, V], w TimeWindows) TimeWindowed[K, V] {
	if err := w.check(); err != nil {
		g.s.t.fail("WindowedBy: %v", err)
	}
	return TimeWindowed[K, V]{g: g, w: w}
}

// Count counts records per key and window in the window store named store.
func (tw TimeWindowed[K, V]) Count(store string, opts ...StoreOption) Table[Windowed[K], int64] {
	return AggregateWindows(tw, store, func() int64 { return 0 }, func(_ K, _ V, n int64) int64 { return n + 1 }, Int64, opts...)
}

// Reduce folds values per key and window with fn; a window's first value
// is kept as is.
func (tw TimeWindowed[K, V]) Reduce(store string, fn func(agg, v V) V, opts ...StoreOption) Table[Windowed[K], V] {
	return windowAggregate(tw, store, func(_ K, v V) V { return v }, func(_ K, v V, agg V) V { return fn(agg, v) }, tw.g.vs, opts)
}

// AggregateWindows folds records per key and window into an A, starting
// each window from init(). The table it returns is keyed by Windowed[K]
// and materialized in a window store (retention: window size plus grace,
// or WithRetention).
func AggregateWindows[K, V, A any](tw TimeWindowed[K, V], store string, init func() A, fn func(k K, v V, agg A) A, as Serde[A], opts ...StoreOption) Table[Windowed[K], A] {
	return windowAggregate(tw, store, func(k K, v V) A { return fn(k, v, init()) }, fn, as, opts)
}

func windowAggregate[K, V, A any](tw TimeWindowed[K, V], store string, first func(K, V) A, add func(K, V, A) A, as Serde[A], opts []StoreOption) Table[Windowed[K], A] {
	t := tw.g.s.t
	in := tw.g.input(store)
	w := tw.w
	t.addSegmentedStore(store, kindWindow, tw.g.ks, as, erase(tw.g.ks), erase(as), fmt.Sprintf("%T to %T", *new(K), *new(A)), w.Size+w.Grace, w.Size, opts)
	n := t.addNode(store+"-window-aggregate", "window-aggregate", in.n)
	n.stores = []string{store}
	n.make = func() nodeProc {
		return &windowAggProc[K, V, A]{store: store, size: w.Size.Milliseconds(), advance: w.Advance.Milliseconds(), grace: w.Grace.Milliseconds(), first: first, add: add}
	}
	return Table[Windowed[K], A]{t: t, n: n, store: store, ks: WindowedSerde(tw.g.ks), vs: as, win: &windowSpec{grace: w.Grace.Milliseconds()}}
}

// windowAggProc aggregates into time windows. Its notion of stream time is
// the store's observed time, so it survives restarts and aborts with the
// store: late records are dropped the same way before and after one.
type windowAggProc[K, V, A any] struct {
	store                string
	size, advance, grace int64
	first                func(K, V) A
	add                  func(K, V, A) A
	ws                   *windowStore[K, A]
	pc                   *procCtx
}

func (p *windowAggProc[K, V, A]) init(pc *procCtx) error {
	p.pc = pc
	h, err := pc.store(p.store)
	if err != nil {
		return err
	}
	p.ws, err = windowStoreOf[K, A](h.handle())
	return err
}

func (p *windowAggProc[K, V, A]) process(r record) error {
	if r.key == nil || r.value == nil {
		p.pc.task.count("dropped-null", 1)
		return nil
	}
	if r.ts < 0 {
		p.pc.task.count("dropped-negative-timestamp", 1)
		return nil
	}
	observed, err := p.ws.observe(r.ts)
	if err != nil {
		return err
	}
	k, v := key[K](r), value[V](r)
	// The windows holding ts start in (ts - size, ts], on multiples of
	// the advance.
	first := max(0, r.ts-p.size+p.advance) / p.advance * p.advance
	for start := first; start <= r.ts; start += p.advance {
		end := start + p.size
		if end+p.grace <= observed {
			p.pc.task.count("dropped-late", 1)
			continue
		}
		old, had, err := p.ws.get(k, start)
		if err != nil {
			return err
		}
		c := change{}
		var next A
		if had {
			next = p.add(k, v, old)
			c.old = old
		} else {
			next = p.first(k, v)
		}
		if err := p.ws.write(k, start, next, observed); err != nil {
			return err
		}
		c.new = next
		p.pc.forward(record{key: p.ws.window(k, start), value: c, ts: r.ts, headers: r.headers}, "")
	}
	return nil
}

// SessionWindowed is a grouped stream cut into sessions, ready to
// aggregate.
type SessionWindowed[K, V any] struct {
	g Grouped[K, V]
	w SessionWindows
}

// SessionWindowedBy cuts the grouped stream into sessions.
func SessionWindowedBy[K, V any](g Grouped[K, V], w SessionWindows) SessionWindowed[K, V] {
	if err := w.check(); err != nil {
		g.s.t.fail("SessionWindowedBy: %v", err)
	}
	return SessionWindowed[K, V]{g: g, w: w}
}

// Count counts records per key and session in the session store named
// store.
func (sw SessionWindowed[K, V]) Count(store string, opts ...StoreOption) Table[Windowed[K], int64] {
	return AggregateSessions(sw, store, func() int64 { return 0 }, func(_ K, _ V, n int64) int64 { return n + 1 },
		func(_ K, a, b int64) int64 { return a + b }, Int64, opts...)
}

// Reduce folds values per key and session with fn, which also merges two
// sessions a record joins (the older first).
func (sw SessionWindowed[K, V]) Reduce(store string, fn func(agg, v V) V, opts ...StoreOption) Table[Windowed[K], V] {
	return sessionAggregate(sw, store, sessionFold[K, V, V]{
		first: func(_ K, v V) V { return v },
		add:   func(_ K, v V, agg V) V { return fn(agg, v) },
		merge: func(_ K, a, b V) V { return fn(a, b) },
	}, sw.g.vs, opts)
}

// AggregateSessions folds records per key and session into an A. As in
// Kafka Streams, a record's new session starts from init(), merges the
// sessions it joins into it in order of their end (merge), then adds the
// record (fn). The table it returns is keyed by Windowed[K] and
// materialized in a session store (retention: gap plus grace, or
// WithRetention).
func AggregateSessions[K, V, A any](sw SessionWindowed[K, V], store string, init func() A, fn func(k K, v V, agg A) A, merge func(k K, a, b A) A, as Serde[A], opts ...StoreOption) Table[Windowed[K], A] {
	return sessionAggregate(sw, store, sessionFold[K, V, A]{init: init, add: fn, merge: merge}, as, opts)
}

// sessionFold is how a session aggregation combines: with init (Aggregate)
// every session starts from it; without (Reduce) from its first value.
type sessionFold[K, V, A any] struct {
	init  func() A
	first func(K, V) A
	add   func(K, V, A) A
	merge func(K, A, A) A
}

func sessionAggregate[K, V, A any](sw SessionWindowed[K, V], store string, fold sessionFold[K, V, A], as Serde[A], opts []StoreOption) Table[Windowed[K], A] {
	t := sw.g.s.t
	in := sw.g.input(store)
	w := sw.w
	// A session is read (to merge) until it closes, at end + gap + grace.
	t.addSegmentedStore(store, kindSession, sw.g.ks, as, erase(sw.g.ks), erase(as), fmt.Sprintf("%T to %T", *new(K), *new(A)), w.Gap+w.Grace+time.Millisecond, 0, opts)
	n := t.addNode(store+"-session-aggregate", "session-aggregate", in.n)
	n.stores = []string{store}
	spec := &windowSpec{grace: w.Grace.Milliseconds(), gap: w.Gap.Milliseconds(), session: true}
	n.make = func() nodeProc { return &sessionAggProc[K, V, A]{store: store, spec: spec, fold: fold} }
	return Table[Windowed[K], A]{t: t, n: n, store: store, ks: WindowedSerde(sw.g.ks), vs: as, win: spec}
}

type sessionAggProc[K, V, A any] struct {
	store string
	spec  *windowSpec
	fold  sessionFold[K, V, A]
	ss    *sessionStore[K, A]
	pc    *procCtx
}

func (p *sessionAggProc[K, V, A]) init(pc *procCtx) error {
	p.pc = pc
	h, err := pc.store(p.store)
	if err != nil {
		return err
	}
	p.ss, err = sessionStoreOf[K, A](h.handle())
	return err
}

type session[A any] struct {
	start, end int64
	agg        A
}

func (p *sessionAggProc[K, V, A]) process(r record) error {
	if r.key == nil || r.value == nil {
		p.pc.task.count("dropped-null", 1)
		return nil
	}
	if r.ts < 0 {
		p.pc.task.count("dropped-negative-timestamp", 1)
		return nil
	}
	observed, err := p.ss.observe(r.ts)
	if err != nil {
		return err
	}
	if p.spec.closeAt(r.ts, r.ts) <= observed {
		// Even alone the record's session would be closed.
		p.pc.task.count("dropped-late", 1)
		return nil
	}
	k, v := key[K](r), value[V](r)
	gap := p.spec.gap
	var found []session[A]
	err = p.ss.find(k, r.ts-gap, r.ts+gap, func(start, end int64, agg A) bool {
		if p.spec.closeAt(start, end) > observed { // closed sessions are final
			found = append(found, session[A]{start, end, agg})
		}
		return true
	})
	if err != nil {
		return err
	}
	start, end := r.ts, r.ts
	var acc A
	have := false
	if p.fold.init != nil {
		acc, have = p.fold.init(), true
	}
	for _, s := range found {
		start, end = min(start, s.start), max(end, s.end)
		if have {
			acc = p.fold.merge(k, acc, s.agg)
		} else {
			acc, have = s.agg, true
		}
	}
	if have {
		acc = p.fold.add(k, v, acc)
	} else {
		acc = p.fold.first(k, v)
	}
	c := change{new: acc}
	for _, s := range found {
		if s.start == start && s.end == end {
			c.old = s.agg
			continue
		}
		if err := p.ss.remove(k, s.start, s.end); err != nil {
			return err
		}
		p.pc.forward(record{key: sessionKey(k, s.start, s.end), value: change{old: s.agg}, ts: r.ts, headers: r.headers}, "")
	}
	if err := p.ss.write(k, start, end, acc, observed); err != nil {
		return err
	}
	p.pc.forward(record{key: sessionKey(k, start, end), value: c, ts: r.ts, headers: r.headers}, "")
	return nil
}

func sessionKey[K any](k K, start, end int64) Windowed[K] {
	return Windowed[K]{Key: k, Start: time.UnixMilli(start), End: time.UnixMilli(end)}
}
