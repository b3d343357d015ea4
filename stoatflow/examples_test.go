package stoatflow

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// The examples run as processes against the shared broker. Their topics
// have fixed names, so each run of a test uses keys of its own (and event
// times after those of earlier runs) and looks only at them. The two run in
// parallel, as most of their time goes into building the binaries.

// startExample builds and runs an example with its configuration in the
// environment, and stops it when the test ends.
func startExample(t *testing.T, pkg, bootstrap string) *testenv.Process {
	t.Helper()
	began := time.Now()
	bin := testenv.BuildBinary(t, pkg)
	p := testenv.StartProcess(t, bin, nil, []string{
		"STOATFLOW__APPLICATION_ID=" + unique(t, "app"),
		"STOATFLOW__BOOTSTRAP_SERVERS=" + bootstrap,
		"STOATFLOW__STATE__DIR=" + t.TempDir(),
		"STOATFLOW__HTTP__PORT=-1",
		"STOATFLOW__COMMIT_INTERVAL_MS=100",
	})
	t.Cleanup(func() {
		if !p.Stop(30 * time.Second) {
			t.Errorf("%s did not stop on SIGTERM", pkg)
		}
	})
	if !p.WaitLog(60*time.Second, "stoatflow running") {
		t.Fatalf("%s did not start:\n%s", pkg, tailLines(p.Log(), 40))
	}
	t.Logf("%s built and running after %v", pkg, time.Since(began))
	return p
}

// ofRun keeps the records whose key starts with prefix.
func ofRun(recs []out, prefix string) []out {
	var res []out
	for _, r := range recs {
		if strings.HasPrefix(string(r.key), prefix) {
			res = append(res, r)
		}
	}
	return res
}

func TestExampleWindowedCount(t *testing.T) {
	t.Parallel()
	bs := sharedMoonMQ(t)
	startExample(t, "./examples/windowedcount", bs)
	run := unique(t, "run") + "-"
	o := readOutputs(t, bs, "window-counts")
	// A minute of its own per run, long after the earlier runs'.
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(uniqueN.Add(1)) * time.Hour).UnixMilli()
	var recs []in
	event := func(k string, at int64) {
		recs = append(recs, in{topic: "events", key: run + k, value: sp("x"), ts: base + at, partition: keyPartition([]byte(run+k), 3)})
	}
	for i := range 3 {
		event("a", int64(i)*10_000)
	}
	event("b", 5_000)
	event("b", 59_999)
	event("b", 65_000) // the next window, which stays open
	event("a", 62_000)
	event("a", 30_000) // late, but within the grace: counted
	event("a", 75_000) // stream time reaches the first window's end plus grace
	event("b", 75_000)
	event("a", 20_000) // after the first window closed: dropped
	produce(t, testClient(t, bs), recs)
	start := time.UnixMilli(base).UTC().Format(time.RFC3339)
	want := []kv{{run + "a@" + start, sp("4")}, {run + "b@" + start, sp("2")}}
	o.await(t, awaitWithin, settle, expectation{"window-counts", func(got []out) error {
		return sameSequences(decodeAll(ofRun(got, run), plainText, plainText), want)
	}})
}

func TestExampleFKJoin(t *testing.T) {
	t.Parallel()
	bs := sharedMoonMQ(t)
	startExample(t, "./examples/fkjoin", bs)
	run := unique(t, "run") + "-"
	o := readOutputs(t, bs, "orders-enriched")
	cl := testClient(t, bs)
	jsonIn := func(topic string, parts int, key string, v any) in {
		r := in{topic: topic, key: run + key, partition: keyPartition([]byte(run+key), parts)}
		if v != nil {
			b, _ := json.Marshal(v)
			r.value = sp(string(b))
		}
		return r
	}
	order := func(id, cust string, amount float64) in {
		return jsonIn("orders", 3, id, map[string]any{"id": run + id, "customerId": run + cust, "amount": amount})
	}
	customer := func(id, name string) in {
		return jsonIn("customers", 2, id, map[string]any{"id": run + id, "name": name})
	}
	enriched := func(id, cust, name string, amount float64) string {
		b, _ := json.Marshal(map[string]any{"orderId": run + id, "customerId": run + cust, "customerName": name, "amount": amount})
		return string(b)
	}
	expect := func(want map[string]string) {
		t.Helper()
		o.await(t, awaitWithin, settle, expectation{"orders-enriched", func(got []out) error {
			final := finalState(decodeAll(ofRun(got, run), plainText, plainText))
			// Compare as JSON, whatever the field order.
			norm := map[string]string{}
			for k, v := range final {
				var m map[string]any
				if err := json.Unmarshal([]byte(v), &m); err != nil {
					return fmt.Errorf("key %s: %v", k, err)
				}
				b, _ := json.Marshal(m)
				norm[k] = string(b)
			}
			return diffMaps(norm, want, func(a, b string) bool { return a == b })
		}})
	}
	produce(t, cl, []in{customer("c1", "Ann"), order("o1", "c1", 10), order("o2", "c2", 20), order("o3", "c1", 30)})
	expect(map[string]string{run + "o1": enriched("o1", "c1", "Ann", 10), run + "o3": enriched("o3", "c1", "Ann", 30)})
	produce(t, cl, []in{customer("c2", "Bob"), order("o3", "c2", 31), jsonIn("orders", 3, "o1", nil), customer("c1", "Anna")})
	expect(map[string]string{run + "o2": enriched("o2", "c2", "Bob", 20), run + "o3": enriched("o3", "c2", "Bob", 31)})
}
