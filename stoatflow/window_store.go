package stoatflow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// Window and session stores keep their data in the same key-value handles
// as every other store, under composite keys built here. The composite key
// bytes are what the changelog carries, so restore needs no knowledge of
// the layout:
//
//	window store:  segment (8) | len(key) (4) | key | window start (8)
//	session store: segment (8) | len(key) (4) | key | session end (8) | session start (8)
//	both:          0xff "observed" -> the highest time the store observed (8)
//
// All numbers are big-endian and times are non-negative milliseconds, so
// the keys of one record key sort by time. The segment is the window start
// (session end) divided by the segment interval: every key of a segment
// sorts together, and the segments that fell out of the retention behind
// the observed time go with one range deletion. The observed-time key sorts
// after every segment (a segment number never has its top bit set).
//
// Expiry is local only: dropping a segment writes no tombstones. Instead
// the changelog of a window or session store is "compact,delete" with
// retention.ms = the store's retention plus a day (as in Kafka Streams), so
// the broker forgets expired windows, and a task, as it starts (after the
// restore), drops every segment the restored observed time says is
// expired (storeSpec.sweep, run by newTask) before anything reads it.

// metaObserved is the key of a segmented store's observed time.
var metaObserved = []byte("\xffobserved")

// dataEnd bounds a scan to a segmented store's data keys, leaving out its
// metadata keys.
var dataEnd = []byte{0xff}

// changelogExtraRetention is how much longer than the store's retention a
// window or session changelog keeps records (Kafka Streams'
// windowstore.changelog.additional.retention.ms): it covers the gap
// between event time, which expires windows, and the wall-clock time the
// broker deletes by.
const changelogExtraRetention = 24 * time.Hour

// segments is the time layout of a window or session store.
type segments struct {
	interval  int64 // milliseconds of window start (session end) per segment
	retention int64 // milliseconds kept behind the observed time
	size      int64 // window size (window stores; end = start + size)
}

func newSegments(retention, size time.Duration) segments {
	r := max(retention.Milliseconds(), 1)
	// Two live segments and the one filling, like Kafka Streams' default
	// of half the retention (with its one-minute floor dropped: tests and
	// short windows want expiry at their own scale).
	return segments{interval: max(r/2, 1), retention: r, size: size.Milliseconds()}
}

func (s segments) id(ts int64) uint64 {
	if ts < 0 {
		return 0
	}
	return uint64(ts / s.interval)
}

// minLive is the lowest segment holding a window that is not expired at
// observed time o: a window starting at start (a session ending at end)
// expires once start + retention <= o.
func (s segments) minLive(o int64) uint64 {
	return s.id(o - s.retention + 1)
}

// expired reports whether a window starting (a session ending) at ts has
// fallen out of retention at observed time o.
func (s segments) expired(ts, o int64) bool { return o >= 0 && ts+s.retention <= o }

func segKey(seg uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seg) }

// keyPrefix is segment | len(key) | key.
func keyPrefix(seg uint64, kb []byte) []byte {
	b := make([]byte, 0, 12+len(kb)+16)
	b = binary.BigEndian.AppendUint64(b, seg)
	b = binary.BigEndian.AppendUint32(b, uint32(len(kb)))
	return append(b, kb...)
}

func (s segments) windowKey(kb []byte, start int64) []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(s.id(start), kb), uint64(start))
}

func (s segments) sessionKey(kb []byte, start, end int64) []byte {
	b := binary.BigEndian.AppendUint64(keyPrefix(s.id(end), kb), uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(start))
}

// splitKey takes a composite key apart: the record key's bytes and the
// times after it (one for a window store, end then start for a session
// store).
func splitKey(k []byte, times int) (kb []byte, ts []int64, err error) {
	if len(k) < 12 {
		return nil, nil, fmt.Errorf("window store key of %d bytes", len(k))
	}
	n := int(binary.BigEndian.Uint32(k[8:12]))
	if len(k) != 12+n+8*times {
		return nil, nil, fmt.Errorf("window store key of %d bytes, want %d", len(k), 12+n+8*times)
	}
	kb = k[12 : 12+n]
	for i := 0; i < times; i++ {
		ts = append(ts, int64(binary.BigEndian.Uint64(k[12+n+8*i:])))
	}
	return kb, ts, nil
}

// rawReader reads store keys, through a task's transaction or from the
// committed state.
type rawReader interface {
	get(k []byte) ([]byte, bool, error)
	scan(lo, hi []byte, fn func(k, v []byte) bool) error
}

type handleReader struct{ h *storeHandle }

func (r handleReader) get(k []byte) ([]byte, bool, error) { return r.h.get(k) }
func (r handleReader) scan(lo, hi []byte, fn func(k, v []byte) bool) error {
	return r.h.scan(lo, hi, false, fn)
}

type partitionReader struct{ p *state.Partition }

func (r partitionReader) get(k []byte) ([]byte, bool, error) { return r.p.Get(k) }
func (r partitionReader) scan(lo, hi []byte, fn func(k, v []byte) bool) error {
	return r.p.Scan(lo, hi, fn)
}

// observedTime reads a segmented store's observed time (-1: none yet).
func observedTime(r rawReader) (int64, error) {
	b, ok, err := r.get(metaObserved)
	if err != nil || !ok {
		return -1, err
	}
	if len(b) != 8 {
		return -1, fmt.Errorf("damaged observed-time record of %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// liveSegments is the range of segments that may hold data: from the
// lowest live one to the one of the observed time. ok is false for a store
// that observed nothing (and so holds nothing).
func liveSegments(r rawReader, s segments) (lo, hi uint64, ok bool, err error) {
	o, err := observedTime(r)
	if err != nil || o < 0 {
		return 0, 0, false, err
	}
	return s.minLive(o), s.id(o), true, nil
}

// fetchWindows calls fn for the windows of kb starting in [from, to], in
// start order.
func fetchWindows(r rawReader, s segments, kb []byte, from, to int64, fn func(start int64, v []byte) bool) error {
	lo, hi, ok, err := liveSegments(r, s)
	if err != nil || !ok || to < from || to < 0 {
		return err
	}
	from = max(from, 0)
	lo, hi = max(lo, s.id(from)), min(hi, s.id(to))
	stop := false
	for seg := lo; seg <= hi && !stop; seg++ {
		p := keyPrefix(seg, kb)
		start := binary.BigEndian.AppendUint64(bytes.Clone(p), uint64(from))
		var end []byte
		if to == math.MaxInt64 {
			end = state.PrefixEnd(p)
		} else {
			end = binary.BigEndian.AppendUint64(bytes.Clone(p), uint64(to+1))
		}
		err := r.scan(start, end, func(k, v []byte) bool {
			// A copy: the iterator reuses its buffers, and callers keep
			// what they decode (or the bytes themselves).
			if !fn(int64(binary.BigEndian.Uint64(k[len(k)-8:])), bytes.Clone(v)) {
				stop = true
			}
			return !stop
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// findSessions calls fn for the sessions of kb that end at or after
// earliestEnd and start at or before latestStart, in end order.
func findSessions(r rawReader, s segments, kb []byte, earliestEnd, latestStart int64, fn func(start, end int64, v []byte) bool) error {
	lo, hi, ok, err := liveSegments(r, s)
	if err != nil || !ok {
		return err
	}
	earliestEnd = max(earliestEnd, 0)
	lo = max(lo, s.id(earliestEnd))
	stop := false
	for seg := lo; seg <= hi && !stop; seg++ {
		p := keyPrefix(seg, kb)
		start := binary.BigEndian.AppendUint64(bytes.Clone(p), uint64(earliestEnd))
		err := r.scan(start, state.PrefixEnd(p), func(k, v []byte) bool {
			end := int64(binary.BigEndian.Uint64(k[len(k)-16:]))
			st := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
			if st <= latestStart && !fn(st, end, bytes.Clone(v)) {
				stop = true
			}
			return !stop
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// segmented is what the typed window and session stores share: the
// observed time and expiry of one store handle.
type segmented struct {
	h   *storeHandle
	seg segments
	// dropped is the segment below which this handle's transaction has
	// already deleted everything (0: nothing yet). It only saves repeating
	// a range deletion; the observed time itself lives in the store, as a
	// processor's fields do not survive an abort.
	dropped uint64
}

// observe advances the store's observed time to ts (if later) and drops
// the segments that fell out of retention. It returns the observed time.
func (s *segmented) observe(ts int64) (int64, error) {
	o, err := observedTime(handleReader{s.h})
	if err != nil {
		return -1, err
	}
	if ts <= o {
		return o, nil
	}
	if err := s.h.put(metaObserved, binary.BigEndian.AppendUint64(nil, uint64(ts))); err != nil {
		return -1, err
	}
	if live := s.seg.minLive(ts); live > s.dropped {
		if err := s.h.txn.DeleteRange(s.h.part, segKey(0), segKey(live)); err != nil {
			return -1, err
		}
		s.dropped = live
	}
	return ts, nil
}

func (s *segmented) observedTime() (time.Time, bool, error) {
	o, err := observedTime(handleReader{s.h})
	if err != nil || o < 0 {
		return time.Time{}, false, err
	}
	return time.UnixMilli(o), true, nil
}

// sweeper returns the restore-time expiry of a segmented store: it drops
// the segments the restored observed time says are expired, which the
// changelog, written without tombstones for them, brought back.
func sweeper(s segments) func(p *state.Partition) error {
	return func(p *state.Partition) error {
		o, err := observedTime(partitionReader{p})
		if err != nil || o < 0 {
			return err
		}
		if live := s.minLive(o); live > 0 {
			return p.DeleteRange(segKey(0), segKey(live))
		}
		return nil
	}
}

// changelogConfigs are the topic configs of the store's changelog.
func (s *storeSpec) changelogConfigs() map[string]*string {
	policy := "compact"
	cfg := map[string]*string{"cleanup.policy": &policy}
	if s.kind == kindWindow || s.kind == kindSession {
		policy = "compact,delete"
		ms := strconv.FormatInt((s.retention + changelogExtraRetention).Milliseconds(), 10)
		cfg["retention.ms"] = &ms
	}
	return cfg
}

// WithRetention keeps a window or session store's data for d behind the
// highest time it observed (default: window size plus grace; for sessions
// the gap plus grace). Interactive queries can then see closed windows
// for longer; it never changes what an aggregation computes.
func WithRetention(d time.Duration) StoreOption { return func(s *storeSpec) { s.retention = d } }

func (t *Topology) addSegmentedStore(name string, kind storeKind, ks, vs any, ka, va anySerde, types string, retention, size time.Duration, opts []StoreOption) *storeSpec {
	s := t.addStore(name, kind, ks, vs, ka, va, types, append([]StoreOption{WithRetention(retention)}, opts...))
	if s.retention < retention {
		t.fail("store %s: retention %v is shorter than %v (window size or gap plus grace)", name, s.retention, retention)
	}
	if s.retention.Milliseconds() < 1 {
		t.fail("store %s: retention %v is below a millisecond", name, s.retention)
	}
	s.window = size
	s.hasMeta = true
	seg := newSegments(s.retention, size)
	s.sweep = sweeper(seg)
	times := 1
	if kind == kindSession {
		times = 2
	}
	s.decodeKey = func(k []byte) (any, error) {
		kb, ts, err := splitKey(k, times)
		if err != nil {
			return nil, err
		}
		key, err := ka.dec(kb)
		if err != nil {
			return nil, err
		}
		if kind == kindSession {
			return windowJSON{Key: key, Start: time.UnixMilli(ts[1]).UTC(), End: time.UnixMilli(ts[0]).UTC()}, nil
		}
		return windowJSON{Key: key, Start: time.UnixMilli(ts[0]).UTC(), End: time.UnixMilli(ts[0] + seg.size).UTC()}, nil
	}
	return s
}

// windowJSON is how interactive queries print a window.
type windowJSON struct {
	Key   any       `json:"key"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

func (s *storeSpec) segments() segments { return newSegments(s.retention, s.window) }

// AddWindowStore declares a window store for processors: values per key
// and window start, windows of the given size, kept for retention behind
// the highest time the store observed (at least size).
func AddWindowStore[K, V any](t *Topology, name string, ks Serde[K], vs Serde[V], size, retention time.Duration, opts ...StoreOption) {
	if size.Milliseconds() < 1 {
		t.fail("window store %s: size %v is below a millisecond", name, size)
	}
	opts = append([]StoreOption{WithRetention(retention)}, opts...)
	t.addSegmentedStore(name, kindWindow, ks, vs, erase(ks), erase(vs), fmt.Sprintf("%T to %T", *new(K), *new(V)), size, size, opts)
}

// AddSessionStore declares a session store for processors: values per key
// and session, kept for retention behind the highest time the store
// observed.
func AddSessionStore[K, V any](t *Topology, name string, ks Serde[K], vs Serde[V], retention time.Duration, opts ...StoreOption) {
	opts = append([]StoreOption{WithRetention(retention)}, opts...)
	t.addSegmentedStore(name, kindSession, ks, vs, erase(ks), erase(vs), fmt.Sprintf("%T to %T", *new(K), *new(V)), time.Millisecond, 0, opts)
}

// WindowStore is a typed window store: one value per key and window start.
// As with KeyValueStore, reads see this task's writes of the current
// transaction and interactive queries see what was committed.
//
// A store keeps windows for its retention behind the highest time it
// observed (Observe, and the start of every window Put): older segments
// are dropped, and a Put of a window that old is ignored.
type WindowStore[K, V any] interface {
	Put(k K, start time.Time, v V) error
	Delete(k K, start time.Time) error
	Get(k K, start time.Time) (v V, ok bool, err error)
	// Fetch calls fn for the windows of k starting in [from, to], oldest
	// first, until fn returns false.
	Fetch(k K, from, to time.Time, fn func(w Windowed[K], v V) bool) error
	// All calls fn for every window, by segment then key then start.
	All(fn func(w Windowed[K], v V) bool) error
	// Observe advances the store's observed time (stream time, for an
	// aggregation) to t if t is later, expiring what falls behind it.
	Observe(t time.Time) error
	// ObservedTime is the highest time observed; ok is false before any.
	ObservedTime() (t time.Time, ok bool, err error)
}

// SessionStore is a typed session store: one value per key and session (a
// window whose end is its last record's time, inclusive).
type SessionStore[K, V any] interface {
	Put(s Windowed[K], v V) error
	Remove(s Windowed[K]) error
	// FindSessions calls fn for the sessions of k that end at or after
	// earliestEnd and start at or before latestStart, by end, until fn
	// returns false: with earliestEnd = t - gap and latestStart = t + gap,
	// the sessions a record at t merges with.
	FindSessions(k K, earliestEnd, latestStart time.Time, fn func(s Windowed[K], v V) bool) error
	// All calls fn for every session, by segment then key then end.
	All(fn func(s Windowed[K], v V) bool) error
	Observe(t time.Time) error
	ObservedTime() (t time.Time, ok bool, err error)
}

// WindowStoreOf gives the typed view of a window store.
func WindowStoreOf[K, V any](s AnyStore, err error) (WindowStore[K, V], error) {
	if err != nil {
		return nil, err
	}
	return windowStoreOf[K, V](s.handle())
}

// SessionStoreOf gives the typed view of a session store.
func SessionStoreOf[K, V any](s AnyStore, err error) (SessionStore[K, V], error) {
	if err != nil {
		return nil, err
	}
	return sessionStoreOf[K, V](s.handle())
}

func typedSerdes[K, V any](h *storeHandle, kind storeKind) (Serde[K], Serde[V], error) {
	ks, ok1 := h.spec.keySerde.(Serde[K])
	vs, ok2 := h.spec.valSerde.(Serde[V])
	if !ok1 || !ok2 || h.spec.kind != kind {
		return nil, nil, fmt.Errorf("store %s is a %s store of %s, not a %s store of %T to %T", h.spec.name, h.spec.kind, h.spec.types, kind, *new(K), *new(V))
	}
	return ks, vs, nil
}

func windowStoreOf[K, V any](h *storeHandle) (*windowStore[K, V], error) {
	ks, vs, err := typedSerdes[K, V](h, kindWindow)
	if err != nil {
		return nil, err
	}
	return &windowStore[K, V]{segmented: segmented{h: h, seg: h.spec.segments()}, ks: ks, vs: vs}, nil
}

func sessionStoreOf[K, V any](h *storeHandle) (*sessionStore[K, V], error) {
	ks, vs, err := typedSerdes[K, V](h, kindSession)
	if err != nil {
		return nil, err
	}
	return &sessionStore[K, V]{segmented: segmented{h: h, seg: h.spec.segments()}, ks: ks, vs: vs}, nil
}

type windowStore[K, V any] struct {
	segmented
	ks Serde[K]
	vs Serde[V]
}

func (s *windowStore[K, V]) Observe(t time.Time) error {
	_, err := s.observe(t.UnixMilli())
	return err
}

func (s *windowStore[K, V]) ObservedTime() (time.Time, bool, error) { return s.observedTime() }

func (s *windowStore[K, V]) Put(k K, start time.Time, v V) error {
	return s.put(k, start.UnixMilli(), v)
}

func (s *windowStore[K, V]) put(k K, start int64, v V) error {
	if start < 0 {
		return fmt.Errorf("window store %s: negative window start %d", s.h.spec.name, start)
	}
	o, err := s.observe(start)
	if err != nil {
		return err
	}
	return s.write(k, start, v, o)
}

// write stores a window at observed time o (which the caller has
// observed), unless it is already out of retention.
func (s *windowStore[K, V]) write(k K, start int64, v V, o int64) error {
	if s.seg.expired(start, o) {
		s.h.task.count("dropped-expired", 1)
		return nil
	}
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	vb, err := s.vs.Encode(v)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{}
	}
	return s.h.put(s.seg.windowKey(kb, start), vb)
}

func (s *windowStore[K, V]) Delete(k K, start time.Time) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	return s.h.put(s.seg.windowKey(kb, start.UnixMilli()), nil)
}

func (s *windowStore[K, V]) Get(k K, start time.Time) (V, bool, error) {
	return s.get(k, start.UnixMilli())
}

func (s *windowStore[K, V]) get(k K, start int64) (V, bool, error) {
	var zero V
	kb, err := s.ks.Encode(k)
	if err != nil {
		return zero, false, err
	}
	b, ok, err := s.h.get(s.seg.windowKey(kb, start))
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vs.Decode(b)
	return v, err == nil, err
}

func (s *windowStore[K, V]) window(k K, start int64) Windowed[K] {
	return Windowed[K]{Key: k, Start: time.UnixMilli(start), End: time.UnixMilli(start + s.seg.size)}
}

func (s *windowStore[K, V]) Fetch(k K, from, to time.Time, fn func(Windowed[K], V) bool) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	var derr error
	err = fetchWindows(handleReader{s.h}, s.seg, kb, from.UnixMilli(), to.UnixMilli(), func(start int64, vb []byte) bool {
		v, err := s.vs.Decode(vb)
		if err != nil {
			derr = err
			return false
		}
		return fn(s.window(k, start), v)
	})
	if err != nil {
		return err
	}
	return derr
}

func (s *windowStore[K, V]) All(fn func(Windowed[K], V) bool) error {
	return scanSegmented(s.h, 1, s.ks, s.vs, func(k K, ts []int64, v V) bool { return fn(s.window(k, ts[0]), v) })
}

// scanSegmented decodes every data entry of a window (times = 1) or
// session (times = 2) store.
func scanSegmented[K, V any](h *storeHandle, times int, ks Serde[K], vs Serde[V], fn func(k K, ts []int64, v V) bool) error {
	var derr error
	err := h.scan(nil, dataEnd, false, func(kb, vb []byte) bool {
		kb, vb = bytes.Clone(kb), bytes.Clone(vb) // the iterator reuses its buffers
		raw, ts, err := splitKey(kb, times)
		if err != nil {
			derr = err
			return false
		}
		k, err := ks.Decode(raw)
		if err != nil {
			derr = err
			return false
		}
		v, err := vs.Decode(vb)
		if err != nil {
			derr = err
			return false
		}
		return fn(k, ts, v)
	})
	if err != nil {
		return err
	}
	return derr
}

type sessionStore[K, V any] struct {
	segmented
	ks Serde[K]
	vs Serde[V]
}

func (s *sessionStore[K, V]) Observe(t time.Time) error {
	_, err := s.observe(t.UnixMilli())
	return err
}

func (s *sessionStore[K, V]) ObservedTime() (time.Time, bool, error) { return s.observedTime() }

func (s *sessionStore[K, V]) Put(w Windowed[K], v V) error {
	return s.put(w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v)
}

func (s *sessionStore[K, V]) put(k K, start, end int64, v V) error {
	if start < 0 || end < start {
		return fmt.Errorf("session store %s: session [%d, %d] is not a session", s.h.spec.name, start, end)
	}
	o, err := s.observe(end)
	if err != nil {
		return err
	}
	return s.write(k, start, end, v, o)
}

// write stores a session at observed time o (which the caller has
// observed), unless it is already out of retention.
func (s *sessionStore[K, V]) write(k K, start, end int64, v V, o int64) error {
	if s.seg.expired(end, o) {
		s.h.task.count("dropped-expired", 1)
		return nil
	}
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	vb, err := s.vs.Encode(v)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{}
	}
	return s.h.put(s.seg.sessionKey(kb, start, end), vb)
}

func (s *sessionStore[K, V]) Remove(w Windowed[K]) error {
	return s.remove(w.Key, w.Start.UnixMilli(), w.End.UnixMilli())
}

func (s *sessionStore[K, V]) remove(k K, start, end int64) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	return s.h.put(s.seg.sessionKey(kb, start, end), nil)
}

func (s *sessionStore[K, V]) FindSessions(k K, earliestEnd, latestStart time.Time, fn func(Windowed[K], V) bool) error {
	return s.find(k, earliestEnd.UnixMilli(), latestStart.UnixMilli(), func(start, end int64, v V) bool {
		return fn(Windowed[K]{Key: k, Start: time.UnixMilli(start), End: time.UnixMilli(end)}, v)
	})
}

func (s *sessionStore[K, V]) find(k K, earliestEnd, latestStart int64, fn func(start, end int64, v V) bool) error {
	kb, err := s.ks.Encode(k)
	if err != nil {
		return err
	}
	var derr error
	err = findSessions(handleReader{s.h}, s.seg, kb, earliestEnd, latestStart, func(start, end int64, vb []byte) bool {
		v, err := s.vs.Decode(vb)
		if err != nil {
			derr = err
			return false
		}
		return fn(start, end, v)
	})
	if err != nil {
		return err
	}
	return derr
}

func (s *sessionStore[K, V]) All(fn func(Windowed[K], V) bool) error {
	return scanSegmented(s.h, 2, s.ks, s.vs, func(k K, ts []int64, v V) bool {
		return fn(Windowed[K]{Key: k, Start: time.UnixMilli(ts[1]), End: time.UnixMilli(ts[0])}, v)
	})
}
