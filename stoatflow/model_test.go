package stoatflow

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The model tests run DSL operators against the shared MoonMQ broker over
// a deterministic input and compare what the output topics hold (read
// read_committed) with a plain Go computation of the same thing over the
// same input: streams per key, in order; tables by their final value per
// key. Each test runs one App holding one branch per operator, each
// writing its own topic.

const (
	awaitWithin = 90 * time.Second
	settle      = time.Second
)

func num(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		panic(err)
	}
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }

// keyedInput is n records over keys k0..k<keys-1> with values 0..999, each
// to the partition its key hashes to.
func keyedInput(topic string, partitions, keys, n int, seed uint64) []in {
	rng := rand.New(rand.NewPCG(seed, 7))
	recs := make([]in, 0, n)
	for range n {
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		recs = append(recs, in{topic: topic, key: k, value: sp(itoa(rng.IntN(1000))), partition: keyPartition([]byte(k), partitions)})
	}
	return recs
}

func topicsOf(m map[string]string) []string {
	var ts []string
	for _, t := range m {
		ts = append(ts, t)
	}
	return ts
}

func TestStatelessOperators(t *testing.T) {
	bs := sharedMoonMQ(t)
	input := unique(t, "in")
	outs := map[string]string{}
	for _, op := range []string{"map", "mapvalues", "selectkey", "filter", "filternot", "flatmap", "flatmapvalues", "branch0", "branch1", "merge", "peek"} {
		outs[op] = unique(t, op)
	}
	createTopics(t, bs, 3, input)
	createTopics(t, bs, 2, topicsOf(outs)...)
	recs := keyedInput(input, 3, 10, 150, 1)

	topo := NewTopology()
	s := Source(topo, String, String, []string{input})
	// Every new key is a function of the old one, so that each output key
	// comes from one input partition and its order is determined.
	Map(s, func(k, v string) (string, string) { return k + "-m", v + "!" }).To(outs["map"], String, String)
	MapValues(s, func(v string) string { return "<" + v + ">" }).To(outs["mapvalues"], String, String)
	SelectKey(s, func(k, v string) string { return k + "-" + itoa(num(v)%2) }).To(outs["selectkey"], String, String)
	s.Filter(func(_, v string) bool { return num(v)%3 == 0 }).To(outs["filter"], String, String)
	s.FilterNot(func(_, v string) bool { return num(v)%3 == 0 }).To(outs["filternot"], String, String)
	FlatMap(s, func(k, v string) []KeyValue[string, string] {
		if num(v)%4 == 0 {
			return nil
		}
		return []KeyValue[string, string]{{k + "-a", v}, {k + "-b", v + v}}
	}).To(outs["flatmap"], String, String)
	FlatMapValues(s, func(v string) []string {
		if num(v)%2 == 1 {
			return nil
		}
		return []string{v, v + "x"}
	}).To(outs["flatmapvalues"], String, String)
	bs2 := s.Branch(func(_, v string) bool { return num(v)%2 == 0 }, func(_, v string) bool { return num(v)%3 == 0 })
	bs2[0].To(outs["branch0"], String, String)
	bs2[1].To(outs["branch1"], String, String)
	even := s.Filter(func(_, v string) bool { return num(v)%2 == 0 })
	odd := MapValues(s.Filter(func(_, v string) bool { return num(v)%2 == 1 }), func(v string) string { return v + "-odd" })
	even.Merge(odd).To(outs["merge"], String, String)
	var peekMu sync.Mutex
	peeked := map[string]int{}
	s.Peek(func(k, v string) {
		peekMu.Lock()
		peeked[k+"="+v]++
		peekMu.Unlock()
	}).To(outs["peek"], String, String)

	startApp(t, testConfig(t, bs, unique(t, "app")), topo)
	o := readOutputs(t, bs, topicsOf(outs)...)
	produce(t, testClient(t, bs), recs)

	want := map[string][]kv{}
	add := func(op, k, v string) { want[op] = append(want[op], kv{k, sp(v)}) }
	for _, r := range recs {
		k, v := r.key, *r.value
		n := num(v)
		add("map", k+"-m", v+"!")
		add("mapvalues", k, "<"+v+">")
		add("selectkey", k+"-"+itoa(n%2), v)
		if n%3 == 0 {
			add("filter", k, v)
		} else {
			add("filternot", k, v)
		}
		if n%4 != 0 {
			add("flatmap", k+"-a", v)
			add("flatmap", k+"-b", v+v)
		}
		if n%2 == 0 {
			add("flatmapvalues", k, v)
			add("flatmapvalues", k, v+"x")
		}
		switch {
		case n%2 == 0:
			add("branch0", k, v)
		case n%3 == 0:
			add("branch1", k, v)
		}
		if n%2 == 0 {
			add("merge", k, v)
		} else {
			add("merge", k, v+"-odd")
		}
		add("peek", k, v)
	}
	var exps []expectation
	for op, topic := range outs {
		w := want[op]
		exps = append(exps, expectation{topic, func(got []out) error {
			return sameSequences(decodeAll(got, plainText, plainText), w)
		}})
	}
	o.await(t, awaitWithin, settle, exps...)

	peekMu.Lock()
	defer peekMu.Unlock()
	for _, r := range recs {
		if peeked[r.key+"="+*r.value] == 0 {
			t.Errorf("Peek never saw %s=%s", r.key, *r.value)
		}
	}
}

func TestAggregations(t *testing.T) {
	bs := sharedMoonMQ(t)
	input := unique(t, "in")
	outs := map[string]string{}
	for _, op := range []string{"count", "reduce", "aggregate", "groupby-count", "groupby-reduce", "groupby-aggregate"} {
		outs[op] = unique(t, op)
	}
	createTopics(t, bs, 3, input)
	createTopics(t, bs, 2, topicsOf(outs)...)
	recs := keyedInput(input, 3, 10, 200, 2)

	topo := NewTopology()
	s := Source(topo, String, String, []string{input})
	byKey := s.GroupByKey(String, String)
	byKey.Count("count").ToStream().To(outs["count"], String, Decimal)
	byKey.Reduce("reduce", func(agg, v string) string { return itoa(num(agg) + num(v)) }).ToStream().To(outs["reduce"], String, String)
	Aggregate(byKey, "aggregate", func() int64 { return 1 }, func(_ string, v string, a int64) int64 {
		return (a*31 + int64(num(v))) % 1000003 // order-sensitive
	}, Decimal).ToStream().To(outs["aggregate"], String, Decimal)
	group := func(_, v string) string { return "g" + itoa(num(v)%4) }
	byGroup := GroupBy(s, group, String, String)
	byGroup.Count("groupby-count").ToStream().To(outs["groupby-count"], String, Decimal)
	byGroup.Reduce("groupby-reduce", func(agg, v string) string { return itoa(num(agg) + num(v)) }).ToStream().To(outs["groupby-reduce"], String, String)
	Aggregate(byGroup, "groupby-aggregate", func() int64 { return -1 }, func(_ string, v string, a int64) int64 {
		return max(a, int64(num(v)))
	}, Decimal).ToStream().To(outs["groupby-aggregate"], String, Decimal)

	cfg := testConfig(t, bs, unique(t, "app"))
	// Two goroutines process the tasks (3 partitions of two
	// sub-topologies), so that this test, under -race in CI, also covers
	// tasks running side by side.
	cfg.Threads = 2
	app := startApp(t, cfg, topo)
	o := readOutputs(t, bs, topicsOf(outs)...)
	produce(t, testClient(t, bs), recs)

	// By key nothing is repartitioned: every update is in input order.
	seq := map[string][]kv{}
	counts, sums, aggs := map[string]int{}, map[string]int{}, map[string]int64{}
	gCounts, gSums, gMax := map[string]string{}, map[string]int{}, map[string]int64{}
	for _, r := range recs {
		k, n := r.key, num(*r.value)
		counts[k]++
		seq["count"] = append(seq["count"], kv{k, sp(itoa(counts[k]))})
		if _, ok := sums[k]; ok {
			sums[k] += n
		} else {
			sums[k] = n
		}
		seq["reduce"] = append(seq["reduce"], kv{k, sp(itoa(sums[k]))})
		if _, ok := aggs[k]; !ok {
			aggs[k] = 1
		}
		aggs[k] = (aggs[k]*31 + int64(n)) % 1000003
		seq["aggregate"] = append(seq["aggregate"], kv{k, sp(strconv.FormatInt(aggs[k], 10))})
		g := group(k, *r.value)
		c, _ := strconv.Atoi(gCounts[g])
		gCounts[g] = itoa(c + 1)
		gSums[g] += n
		if m, ok := gMax[g]; !ok || int64(n) > m {
			gMax[g] = int64(n)
		}
	}
	// Across the repartition topic the order of updates depends on
	// timing, but not the final value.
	final := map[string]map[string]string{"groupby-count": gCounts, "groupby-reduce": {}, "groupby-aggregate": {}}
	for g, v := range gSums {
		final["groupby-reduce"][g] = itoa(v)
	}
	for g, v := range gMax {
		final["groupby-aggregate"][g] = strconv.FormatInt(v, 10)
	}
	var exps []expectation
	for op, w := range seq {
		w := w
		exps = append(exps, expectation{outs[op], func(got []out) error {
			return sameSequences(decodeAll(got, plainText, decimalText), w)
		}})
	}
	for op, w := range final {
		w := w
		exps = append(exps, expectation{outs[op], func(got []out) error {
			return sameFinal(decodeAll(got, plainText, decimalText), w)
		}})
	}
	o.await(t, awaitWithin, settle, exps...)

	// The stores answer interactive queries with the final values.
	for k, n := range counts {
		eventually(t, 10*time.Second, func() error {
			if got, ok, err := QueryKeyValue[string, int64](app.App, "count", k); err != nil || !ok || got != int64(n) {
				return fmt.Errorf("QueryKeyValue(count, %s) = %d, %v, %v; want %d", k, got, ok, err, n)
			}
			return nil
		})
	}
}

// decimalText prints the output of the Decimal serde (and plain strings)
// as is.
func decimalText(b []byte) string { return string(b) }

func TestTables(t *testing.T) {
	bs := sharedMoonMQ(t)
	tbl, ta, tb, tbl2, st := unique(t, "tbl"), unique(t, "ta"), unique(t, "tb"), unique(t, "tbl2"), unique(t, "st")
	outs := map[string]string{}
	for _, op := range []string{"table", "join-tables", "table2", "join-table", "left-join-table"} {
		outs[op] = unique(t, op)
	}
	createTopics(t, bs, 3, tbl, ta, tb, tbl2, st)
	createTopics(t, bs, 2, topicsOf(outs)...)

	// Upserts and tombstones (some of keys that are not there).
	rng := rand.New(rand.NewPCG(3, 3))
	changes := func(topic, label string, keys, n int) []in {
		var recs []in
		for range n {
			k := fmt.Sprintf("k%d", rng.IntN(keys))
			r := in{topic: topic, key: k, partition: keyPartition([]byte(k), 3)}
			if rng.IntN(5) > 0 {
				r.value = sp(fmt.Sprintf("%s%d", label, rng.IntN(100)))
			}
			recs = append(recs, r)
		}
		return recs
	}
	tblRecs, taRecs, tbRecs := changes(tbl, "t", 8, 60), changes(ta, "a", 10, 40), changes(tb, "b", 10, 40)
	var tbl2Recs []in
	for i := 0; i < 6; i++ { // k6..k9 stay missing, for the left join
		k := fmt.Sprintf("k%d", i)
		tbl2Recs = append(tbl2Recs, in{topic: tbl2, key: k, value: sp("t" + itoa(i)), partition: keyPartition([]byte(k), 3)})
	}
	stRecs := keyedInput(st, 3, 10, 60, 4)

	topo := NewTopology()
	TableFrom(topo, tbl, "table", String, String).ToStream().To(outs["table"], String, String)
	JoinTables(TableFrom(topo, ta, "ta", String, String), TableFrom(topo, tb, "tb", String, String), "join-tables",
		func(a, b string) string { return a + "|" + b }, String).ToStream().To(outs["join-tables"], String, String)
	t2 := TableFrom(topo, tbl2, "table2", String, String)
	t2.ToStream().To(outs["table2"], String, String)
	stream := Source(topo, String, String, []string{st})
	JoinTable(stream, t2, func(v, vt string) string { return v + "+" + vt }).To(outs["join-table"], String, String)
	LeftJoinTable(stream, t2, func(v, vt string, ok bool) string {
		if !ok {
			return v + "+none"
		}
		return v + "+" + vt
	}).To(outs["left-join-table"], String, String)

	startApp(t, testConfig(t, bs, unique(t, "app")), topo)
	o := readOutputs(t, bs, topicsOf(outs)...)
	cl := testClient(t, bs)
	produce(t, cl, append(append(append(append([]in{}, tblRecs...), taRecs...), tbRecs...), tbl2Recs...))

	// A table forwards every upsert, and a tombstone for a key it has.
	var tableWant []kv
	state := map[string]string{}
	for _, r := range tblRecs {
		_, had := state[r.key]
		if r.value == nil {
			if had {
				delete(state, r.key)
				tableWant = append(tableWant, kv{r.key, nil})
			}
			continue
		}
		state[r.key] = *r.value
		tableWant = append(tableWant, kv{r.key, r.value})
	}
	apply := func(recs []in) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			if r.value == nil {
				delete(m, r.key)
			} else {
				m[r.key] = *r.value
			}
		}
		return m
	}
	fa, fb := apply(taRecs), apply(tbRecs)
	joined := map[string]string{}
	for k, a := range fa {
		if b, ok := fb[k]; ok {
			joined[k] = a + "|" + b
		}
	}
	o.await(t, awaitWithin, 0,
		expectation{outs["table"], func(got []out) error { return sameSequences(decodeAll(got, plainText, plainText), tableWant) }},
		expectation{outs["join-tables"], func(got []out) error { return sameFinal(decodeAll(got, plainText, plainText), joined) }},
		expectation{outs["table2"], func(got []out) error { return sameFinal(decodeAll(got, plainText, plainText), apply(tbl2Recs)) }},
	)

	// The table to join with is loaded: the stream's records now meet it
	// as it is.
	produce(t, cl, stRecs)
	t2State := apply(tbl2Recs)
	var jw, lw []kv
	for _, r := range stRecs {
		vt, ok := t2State[r.key]
		if ok {
			jw = append(jw, kv{r.key, sp(*r.value + "+" + vt)})
			lw = append(lw, kv{r.key, sp(*r.value + "+" + vt)})
		} else {
			lw = append(lw, kv{r.key, sp(*r.value + "+none")})
		}
	}
	o.await(t, awaitWithin, settle,
		expectation{outs["join-table"], func(got []out) error { return sameSequences(decodeAll(got, plainText, plainText), jw) }},
		expectation{outs["left-join-table"], func(got []out) error { return sameSequences(decodeAll(got, plainText, plainText), lw) }},
		expectation{outs["table"], func(got []out) error { return sameSequences(decodeAll(got, plainText, plainText), tableWant) }},
		expectation{outs["join-tables"], func(got []out) error { return sameFinal(decodeAll(got, plainText, plainText), joined) }},
	)
}
