package stoatflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// Interactive queries of window and session stores. A window store's keys
// are composite (segment, key, window), so the key-value forms are read
// this way instead:
//
//	GET /state/<store>/<key>[?from=&to=]
//	    every window of key: for a window store those starting in
//	    [from, to]; for a session store those ending at or after from and
//	    starting at or before to (FindSessions). Times are milliseconds
//	    since the epoch or RFC 3339; both are open by default.
//	    {"store", "key", "windows": [{"start", "end", "value", "partition"}]},
//	    404 when there is none.
//	GET /state/<store>[?prefix=&key=&from=&to=&limit=]
//	    the windows of every key, by key bytes then start: prefix keeps the
//	    keys whose encoded bytes start with the encoding of prefix (as for a
//	    key-value store), key a single key; from and to bound the windows as
//	    above. {"store", "entries": [{"key": {"key", "start", "end"}, "value"}]}.
//
// Only the windows within the store's retention behind its observed time
// are listed.

// windowBounds reads the from and to parameters (open by default).
func windowBounds(r *http.Request) (from, to int64, err error) {
	from, to = 0, math.MaxInt64
	q := r.URL.Query()
	if s := q.Get("from"); s != "" {
		t, err := parseTime(s)
		if err != nil {
			return 0, 0, fmt.Errorf("from: %w", err)
		}
		from = t.UnixMilli()
	}
	if s := q.Get("to"); s != "" {
		t, err := parseTime(s)
		if err != nil {
			return 0, 0, fmt.Errorf("to: %w", err)
		}
		to = t.UnixMilli()
	}
	return from, to, nil
}

// windowEntry is one window read by a query.
type windowEntry struct {
	kb         []byte
	start, end int64
	vb         []byte
	partition  int
}

// readWindows collects the windows of one key (kb non-nil) or of every key
// across the store's partitions.
func (a *App) readWindows(s *storeSpec, parts int, kb []byte, from, to int64) ([]windowEntry, error) {
	seg := s.segments()
	var out []windowEntry
	for p := 0; p < parts; p++ {
		rd := partitionReader{a.engineFor(s).Partition(s.name, int32(p))}
		var err error
		switch {
		case kb != nil && s.kind == kindWindow:
			err = fetchWindows(rd, seg, kb, from, to, func(start int64, vb []byte) bool {
				out = append(out, windowEntry{kb: kb, start: start, end: start + seg.size, vb: vb, partition: p})
				return true
			})
		case kb != nil:
			err = findSessions(rd, seg, kb, from, to, func(start, end int64, vb []byte) bool {
				out = append(out, windowEntry{kb: kb, start: start, end: end, vb: vb, partition: p})
				return true
			})
		default:
			err = scanLive(rd, s, seg, func(e windowEntry) bool {
				in := e.start >= from && e.start <= to
				if s.kind == kindSession {
					in = e.end >= from && e.start <= to
				}
				if in {
					e.partition = p
					out = append(out, e)
				}
				return true
			})
		}
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if c := bytes.Compare(out[i].kb, out[j].kb); c != 0 {
			return c < 0
		}
		if out[i].start != out[j].start {
			return out[i].start < out[j].start
		}
		return out[i].end < out[j].end
	})
	return out, nil
}

// scanLive calls fn for every window of a partition in the live segments.
func scanLive(rd rawReader, s *storeSpec, seg segments, fn func(windowEntry) bool) error {
	lo, _, ok, err := liveSegments(rd, seg)
	if err != nil || !ok {
		return err
	}
	times := 1
	if s.kind == kindSession {
		times = 2
	}
	var derr error
	err = rd.scan(segKey(lo), dataEnd, func(k, v []byte) bool {
		kb, ts, err := splitKey(k, times)
		if err != nil {
			derr = err
			return false
		}
		e := windowEntry{kb: bytes.Clone(kb), vb: bytes.Clone(v)}
		if times == 1 {
			e.start, e.end = ts[0], ts[0]+seg.size
		} else {
			e.start, e.end = ts[1], ts[0]
		}
		return fn(e)
	})
	return errors.Join(err, derr)
}

func (a *App) serveWindowGet(w http.ResponseWriter, r *http.Request, s *storeSpec, parts int) {
	k, err := s.keyAny.parse(r.PathValue("key"))
	if err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("key: %w", err))
		return
	}
	kb, err := s.keyAny.enc(k)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if kb == nil {
		kb = []byte{} // nil would mean every key
	}
	from, to, err := windowBounds(r)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	a.setLagHeader(w, s)
	es, err := a.readWindows(s, parts, kb, from, to)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	if len(es) == 0 {
		httpError(w, http.StatusNotFound, fmt.Errorf("store %s has no window of key %q", s.name, r.PathValue("key")))
		return
	}
	type win struct {
		Start     time.Time `json:"start"`
		End       time.Time `json:"end"`
		Value     any       `json:"value"`
		Partition int       `json:"partition"`
	}
	out := make([]win, 0, len(es))
	for _, e := range es {
		v, err := s.valAny.dec(e.vb)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		out = append(out, win{Start: time.UnixMilli(e.start).UTC(), End: time.UnixMilli(e.end).UTC(), Value: v, Partition: e.partition})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"store": s.name, "key": k, "windows": out})
}

func (a *App) serveWindowRange(w http.ResponseWriter, r *http.Request, s *storeSpec, parts int) {
	q := r.URL.Query()
	limit := 1000
	if l := q.Get("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			httpError(w, http.StatusBadRequest, fmt.Errorf("limit: %q is not a positive number", l))
			return
		}
	}
	keyBytes := func(name string) ([]byte, error) {
		t := q.Get(name)
		if t == "" {
			return nil, nil
		}
		if s.keyAny.parse == nil {
			return nil, fmt.Errorf("store %s: its key serde has no text form", s.name)
		}
		k, err := s.keyAny.parse(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		b, err := s.keyAny.enc(k)
		if b == nil && err == nil {
			b = []byte{}
		}
		return b, err
	}
	pre, err1 := keyBytes("prefix")
	exact, err2 := keyBytes("key")
	from, to, err3 := windowBounds(r)
	if err := errors.Join(err1, err2, err3); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	a.setLagHeader(w, s)
	es, err := a.readWindows(s, parts, exact, from, to)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	type kv struct {
		Key windowJSON `json:"key"`
		Val any        `json:"value"`
	}
	out := []kv{}
	for _, e := range es {
		if pre != nil && !bytes.HasPrefix(e.kb, pre) {
			continue
		}
		if len(out) == limit {
			break
		}
		k, err := s.keyAny.dec(e.kb)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		v, err := s.valAny.dec(e.vb)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		out = append(out, kv{Key: windowJSON{Key: k, Start: time.UnixMilli(e.start).UTC(), End: time.UnixMilli(e.end).UTC()}, Val: v})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"store": s.name, "entries": out})
}

// QueryWindows reads the committed windows of k in a window or session
// store of a running App, oldest first: what GET /state/<store>/<key>
// answers. For a window store from and to bound the window start; for a
// session store a session must end at or after from and start at or
// before to. A zero to is open.
func QueryWindows[K, V any](a *App, store string, k K, from, to time.Time) ([]KeyValue[Windowed[K], V], error) {
	s, parts, err := a.queryStore(store)
	if err != nil {
		return nil, err
	}
	ks, ok1 := s.keySerde.(Serde[K])
	vs, ok2 := s.valSerde.(Serde[V])
	if !ok1 || !ok2 || (s.kind != kindWindow && s.kind != kindSession) {
		return nil, fmt.Errorf("store %s is a %s store of %s, not a window or session store of %T to %T", s.name, s.kind, s.types, *new(K), *new(V))
	}
	kb, err := ks.Encode(k)
	if err != nil {
		return nil, err
	}
	if kb == nil {
		kb = []byte{}
	}
	hi := int64(math.MaxInt64)
	if !to.IsZero() {
		hi = to.UnixMilli()
	}
	es, err := a.readWindows(s, parts, kb, from.UnixMilli(), hi)
	if err != nil {
		return nil, err
	}
	out := make([]KeyValue[Windowed[K], V], 0, len(es))
	for _, e := range es {
		v, err := vs.Decode(e.vb)
		if err != nil {
			return nil, err
		}
		out = append(out, KeyValue[Windowed[K], V]{Key: Windowed[K]{Key: k, Start: time.UnixMilli(e.start), End: time.UnixMilli(e.end)}, Value: v})
	}
	return out, nil
}
