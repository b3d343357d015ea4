// Package test runs StoatFlow applications as processes against real
// brokers (MoonMQ, and Apache Kafka where Java is installed) and kills,
// pauses and restarts them and the brokers, then checks from the topics
// themselves that every input had its effect exactly once.
package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/internal/flowcheck"
	"github.com/moonmq/moonmq/stoatflow/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// wordcount runs examples/wordcount processes of one application.
type wordcount struct {
	t         *testing.T
	bin       string
	bootstrap string
	app       string
	env       []string
}

func newWordcount(t *testing.T, bootstrap string, env ...string) *wordcount {
	return &wordcount{t: t, bin: testenv.BuildBinary(t, "./examples/wordcount"), bootstrap: bootstrap,
		app: fmt.Sprintf("wc-%d", rand.Int64N(1e9)), env: env}
}

// instance is one state directory and HTTP port: a place an instance of
// the application runs from, again after each kill.
type instance struct {
	w        *wordcount
	stateDir string
	port     int
	podID    string // ha.pod-id, when set
	proc     *testenv.Process
}

func (w *wordcount) instance() *instance {
	return &instance{w: w, stateDir: w.t.TempDir(), port: testenv.FreePort(w.t)}
}

func (in *instance) start(extra ...string) *testenv.Process {
	w := in.w
	env := append([]string{
		"STOATFLOW__APPLICATION_ID=" + w.app,
		"STOATFLOW__BOOTSTRAP_SERVERS=" + w.bootstrap,
		"STOATFLOW__STATE__DIR=" + in.stateDir,
		"STOATFLOW__HTTP__PORT=" + strconv.Itoa(in.port),
		"STOATFLOW__HTTP__HOST=127.0.0.1",
	}, w.env...)
	if in.podID != "" {
		env = append(env, "STOATFLOW__HA__POD_ID="+in.podID)
	}
	in.proc = testenv.StartProcess(w.t, w.bin, []string{"--partitions", "3"}, append(env, extra...))
	return in.proc
}

func (in *instance) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", in.port, path)
}

// storeContents reads the whole counts store over HTTP, or nil while the
// instance is not ready.
func (in *instance) storeContents() map[string]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := flowcheck.ReadStore(ctx, http.DefaultClient, in.url(""))
	if err != nil {
		return nil
	}
	return got
}

// waitCounts waits until the store holds want.
func (in *instance) waitCounts(want map[string]int64, within time.Duration) {
	t := in.w.t
	t.Helper()
	deadline := time.Now().Add(within)
	var got map[string]int64
	for time.Now().Before(deadline) {
		if got = in.storeContents(); equalCounts(got, want) {
			return
		}
		if in.proc.Exited() {
			t.Fatalf("the application exited while we waited for its counts:\n%s", tail(in.proc.Log(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("store after %v: %s", within, diffCounts(got, want))
}

func equalCounts(a, b map[string]int64) bool { return flowcheck.Equal(a, b) }

func diffCounts(got, want map[string]int64) string { return flowcheck.Diff(got, want) }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var vocabulary = func() []string {
	var w []string
	for i := 0; i < 60; i++ {
		w = append(w, fmt.Sprintf("w%02d", i))
	}
	return append(w, "Hello", "WORLD", "hello", "world")
}()

// feeder produces lines to "words" until stopped.
type feeder struct {
	cl   *kgo.Client
	stop chan struct{}
	done sync.WaitGroup
	rng  *rand.Rand
	sent int
}

func client(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitTopic waits for the application to have created "words".
func waitTopic(t *testing.T, bootstrap, topic string, opts ...kgo.Opt) {
	t.Helper()
	adm := kadm.NewClient(client(t, bootstrap, opts...))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		md, err := adm.ListTopics(context.Background(), topic)
		if err == nil && md.Has(topic) && md[topic].Err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("topic %s never appeared", topic)
}

// produceLines sends n lines synchronously.
func produceLines(t *testing.T, cl *kgo.Client, rng *rand.Rand, n int) {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(strconv.Itoa(rng.IntN(1000))), Value: []byte(line(rng))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}
}

func line(rng *rand.Rand) string {
	n := 1 + rng.IntN(7)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return strings.Join(ws, "  ")
}

// startFeeder produces batches of lines in the background, a little at a
// time, until stopFeeding. A batch that fails is not retried: what counts
// is what the topic holds at the end.
func startFeeder(t *testing.T, bootstrap string, seed uint64) *feeder {
	f := &feeder{cl: client(t, bootstrap, kgo.RecordRetries(20)), stop: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 1))}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var recs []*kgo.Record
			for i := 0; i < 10; i++ {
				recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(strconv.Itoa(f.rng.IntN(1000))), Value: []byte(line(f.rng))})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if f.cl.ProduceSync(ctx, recs...).FirstErr() == nil {
				f.sent += len(recs)
			}
			cancel()
		}
	}()
	return f
}

func (f *feeder) stopFeeding() int {
	close(f.stop)
	f.done.Wait()
	return f.sent
}

// readAll reads every record of topic up to its end offsets taken now,
// read_committed (flowcheck.ReadAll).
func readAll(t *testing.T, bootstrap, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := flowcheck.ReadAll(ctx, bootstrap, topic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// expectedCounts is the word count of everything "words" holds.
func expectedCounts(t *testing.T, bootstrap string, opts ...kgo.Opt) (map[string]int64, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, lines, err := flowcheck.Expected(ctx, bootstrap, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return want, lines
}

// checkExactlyOnce checks the output and the changelog against the input
// (flowcheck.CheckExactlyOnce): each word's committed outputs are exactly
// 1, 2, ..., its count (no update lost, none repeated), and the
// changelog's last value per word is its count.
func checkExactlyOnce(t *testing.T, bootstrap, app string, want map[string]int64, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rep, err := flowcheck.CheckExactlyOnce(ctx, bootstrap, app, want, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

var restoredRE = regexp.MustCompile(`"msg":"restoring stores from their changelogs"[^}]*"records":(\d+)`)

// replayed is how many changelog records the instance's last start
// restored (0 when it logged no restore).
func replayed(log string) int64 {
	m := restoredRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return n
}
