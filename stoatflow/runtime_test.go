package stoatflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// counter is a low-level processor: it counts values per key in a store,
// forwards each count, and on every 10 s of stream time forwards a
// "tick" record carrying how many keys it has seen.
type counter struct {
	ctx   ProcessorContext[string, string]
	store KeyValueStore[string, int64]
}

func (c *counter) Init(ctx ProcessorContext[string, string]) error {
	c.ctx = ctx
	var err error
	if c.store, err = KeyValueStoreOf[string, int64](ctx.Store("lowlevel")); err != nil {
		return err
	}
	ctx.Schedule(10*time.Second, StreamTime, func(now time.Time) error {
		n := 0
		if err := c.store.Range(nil, nil, func(string, int64) bool { n++; return true }); err != nil {
			return err
		}
		ctx.Forward(Record[string, string]{Key: "tick", Value: strconv.Itoa(n), Timestamp: now})
		return nil
	})
	return nil
}

func (c *counter) Process(r Record[string, string]) error {
	n, _, err := c.store.Get(r.Key)
	if err != nil {
		return err
	}
	n++
	if err := c.store.Put(r.Key, n); err != nil {
		return err
	}
	c.ctx.Forward(Record[string, string]{Key: r.Key, Value: r.Value + "=" + strconv.FormatInt(n, 10), Timestamp: r.Timestamp})
	return nil
}

// TestProcessorAPI mixes the DSL with a low-level processor that uses a
// store and a stream-time punctuation.
func TestProcessorAPI(t *testing.T) {
	bs := sharedMoonMQ(t)
	src, dst := unique(t, "in"), unique(t, "out")
	createTopics(t, bs, 1, src, dst)
	topo := NewTopology()
	AddKeyValueStore(topo, "lowlevel", String, Int64)
	s := MapValues(Source(topo, String, String, []string{src}), strings.ToUpper)
	Process(s, "count", func() Processor[string, string, string, string] { return &counter{} }, "lowlevel").To(dst, String, String)
	startApp(t, testConfig(t, bs, unique(t, "app")), topo)
	o := readOutputs(t, bs, dst)
	base := time.Now().Add(-time.Hour).UnixMilli()
	produce(t, testClient(t, bs), []in{
		{topic: src, key: "a", value: sp("x"), ts: base},
		{topic: src, key: "b", value: sp("y"), ts: base + 1000},
		{topic: src, key: "a", value: sp("z"), ts: base + 2000},
		{topic: src, key: "c", value: sp("w"), ts: base + 12000}, // stream time passes the first tick
	})
	o.await(t, 30*time.Second, 500*time.Millisecond, expectation{topic: dst, check: func(got []out) error {
		want := []string{"a:X=1", "b:Y=1", "a:Z=2", "c:W=1", "tick:3"}
		var have []string
		for _, r := range got {
			have = append(have, string(r.key)+":"+string(r.value))
		}
		if strings.Join(have, " ") != strings.Join(want, " ") {
			return fmt.Errorf("got %v, want %v", have, want)
		}
		return nil
	}})
}

// runErr runs an App that must fail to start and returns its error.
func runErr(t *testing.T, cfg Config, topo *Topology) error {
	t.Helper()
	app, err := New(cfg, topo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return app.Run(ctx)
}

func TestStartRefusals(t *testing.T) {
	bs := sharedMoonMQ(t)
	two, three := unique(t, "two"), unique(t, "three")
	createTopics(t, bs, 2, two)
	createTopics(t, bs, 3, three)

	t.Run("co-partitioning", func(t *testing.T) {
		topo := NewTopology()
		tbl := TableFrom(topo, three, "tbl", String, String)
		JoinTable(Source(topo, String, String, []string{two}), tbl, func(a, b string) string { return a + b }).To(two, String, String)
		err := runErr(t, testConfig(t, bs, unique(t, "app")), topo)
		if err == nil || !strings.Contains(err.Error(), "co-partitioning") || !strings.Contains(err.Error(), "(2 partitions)") || !strings.Contains(err.Error(), "(3 partitions)") {
			t.Fatalf("join of a 2- and a 3-partition topic: %v", err)
		}
	})
	t.Run("changelog partitions", func(t *testing.T) {
		app := unique(t, "app")
		adm := kadm.NewClient(testClient(t, bs))
		if _, err := adm.CreateTopic(context.Background(), 5, -1, nil, app+"-counts-changelog"); err != nil {
			t.Fatal(err)
		}
		topo := NewTopology()
		Source(topo, String, String, []string{two}).GroupByKey(String, String).Count("counts").ToStream().To(three, String, Int64)
		err := runErr(t, testConfig(t, bs, app), topo)
		if err == nil || !strings.Contains(err.Error(), app+"-counts-changelog has 5 partitions") {
			t.Fatalf("a changelog with the wrong partition count: %v", err)
		}
	})
	t.Run("missing source", func(t *testing.T) {
		topo := NewTopology()
		Source(topo, String, String, []string{"no-such-topic-" + unique(t, "x")}).To(two, String, String)
		err := runErr(t, testConfig(t, bs, unique(t, "app")), topo)
		if err == nil || !strings.Contains(err.Error(), "does not exist: create it") {
			t.Fatalf("a missing source topic: %v", err)
		}
	})
	t.Run("undecodable input", func(t *testing.T) {
		src := unique(t, "json")
		createTopics(t, bs, 1, src)
		type doc struct{ N int }
		topo := NewTopology()
		Source(topo, String, JSON[doc](), []string{src}).To(two, String, JSON[doc]())
		produce(t, testClient(t, bs), []in{{topic: src, key: "k", value: sp("{not json")}})
		err := runErr(t, testConfig(t, bs, unique(t, "app")), topo)
		if err == nil || !strings.Contains(err.Error(), "cannot decode the value of "+src+"/0 offset 0") {
			t.Fatalf("an undecodable record: %v", err)
		}
	})
}

func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestHTTPEndpoints: interactive queries, probes and metrics.
func TestHTTPEndpoints(t *testing.T) {
	bs := sharedMoonMQ(t)
	src, dst := unique(t, "in"), unique(t, "out")
	createTopics(t, bs, 2, src, dst)
	topo := NewTopology()
	Source(topo, String, String, []string{src}).GroupByKey(String, String).Count("counts").ToStream().To(dst, String, Decimal)
	cfg := testConfig(t, bs, unique(t, "app"))
	cfg.HTTP.Host, cfg.HTTP.Port = "127.0.0.1", freeTCPPort(t)
	startApp(t, cfg, topo)
	base := fmt.Sprintf("http://127.0.0.1:%d", cfg.HTTP.Port)
	produce(t, testClient(t, bs), []in{{topic: src, key: "apple", value: sp("1")}, {topic: src, key: "apple", value: sp("2")}, {topic: src, key: "pear", value: sp("3")}})
	get := func(path string) (int, string, http.Header) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, hdr := get("/state/counts/apple")
		var v struct {
			Key   string `json:"key"`
			Value int64  `json:"value"`
		}
		json.Unmarshal([]byte(body), &v)
		if code == 200 && v.Value == 2 {
			if hdr.Get("X-StoatFlow-Store-Lag") == "" {
				t.Error("no X-StoatFlow-Store-Lag header")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /state/counts/apple: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body, _ := get("/state/counts/plum"); code != 404 || !strings.Contains(body, "no key") {
		t.Errorf("a missing key: %d %s", code, body)
	}
	if code, _, _ := get("/state/nostore/x"); code != 404 {
		t.Errorf("a missing store: %d", code)
	}
	if code, body, _ := get("/state/counts?prefix=ap"); code != 200 || !strings.Contains(body, `"key":"apple"`) || strings.Contains(body, "pear") {
		t.Errorf("prefix query: %d %s", code, body)
	}
	if code, body, _ := get("/state/counts?from=b"); code != 200 || !strings.Contains(body, "pear") || strings.Contains(body, "apple") {
		t.Errorf("range query: %d %s", code, body)
	}
	if code, _, _ := get("/health/live"); code != 200 {
		t.Errorf("live: %d", code)
	}
	if code, body, _ := get("/health/ready"); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("ready: %d %s", code, body)
	}
	_, metrics, _ := get("/metrics")
	for _, m := range []string{`stoatflow_records_in_total{topic="` + src + `"} 3`, "stoatflow_commits_total", "stoatflow_commit_latency_seconds_bucket", "stoatflow_store_pending_writes{store=\"counts\"}", "stoatflow_ready 1"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestWipeWhenChangelogRecreated: a local store whose checkpoint lies past
// its changelog's end (the changelog was deleted and created again) is not
// trusted: it is wiped and rebuilt from the changelog.
func TestWipeWhenChangelogRecreated(t *testing.T) {
	bs := sharedMoonMQ(t)
	src, dst := unique(t, "in"), unique(t, "out")
	createTopics(t, bs, 1, src, dst)
	topo := func() *Topology {
		topo := NewTopology()
		Source(topo, String, String, []string{src}).GroupByKey(String, String).Count("counts").ToStream().To(dst, String, Decimal)
		return topo
	}
	cfg := testConfig(t, bs, unique(t, "app"))
	r := startApp(t, cfg, topo())
	produce(t, testClient(t, bs), []in{{topic: src, key: "k", value: sp("1")}, {topic: src, key: "k", value: sp("2")}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, ok, _ := QueryKeyValue[string, int64](r.App, "counts", "k"); ok && n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("count never reached 2")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(testClient(t, bs))
	changelog := cfg.ApplicationID + "-counts-changelog"
	if _, err := adm.DeleteTopics(context.Background(), changelog); err != nil {
		t.Fatal(err)
	}
	// Recreate it empty. The input's committed position is past both
	// records, so nothing is reprocessed into it.
	createTopics(t, bs, 1, changelog)
	r2 := startApp(t, cfg, topo())
	if !strings.Contains(r2.log.String(), "wiping store partition") {
		t.Errorf("no wipe logged:\n%s", tailLines(r2.log.String(), 20))
	}
	if n, ok, err := QueryKeyValue[string, int64](r2.App, "counts", "k"); ok || err != nil {
		t.Errorf("after the wipe the store still holds k=%d (%v); the recreated changelog is empty", n, err)
	}
}
