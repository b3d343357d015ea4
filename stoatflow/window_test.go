package stoatflow

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The windowed model: per input partition, stream time is the highest
// timestamp seen so far (the current record's included). A time window
// [start, end) accepts a record while end + grace > stream time, a session
// [start, end] while end + gap + grace >= stream time; Suppress emits a
// window once stream time reaches that close.

var windowBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// winKey prints a windowed key as the tests compare it.
func winKey(k string, start, end int64) string { return fmt.Sprintf("%s@%d/%d", k, start, end) }

var windowedString = WindowedSerde[string](String)

func windowedText(b []byte) string {
	w, err := windowedString.Decode(b)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return winKey(w.Key, w.Start.UnixMilli(), w.End.UnixMilli())
}

// winModel is the reference of one windowed aggregation over a stream of
// int values.
type winModel struct {
	size, advance, grace int64 // time windows
	gap                  int64 // sessions (session is set)
	session              bool
	// fold combines (nil first: the first value) and merge combines two
	// sessions' aggregates.
	fold  func(agg *int64, v int) int64
	merge func(a, b int64) int64

	observed map[int32]int64
	aggs     map[string]int64 // by winKey, current (time windows)
	sessions map[string][]modelSession
	updates  []kv
	closeAt  map[string]int64 // by winKey
	part     map[string]int32 // by winKey
	windows  map[string]modelWindow
	late     int
}

type modelWindow struct {
	key        string
	start, end int64
}

type modelSession struct {
	start, end int64
	agg        int64
}

func newWinModel(m winModel) *winModel {
	m.observed, m.aggs, m.sessions = map[int32]int64{}, map[string]int64{}, map[string][]modelSession{}
	m.closeAt, m.part, m.windows = map[string]int64{}, map[string]int32{}, map[string]modelWindow{}
	return &m
}

func (m *winModel) emit(p int32, k string, start, end int64, v *int64) {
	wk := winKey(k, start, end)
	m.windows[wk] = modelWindow{k, start, end}
	if v == nil {
		m.updates = append(m.updates, kv{wk, nil})
		return
	}
	m.updates = append(m.updates, kv{wk, sp(strconv.FormatInt(*v, 10))})
	m.part[wk] = p
	if m.session {
		m.closeAt[wk] = end + m.gap + m.grace + 1
	} else {
		m.closeAt[wk] = end + m.grace
	}
}

func (m *winModel) add(r in) {
	o, seen := m.observed[r.partition]
	if !seen || r.ts > o {
		o = r.ts
	}
	m.observed[r.partition] = o
	v := num(*r.value)
	if !m.session {
		first := max(0, r.ts-m.size+m.advance) / m.advance * m.advance
		for start := first; start <= r.ts; start += m.advance {
			end := start + m.size
			if end+m.grace <= o {
				m.late++
				continue
			}
			wk := winKey(r.key, start, end)
			var next int64
			if agg, ok := m.aggs[wk]; ok {
				next = m.fold(&agg, v)
			} else {
				next = m.fold(nil, v)
			}
			m.aggs[wk] = next
			m.emit(r.partition, r.key, start, end, &next)
		}
		return
	}
	closeAt := func(end int64) int64 { return end + m.gap + m.grace + 1 }
	if closeAt(r.ts) <= o {
		m.late++
		return
	}
	var keep, found []modelSession
	for _, s := range m.sessions[r.key] {
		if s.end >= r.ts-m.gap && s.start <= r.ts+m.gap && closeAt(s.end) > o {
			found = append(found, s)
		} else {
			keep = append(keep, s)
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].end < found[j].end })
	start, end := r.ts, r.ts
	var acc *int64
	for _, s := range found {
		start, end = min(start, s.start), max(end, s.end)
		if acc == nil {
			a := s.agg
			acc = &a
		} else {
			*acc = m.merge(*acc, s.agg)
		}
	}
	next := m.fold(acc, v)
	for _, s := range found {
		if s.start != start || s.end != end {
			m.emit(r.partition, r.key, s.start, s.end, nil)
		}
	}
	m.sessions[r.key] = append(keep, modelSession{start, end, next})
	m.emit(r.partition, r.key, start, end, &next)
}

// suppressed is what Suppress emits over the model: the final value of
// every window (that was not merged away) once it closed.
func (m *winModel) suppressed() []kv {
	final := finalState(m.updates)
	var res []kv
	for wk, v := range final {
		if m.closeAt[wk] <= m.observed[m.part[wk]] {
			res = append(res, kv{wk, sp(v)})
		}
	}
	return res
}

func countFold(agg *int64, _ int) int64 {
	if agg == nil {
		return 1
	}
	return *agg + 1
}

func sumFold(agg *int64, v int) int64 {
	if agg == nil {
		return int64(v)
	}
	return *agg + int64(v)
}

// windowInput is events over keys k0..k4 in two partitions, about 0.5 s
// apart, mostly a little out of order, some much (beyond the graces used
// here), from windowBase + startMs on.
func windowInput(topic string, n int, startMs int64, seed uint64) []in {
	rng := rand.New(rand.NewPCG(seed, 11))
	var recs []in
	for i := range n {
		k := fmt.Sprintf("k%d", rng.IntN(5))
		ts := windowBase + startMs + int64(i)*500
		switch x := rng.IntN(100); {
		case x < 70:
			ts -= int64(rng.IntN(3000))
		case x < 90:
			ts -= 3000 + int64(rng.IntN(6000))
		default:
			ts -= 15000 + int64(rng.IntN(25000))
		}
		recs = append(recs, in{topic: topic, key: k, value: sp(itoa(rng.IntN(100))), ts: max(ts, windowBase), partition: keyPartition([]byte(k), 2)})
	}
	return recs
}

// flushInput is one record per partition far ahead of the input, which
// closes every window before it.
func flushInput(topic string, ts int64) []in {
	var recs []in
	for p := int32(0); p < 2; p++ {
		for i := 0; ; i++ {
			k := fmt.Sprintf("flush%d", i)
			if keyPartition([]byte(k), 2) == p {
				recs = append(recs, in{topic: topic, key: k, value: sp("0"), ts: ts, partition: p})
				break
			}
		}
	}
	return recs
}

func TestWindowedAggregations(t *testing.T) {
	bs := sharedMoonMQ(t)
	input := unique(t, "in")
	outs := map[string]string{}
	for _, op := range []string{"tumbling-count", "hopping-count", "session-count", "tumbling-reduce", "hopping-aggregate", "session-reduce", "suppressed-tumbling", "suppressed-session"} {
		outs[op] = unique(t, op)
	}
	createTopics(t, bs, 2, input)
	createTopics(t, bs, 2, topicsOf(outs)...)
	recs := windowInput(input, 160, 0, 5)
	flush := flushInput(input, windowBase+600_000)

	sec := func(n int64) time.Duration { return time.Duration(n) * time.Second }
	topo := NewTopology()
	s := Source(topo, String, String, []string{input})
	g := s.GroupByKey(String, String)
	ints := MapValues(s, func(v string) int64 { return int64(num(v)) }).GroupByKey(String, Int64)
	tumbling := WindowedBy(g, Tumbling(sec(10), sec(5))).Count("tumbling-count")
	tumbling.ToStream().To(outs["tumbling-count"], windowedString, Decimal)
	WindowedBy(g, Hopping(sec(10), sec(5), sec(2))).Count("hopping-count").ToStream().To(outs["hopping-count"], windowedString, Decimal)
	sessions := SessionWindowedBy(g, Sessions(sec(3), sec(2))).Count("session-count")
	sessions.ToStream().To(outs["session-count"], windowedString, Decimal)
	WindowedBy(ints, Tumbling(sec(10), sec(5))).Reduce("tumbling-reduce", func(a, v int64) int64 { return a + v }).
		ToStream().To(outs["tumbling-reduce"], windowedString, Decimal)
	AggregateWindows(WindowedBy(ints, Hopping(sec(10), sec(5), sec(2))), "hopping-aggregate", func() int64 { return 0 },
		func(_ string, v, a int64) int64 { return a*7 + v }, Decimal).ToStream().To(outs["hopping-aggregate"], windowedString, Decimal)
	SessionWindowedBy(ints, Sessions(sec(3), sec(2))).Reduce("session-reduce", func(a, v int64) int64 { return a + v }).
		ToStream().To(outs["session-reduce"], windowedString, Decimal)
	Suppress(tumbling, UntilWindowCloses).ToStream().To(outs["suppressed-tumbling"], windowedString, Decimal)
	Suppress(sessions, UntilWindowCloses).ToStream().To(outs["suppressed-session"], windowedString, Decimal)

	models := map[string]*winModel{
		"tumbling-count":  newWinModel(winModel{size: 10000, advance: 10000, grace: 5000, fold: countFold}),
		"hopping-count":   newWinModel(winModel{size: 10000, advance: 5000, grace: 2000, fold: countFold}),
		"session-count":   newWinModel(winModel{gap: 3000, grace: 2000, session: true, fold: countFold, merge: func(a, b int64) int64 { return a + b }}),
		"tumbling-reduce": newWinModel(winModel{size: 10000, advance: 10000, grace: 5000, fold: sumFold}),
		"hopping-aggregate": newWinModel(winModel{size: 10000, advance: 5000, grace: 2000, fold: func(a *int64, v int) int64 {
			if a == nil {
				return int64(v)
			}
			return *a*7 + int64(v)
		}}),
		"session-reduce": newWinModel(winModel{gap: 3000, grace: 2000, session: true, fold: sumFold, merge: func(a, b int64) int64 { return a + b }}),
	}
	feed := func(rs []in) {
		for _, r := range rs {
			for _, m := range models {
				m.add(r)
			}
		}
	}
	check := func(settle time.Duration, o *outputs, withSuppressed bool) {
		var exps []expectation
		for op, m := range models {
			want := m.updates
			exps = append(exps, expectation{outs[op], func(got []out) error {
				return sameSequences(decodeAll(got, windowedText, plainText), want)
			}})
		}
		if withSuppressed {
			for op, from := range map[string]string{"suppressed-tumbling": "tumbling-count", "suppressed-session": "session-count"} {
				want := models[from].suppressed()
				exps = append(exps, expectation{outs[op], func(got []out) error {
					return sameSequences(decodeAll(got, windowedText, plainText), want)
				}})
			}
		}
		o.await(t, awaitWithin, settle, exps...)
	}

	cfg := testConfig(t, bs, unique(t, "app"))
	cfg.HTTP.Port = 0
	app := startApp(t, cfg, topo)
	o := readOutputs(t, bs, topicsOf(outs)...)
	cl := testClient(t, bs)
	produce(t, cl, recs)
	feed(recs)
	check(0, o, true)

	// Interactive queries: the windows of a key still within the
	// retention (size + grace behind the partition's stream time).
	tm := models["tumbling-count"]
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4"} {
		from := tm.observed[keyPartition([]byte(k), 2)] - 15000 + 1
		want := map[string]string{}
		for wk, v := range finalState(tm.updates) {
			if w := tm.windows[wk]; w.key == k && w.start >= from {
				want[wk] = v
			}
		}
		// The store is applied right after the commit that made the
		// output visible: a moment after it, maybe.
		eventually(t, 10*time.Second, func() error {
			got, err := QueryWindows[string, int64](app.App, "tumbling-count", k, time.UnixMilli(from), time.Time{})
			if err != nil {
				return err
			}
			have := map[string]string{}
			for _, w := range got {
				have[winKey(w.Key.Key, w.Key.Start.UnixMilli(), w.Key.End.UnixMilli())] = strconv.FormatInt(w.Value, 10)
			}
			if err := diffMaps(have, want, func(a, b string) bool { return a == b }); err != nil {
				return fmt.Errorf("QueryWindows(tumbling-count, %s, from %d): %w", k, from, err)
			}
			resp, err := http.Get(fmt.Sprintf("http://%s/state/tumbling-count/%s?from=%d", app.HTTPAddr(), k, from))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var body struct {
				Windows []struct {
					Start time.Time `json:"start"`
					End   time.Time `json:"end"`
					Value int64     `json:"value"`
				} `json:"windows"`
			}
			if len(want) == 0 {
				if resp.StatusCode != http.StatusNotFound {
					return fmt.Errorf("GET /state/tumbling-count/%s: %s, want 404", k, resp.Status)
				}
				return nil
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET /state/tumbling-count/%s: %s, %v", k, resp.Status, err)
			}
			have = map[string]string{}
			for _, w := range body.Windows {
				have[winKey(k, w.Start.UnixMilli(), w.End.UnixMilli())] = strconv.FormatInt(w.Value, 10)
			}
			if err := diffMaps(have, want, func(a, b string) bool { return a == b }); err != nil {
				return fmt.Errorf("GET /state/tumbling-count/%s?from=%d: %w", k, from, err)
			}
			return nil
		})
	}

	// Far ahead: every window closes, Suppress lets them all out.
	produce(t, cl, flush)
	feed(flush)
	check(settle, o, true)

	late := 0
	for op, m := range models {
		late += m.late
		t.Logf("%s: %d updates of %d windows, %d late", op, len(m.updates), len(m.closeAt), m.late)
	}
	t.Logf("suppressed: %d tumbling windows, %d sessions", len(models["tumbling-count"].suppressed()), len(models["session-count"].suppressed()))
	got := counterValue(t, app.metrics.dropped.WithLabelValues("late"))
	if late == 0 || got < float64(late) || (counterValue(t, app.metrics.aborts) == 0 && got != float64(late)) {
		t.Errorf("stoatflow_dropped_records_total{reason=late} = %v, want %d", got, late)
	}
}

// TestSuppressionSurvivesRestart stops the application half way and starts
// it again on an empty state directory: the window store, the suppression
// buffer and their stream times come back from the changelogs, so the
// windows still open are emitted once, when they close, and records late
// by the first half's stream time are still dropped.
func TestSuppressionSurvivesRestart(t *testing.T) {
	bs := sharedMoonMQ(t)
	input, counts, final := unique(t, "in"), unique(t, "counts"), unique(t, "final")
	createTopics(t, bs, 2, input, counts, final)
	first := windowInput(input, 80, 0, 6)
	second := windowInput(input, 80, 80*500-20000, 7) // starts well behind the first
	flush := flushInput(input, windowBase+600_000)

	topology := func() *Topology {
		topo := NewTopology()
		s := Source(topo, String, String, []string{input})
		c := WindowedBy(s.GroupByKey(String, String), Tumbling(10*time.Second, 4*time.Second)).Count("counts")
		c.ToStream().To(counts, windowedString, Decimal)
		Suppress(c, UntilWindowCloses).ToStream().To(final, windowedString, Decimal)
		return topo
	}
	m := newWinModel(winModel{size: 10000, advance: 10000, grace: 4000, fold: countFold})
	expect := func(o *outputs, settle time.Duration) {
		updates, closed := m.updates, m.suppressed()
		o.await(t, awaitWithin, settle,
			expectation{counts, func(got []out) error { return sameSequences(decodeAll(got, windowedText, plainText), updates) }},
			expectation{final, func(got []out) error { return sameSequences(decodeAll(got, windowedText, plainText), closed) }},
		)
	}
	appID := unique(t, "app")
	app := startApp(t, testConfig(t, bs, appID), topology())
	o := readOutputs(t, bs, counts, final)
	cl := testClient(t, bs)
	produce(t, cl, first)
	for _, r := range first {
		m.add(r)
	}
	expect(o, 0)
	if len(m.suppressed()) == 0 || len(m.suppressed()) == len(finalState(m.updates)) {
		t.Fatalf("the first half should close some windows and leave others open (%d of %d closed)", len(m.suppressed()), len(finalState(m.updates)))
	}
	if err := app.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	startApp(t, testConfig(t, bs, appID), topology()) // a new state directory: all from the changelogs
	produce(t, cl, append(append([]in{}, second...), flush...))
	lateBefore := m.late
	for _, r := range append(append([]in{}, second...), flush...) {
		m.add(r)
	}
	if m.late == lateBefore {
		t.Fatalf("the second half should have records late by the first half's stream time")
	}
	expect(o, settle)
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
