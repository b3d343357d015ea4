package stoatflow

import (
	"fmt"
	"testing"
	"time"
)

// TestTableCache runs counts and a materialized table with the table
// cache on: the final values are the model's, every key's updates are a
// part of its full sequence in order (nothing made up, nothing out of
// order), and with a commit interval that spans the whole input far fewer
// updates leave than records arrive. A cache of 3 keys, smaller than the
// key space, forwards early and stays correct.
func TestTableCache(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxKeys int
		fewer   bool // the input arrives within a commit or two
	}{{"large", 10000, true}, {"full-early", 3, false}} {
		t.Run(tc.name, func(t *testing.T) {
			bs := sharedMoonMQ(t)
			input, tbl := unique(t, "in"), unique(t, "tbl")
			countOut, tableOut := unique(t, "count"), unique(t, "table")
			createTopics(t, bs, 3, input, tbl)
			createTopics(t, bs, 2, countOut, tableOut)
			recs := keyedInput(input, 3, 10, 300, 5)
			// A table's upserts and deletes, some of keys that never
			// existed and some deleting a key just created.
			var tblRecs []in
			for i := range 120 {
				k := fmt.Sprintf("t%d", i%12)
				r := in{topic: tbl, key: k, partition: keyPartition([]byte(k), 3)}
				if i%5 != 4 {
					r.value = sp(itoa(i))
				}
				tblRecs = append(tblRecs, r)
			}

			topo := NewTopology()
			Source(topo, String, String, []string{input}).GroupByKey(String, String).Count("count").ToStream().To(countOut, String, Decimal)
			TableFrom(topo, tbl, "table", String, String).ToStream().To(tableOut, String, String)
			cfg := testConfig(t, bs, unique(t, "app"))
			cfg.State.CacheMaxKeys = tc.maxKeys
			cfg.CommitInterval = 2 * time.Second
			startApp(t, cfg, topo)
			o := readOutputs(t, bs, countOut, tableOut)
			produce(t, testClient(t, bs), append(recs, tblRecs...))

			counts := map[string]int{}
			full := map[string][]string{}
			for _, r := range recs {
				counts[r.key]++
				full[r.key] = append(full[r.key], itoa(counts[r.key]))
			}
			wantCounts := map[string]string{}
			for k, n := range counts {
				wantCounts[k] = itoa(n)
			}
			table, tableFull := map[string]string{}, map[string][]string{}
			for _, r := range tblRecs {
				v := "<tombstone>"
				if r.value == nil {
					delete(table, r.key)
				} else {
					table[r.key], v = *r.value, *r.value
				}
				tableFull[r.key] = append(tableFull[r.key], v)
			}
			o.await(t, awaitWithin, settle,
				expectation{countOut, func(got []out) error {
					kvs := decodeAll(got, plainText, decimalText)
					if err := sameFinal(kvs, wantCounts); err != nil {
						return err
					}
					return subsequences(kvs, full)
				}},
				expectation{tableOut, func(got []out) error {
					kvs := decodeAll(got, plainText, plainText)
					if err := sameFinal(kvs, table); err != nil {
						return err
					}
					return subsequences(kvs, tableFull)
				}})
			if n := len(o.get(countOut)); tc.fewer && n >= len(recs)/2 {
				t.Errorf("%d count updates forwarded for %d records: the cache did not hold them back", n, len(recs))
			} else {
				t.Logf("%d count updates forwarded for %d records", n, len(recs))
			}
		})
	}
}

// subsequences checks that each key's values in got appear, in order, in
// that key's full sequence of updates.
func subsequences(got []kv, full map[string][]string) error {
	for k, vs := range sequences(got) {
		i := 0
		for _, v := range vs {
			for i < len(full[k]) && full[k][i] != v {
				i++
			}
			if i == len(full[k]) {
				return fmt.Errorf("key %s: %v is not a part of %v in order", k, vs, full[k])
			}
			i++
		}
	}
	return nil
}
