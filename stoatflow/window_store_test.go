package stoatflow

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/state"
)

// storeTask is a task of partition 0 holding every store of topo over an
// in-memory engine, without Kafka: enough to drive the typed stores.
func storeTask(t *testing.T, topo *Topology) (*task, *state.Engine) {
	t.Helper()
	e, err := state.OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	a := &App{topo: topo, log: slog.New(slog.DiscardHandler)}
	a.metrics = newMetrics(a)
	tk := &task{app: a, counters: map[string]int64{}, stores: map[string]*storeHandle{}, txns: map[*state.Engine]*state.Txn{}}
	txn := e.NewTxn()
	tk.txns[e] = txn
	for name, s := range topo.stores {
		tk.stores[name] = &storeHandle{spec: s, task: tk, part: e.Partition(name, 0), txn: txn, dirty: map[string][]byte{}, clOffset: -1}
	}
	return tk, e
}

func ms(n int64) time.Time { return time.UnixMilli(n) }

type win struct {
	key        string
	start, end int64
	v          int64
}

func TestWindowStore(t *testing.T) {
	topo := NewTopology()
	AddWindowStore(topo, "w", String, Int64, 10*time.Second, 20*time.Second)
	AddKeyValueStore(topo, "kv", String, Int64)
	tk, _ := storeTask(t, topo)
	ws, err := WindowStoreOf[string, int64](tk.stores["w"], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WindowStoreOf[string, string](tk.stores["w"], nil); err == nil {
		t.Error("WindowStoreOf with the wrong value type: no error")
	}
	if _, err := KeyValueStoreOf[string, int64](tk.stores["w"], nil); err == nil {
		t.Error("KeyValueStoreOf of a window store: no error")
	}
	if _, err := WindowStoreOf[string, int64](tk.stores["kv"], nil); err == nil {
		t.Error("WindowStoreOf of a key-value store: no error")
	}
	for _, w := range []win{{"k1", 0, 0, 1}, {"k1", 10000, 0, 2}, {"k1", 20000, 0, 3}, {"k2", 10000, 0, 4}, {"k10", 10000, 0, 5}} {
		if err := ws.Put(w.key, ms(w.start), w.v); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(k string, from, to int64) []win {
		var got []win
		if err := ws.Fetch(k, ms(from), ms(to), func(w Windowed[string], v int64) bool {
			got = append(got, win{w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got, want := fetch("k1", 0, 15000), []win{{"k1", 0, 10000, 1}, {"k1", 10000, 20000, 2}}; !slices.Equal(got, want) {
		t.Errorf("Fetch(k1, 0, 15s) = %v, want %v", got, want)
	}
	if got, want := fetch("k1", 10000, 20000), []win{{"k1", 10000, 20000, 2}, {"k1", 20000, 30000, 3}}; !slices.Equal(got, want) {
		t.Errorf("Fetch(k1, 10s, 20s) = %v, want %v (both bounds included)", got, want)
	}
	if v, ok, err := ws.Get("k2", ms(10000)); err != nil || !ok || v != 4 {
		t.Errorf("Get(k2, 10s) = %d, %v, %v", v, ok, err)
	}
	if _, ok, _ := ws.Get("k2", ms(0)); ok {
		t.Error("Get(k2, 0) found a window never put")
	}
	var all []win
	ws.All(func(w Windowed[string], v int64) bool {
		all = append(all, win{w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v})
		return true
	})
	// By segment (10 s each: half the retention), then key, then start.
	want := []win{{"k1", 0, 10000, 1}, {"k1", 10000, 20000, 2}, {"k2", 10000, 20000, 4}, {"k10", 10000, 20000, 5}, {"k1", 20000, 30000, 3}}
	if !slices.Equal(all, want) {
		t.Errorf("All = %v, want %v", all, want)
	}
	if o, ok, err := ws.ObservedTime(); err != nil || !ok || o.UnixMilli() != 20000 {
		t.Errorf("ObservedTime = %v, %v, %v; want 20 s (the latest start put)", o, ok, err)
	}

	// At 45 s, windows starting before 25 s + 1 ms are out of retention:
	// segments 0 and 1 go whole, segment 2 (20 s to 30 s) stays.
	if err := ws.Observe(ms(45000)); err != nil {
		t.Fatal(err)
	}
	if got, want := fetch("k1", 0, 1<<40), []win{{"k1", 20000, 30000, 3}}; !slices.Equal(got, want) {
		t.Errorf("after expiry Fetch(k1) = %v, want %v", got, want)
	}
	if err := ws.Put("k3", ms(5000), 9); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ws.Get("k3", ms(5000)); ok || tk.counters["dropped-expired"] != 1 {
		t.Errorf("a Put of an expired window was kept (dropped-expired = %d)", tk.counters["dropped-expired"])
	}
	// The changelog gets the puts and the observed time, never the
	// expiry: it is local.
	h := tk.stores["w"]
	if len(h.dirty) != 6 || h.dirty[string(metaObserved)] == nil {
		t.Errorf("dirty holds %d keys, want 5 windows and the observed time", len(h.dirty))
	}
	if err := h.txn.Apply(); err != nil {
		t.Fatal(err)
	}
	var keys int
	h.part.Scan(nil, nil, func(k, v []byte) bool { keys++; return true })
	if keys != 2 {
		t.Errorf("after commit the partition holds %d keys, want one window and the observed time", keys)
	}
	if cfg := h.spec.changelogConfigs(); *cfg["cleanup.policy"] != "compact,delete" || *cfg["retention.ms"] != "86420000" {
		t.Errorf("changelog configs %s, %s", *cfg["cleanup.policy"], *cfg["retention.ms"])
	}
	if cfg := tk.stores["kv"].spec.changelogConfigs(); *cfg["cleanup.policy"] != "compact" || cfg["retention.ms"] != nil {
		t.Errorf("key-value changelog configs %v", cfg)
	}
}

// TestWindowStoreSweep replays a changelog holding windows that expired
// before the last commit (expiry writes no tombstones): the sweep a task
// runs as it starts drops them.
func TestWindowStoreSweep(t *testing.T) {
	topo := NewTopology()
	AddWindowStore(topo, "w", String, Int64, 10*time.Second, 20*time.Second)
	e, err := state.OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	spec := topo.stores["w"]
	seg := spec.segments()
	p := e.Partition("w", 0)
	r := e.NewRestorer()
	val := Int64.Encode
	for i, start := range []int64{0, 10000, 20000, 30000} {
		b, _ := val(int64(i))
		r.Apply(p, seg.windowKey([]byte("k"), start), b, int64(i))
	}
	r.Apply(p, metaObserved, []byte{0, 0, 0, 0, 0, 0, 0xaf, 0xc8}, 4) // 45 s
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := spec.sweep(p); err != nil {
		t.Fatal(err)
	}
	var starts []int64
	p.Scan(nil, dataEnd, func(k, _ []byte) bool {
		_, ts, err := splitKey(k, 1)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, ts[0])
		return true
	})
	if !slices.Equal(starts, []int64{20000, 30000}) {
		t.Errorf("after the sweep the windows start at %v, want [20000 30000]", starts)
	}
	if off, ok, _ := p.Offset(); !ok || off != 4 {
		t.Errorf("the sweep moved the offset to %d, %v", off, ok)
	}
	k, err := spec.decodeKey(seg.windowKey([]byte("k"), 20000))
	if wj, ok := k.(windowJSON); err != nil || !ok || wj.Key != "k" || wj.Start.UnixMilli() != 20000 || wj.End.UnixMilli() != 30000 {
		t.Errorf("decodeKey = %#v, %v", k, err)
	}
}

func TestSessionStore(t *testing.T) {
	topo := NewTopology()
	AddSessionStore(topo, "s", String, Int64, 20*time.Second)
	tk, _ := storeTask(t, topo)
	ss, err := SessionStoreOf[string, int64](tk.stores["s"], nil)
	if err != nil {
		t.Fatal(err)
	}
	sess := func(k string, start, end int64) Windowed[string] {
		return Windowed[string]{Key: k, Start: ms(start), End: ms(end)}
	}
	for i, w := range []Windowed[string]{sess("k1", 0, 5000), sess("k1", 20000, 22000), sess("k2", 3000, 4000), sess("k1", 8000, 8000)} {
		if err := ss.Put(w, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	find := func(k string, earliestEnd, latestStart int64) []win {
		var got []win
		if err := ss.FindSessions(k, ms(earliestEnd), ms(latestStart), func(w Windowed[string], v int64) bool {
			got = append(got, win{w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got, want := find("k1", 4000, 21000), []win{{"k1", 0, 5000, 0}, {"k1", 8000, 8000, 3}, {"k1", 20000, 22000, 1}}; !slices.Equal(got, want) {
		t.Errorf("FindSessions(k1, 4 s, 21 s) = %v, want %v", got, want)
	}
	if got, want := find("k1", 6000, 10000), []win{{"k1", 8000, 8000, 3}}; !slices.Equal(got, want) {
		t.Errorf("FindSessions(k1, 6 s, 10 s) = %v, want %v", got, want)
	}
	if got := find("k2", 4001, 1<<40); len(got) != 0 {
		t.Errorf("FindSessions(k2, after its end) = %v", got)
	}
	if err := ss.Remove(sess("k1", 0, 5000)); err != nil {
		t.Fatal(err)
	}
	if got, want := find("k1", 0, 1<<40), []win{{"k1", 8000, 8000, 3}, {"k1", 20000, 22000, 1}}; !slices.Equal(got, want) {
		t.Errorf("after Remove FindSessions(k1) = %v, want %v", got, want)
	}
	// Sessions expire by their end, a segment (10 s) at a time: at 30 s
	// segment 0, whose sessions end before 10 s.
	if err := ss.Observe(ms(30000)); err != nil {
		t.Fatal(err)
	}
	var all []win
	ss.All(func(w Windowed[string], v int64) bool {
		all = append(all, win{w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v})
		return true
	})
	if want := []win{{"k1", 20000, 22000, 1}}; !slices.Equal(all, want) {
		t.Errorf("after expiry All = %v, want %v", all, want)
	}
}

func TestWindowedSerde(t *testing.T) {
	s := WindowedSerde[string](String)
	w := Windowed[string]{Key: "a@b", Start: ms(1000), End: ms(2000)}
	b, err := s.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Decode(b)
	if err != nil || got.Key != w.Key || !got.Start.Equal(w.Start) || !got.End.Equal(w.End) {
		t.Errorf("Decode(Encode(%v)) = %v, %v", w, got, err)
	}
	for _, text := range []string{"a@b@1000/2000", "a@b@1970-01-01T00:00:01Z/1970-01-01T00:00:02Z"} {
		got, err := s.ParseText(text)
		if err != nil || got.Key != w.Key || !got.Start.Equal(w.Start) || !got.End.Equal(w.End) {
			t.Errorf("ParseText(%q) = %v, %v", text, got, err)
		}
	}
	if _, err := s.Decode([]byte("short")); err == nil {
		t.Error("Decode of 5 bytes: no error")
	}
}

// TestWindowTopologyErrors checks what the DSL refuses.
func TestWindowTopologyErrors(t *testing.T) {
	for name, build := range map[string]func(*Topology){
		"advance above size": func(topo *Topology) {
			g := Source(topo, String, String, []string{"in"}).GroupByKey(String, String)
			WindowedBy(g, Hopping(time.Second, 2*time.Second, 0)).Count("c")
		},
		"retention below size plus grace": func(topo *Topology) {
			g := Source(topo, String, String, []string{"in"}).GroupByKey(String, String)
			WindowedBy(g, Tumbling(time.Minute, time.Second)).Count("c", WithRetention(time.Second))
		},
		"suppress of a key-value table": func(topo *Topology) {
			c := Source(topo, String, String, []string{"in"}).GroupByKey(String, String).Count("c")
			Suppress(Table[Windowed[string], int64]{t: c.t, n: c.n, store: c.store}, UntilWindowCloses)
		},
		"join of a windowed table": func(topo *Topology) {
			s := Source(topo, String, String, []string{"in"})
			c := WindowedBy(s.GroupByKey(String, String), Tumbling(time.Minute, 0)).Count("c")
			JoinTables(c, c, "j", func(a, b int64) int64 { return a + b }, Int64)
		},
	} {
		topo := NewTopology()
		build(topo)
		if _, err := topo.compile(); err == nil {
			t.Errorf("%s: the topology compiled", name)
		}
	}
}
