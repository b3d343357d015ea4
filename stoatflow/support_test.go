package stoatflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

// The integration tests of this package share one MoonMQ broker per test
// binary, started by the first test that asks for it and stopped after
// the last: a broker start costs seconds, and every test works in topics
// and application ids of its own.

func TestMain(m *testing.M) {
	code := m.Run()
	suite.failed.Store(code != 0)
	suite.cleanup()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// suiteTB is the testenv.TB of the shared broker: it lives for the whole
// test binary, not for one test.
type suiteTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   atomic.Bool
}

var suite = &suiteTB{}

// suiteFatal is what suiteTB.Fatalf panics with, for sharedMoonMQ to
// recover.
type suiteFatal string

func (s *suiteTB) Helper()                           {}
func (s *suiteTB) Fatalf(format string, args ...any) { panic(suiteFatal(fmt.Sprintf(format, args...))) }
func (s *suiteTB) Skipf(format string, args ...any)  { s.Fatalf(format, args...) }
func (s *suiteTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "shared broker: "+format+"\n", args...)
}
func (s *suiteTB) Failed() bool { return s.failed.Load() }
func (s *suiteTB) Cleanup(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, fn)
}

func (s *suiteTB) TempDir() string {
	d, err := os.MkdirTemp("", "stoatflow-suite-")
	if err != nil {
		s.Fatalf("%v", err)
	}
	s.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (s *suiteTB) cleanup() {
	s.mu.Lock()
	fns := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

var shared struct {
	once sync.Once
	c    *testenv.Cluster
	err  error
}

// sharedMoonMQ returns the bootstrap address of the test binary's MoonMQ
// single node, starting it on first use.
func sharedMoonMQ(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				f, ok := r.(suiteFatal)
				if !ok {
					panic(r)
				}
				shared.err = errors.New(string(f))
			}
		}()
		shared.c = testenv.MoonMQ(suite, 1)
	})
	if shared.err != nil {
		t.Fatalf("shared MoonMQ: %v", shared.err)
	}
	return shared.c.Bootstrap()
}

var uniqueN atomic.Int64

var nonName = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// unique names a topic or application id for this test (and this run of
// it, under -count).
func unique(t *testing.T, base string) string {
	return fmt.Sprintf("%s-%s-%d", strings.Trim(nonName.ReplaceAllString(t.Name(), "-"), "-"), base, uniqueN.Add(1))
}

// testConfig is the configuration of an application of the test.
func testConfig(t *testing.T, bootstrap, appID string) Config {
	cfg := Defaults()
	cfg.ApplicationID = appID
	cfg.BootstrapServers = []string{bootstrap}
	cfg.State.Dir = t.TempDir()
	cfg.HTTP.Port = -1
	cfg.CommitInterval = 100 * time.Millisecond
	return cfg
}

// lockedBuffer collects an App's log, shown only if the test fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningApp is an App run by a test in a goroutine.
type runningApp struct {
	*App
	cancel context.CancelFunc
	done   chan error
	log    *lockedBuffer
	once   sync.Once
	err    error
}

// startApp runs topo as application cfg in a goroutine until the test
// ends (or stop), and waits until it is ready.
func startApp(t *testing.T, cfg Config, topo *Topology) *runningApp {
	t.Helper()
	logs := &lockedBuffer{}
	app, err := New(cfg, topo, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningApp{App: app, cancel: cancel, done: make(chan error, 1), log: logs}
	go func() { r.done <- app.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("application %s: %v", cfg.ApplicationID, err)
		}
		if t.Failed() {
			t.Logf("log of application %s:\n%s", cfg.ApplicationID, tailLines(logs.String(), 80))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !app.Ready() {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("application %s stopped while starting: %v\n%s", cfg.ApplicationID, err, tailLines(logs.String(), 80))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("application %s not ready within a minute:\n%s", cfg.ApplicationID, tailLines(logs.String(), 80))
		}
	}
	return r
}

// stop cancels the App and waits for Run to return its result (a clean
// stop returns nil).
func (r *runningApp) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(60 * time.Second):
			r.err = errors.New("did not stop within a minute")
		}
	})
	return r.err
}

func tailLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// testClient is a plain client of the shared broker, closed when the test
// ends; it produces to the partition each record names.
func testClient(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopics creates topics of n partitions.
func createTopics(t *testing.T, bootstrap string, n int, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Defaults()
	cfg.ApplicationID = "test-admin"
	cfg.BootstrapServers = []string{bootstrap}
	if err := CreateTopics(ctx, cfg, n, topics...); err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
}

// keyPartition is the partition Kafka's default partitioner (and
// StoatFlow's repartitioning) gives key in a topic of n partitions.
func keyPartition(key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, n))
}

// in is one input record of a test.
type in struct {
	topic     string
	key       string
	value     *string // nil: a tombstone
	ts        int64   // ms; 0: now
	partition int32
}

func sp(s string) *string { return &s }

// produce writes the records in order, each to its partition, and waits
// for them to be acknowledged.
func produce(t *testing.T, cl *kgo.Client, recs []in) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	krs := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		kr := &kgo.Record{Topic: r.topic, Key: []byte(r.key), Partition: r.partition}
		if r.value != nil {
			kr.Value = []byte(*r.value)
		}
		if r.ts != 0 {
			kr.Timestamp = time.UnixMilli(r.ts)
		}
		krs = append(krs, kr)
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// out is one output record read back.
type out struct {
	key, value []byte
	tombstone  bool
	partition  int32
}

// outputs reads topics read_committed from the start, in the
// background, for the rest of the test.
type outputs struct {
	mu   sync.Mutex
	recs map[string][]out
	err  error
}

func readOutputs(t *testing.T, bootstrap string, topics ...string) *outputs {
	t.Helper()
	o := &outputs{recs: map[string][]out{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					o.mu.Lock()
					o.err = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
					o.mu.Unlock()
				}
			})
			o.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				o.recs[r.Topic] = append(o.recs[r.Topic], out{key: r.Key, value: r.Value, tombstone: r.Value == nil, partition: r.Partition})
			})
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return o
}

func (o *outputs) get(topic string) []out {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]out(nil), o.recs[topic]...)
}

// expectation checks what a topic holds; nil means it is as expected.
type expectation struct {
	topic string
	check func([]out) error
}

// await waits until every expectation holds, then waits settle more and
// checks them again, so that a late duplicate or extra record fails too.
func (o *outputs) await(t *testing.T, within, settle time.Duration, exps ...expectation) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var errs []error
		for _, e := range exps {
			if err := e.check(o.get(e.topic)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", e.topic, err))
			}
		}
		if len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			o.mu.Lock()
			ferr := o.err
			o.mu.Unlock()
			t.Fatalf("output not as expected within %v (last fetch error: %v):\n%v", within, ferr, errors.Join(errs...))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(settle)
	for _, e := range exps {
		if err := e.check(o.get(e.topic)); err != nil {
			t.Errorf("%s: after %v more: %v", e.topic, settle, err)
		}
	}
}

// kv is a key and value as text; a nil value is a tombstone.
type kv struct {
	key   string
	value *string
}

func (k kv) String() string {
	if k.value == nil {
		return k.key + "=<tombstone>"
	}
	return k.key + "=" + *k.value
}

// decode turns output into key-value text with the functions given.
func decodeAll(recs []out, keyText, valueText func([]byte) string) []kv {
	res := make([]kv, 0, len(recs))
	for _, r := range recs {
		e := kv{key: keyText(r.key)}
		if !r.tombstone {
			e.value = sp(valueText(r.value))
		}
		res = append(res, e)
	}
	return res
}

func plainText(b []byte) string { return string(b) }

// sequences groups records by key, in order.
func sequences(recs []kv) map[string][]string {
	m := map[string][]string{}
	for _, r := range recs {
		v := "<tombstone>"
		if r.value != nil {
			v = *r.value
		}
		m[r.key] = append(m[r.key], v)
	}
	return m
}

// finalState is the table a changelog stream leaves: the last value per
// key, tombstones deleting.
func finalState(recs []kv) map[string]string {
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

// sameSequences compares the per-key sequences of got and want.
func sameSequences(got, want []kv) error {
	return diffMaps(sequences(got), sequences(want), func(a, b []string) bool {
		return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
	})
}

// sameFinal compares the final tables of got and want.
func sameFinal(got []kv, want map[string]string) error {
	return diffMaps(finalState(got), want, func(a, b string) bool { return a == b })
}

func diffMaps[V any](got, want map[string]V, eq func(a, b V) bool) error {
	var lines []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("key %s: missing, want %v", k, w))
		case !eq(g, w):
			lines = append(lines, fmt.Sprintf("key %s: got %v, want %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("key %s: got %v, want nothing", k, g))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	sort.Strings(lines)
	if len(lines) > 12 {
		lines = append(lines[:12], fmt.Sprintf("... and %d more", len(lines)-12))
	}
	return errors.New(strings.Join(lines, "\n"))
}

// eventually calls fn until it returns nil, and fails the test with its
// last error if it does not within the time given.
func eventually(t *testing.T, within time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("not within %v: %v", within, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
