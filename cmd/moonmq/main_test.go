package main

// Process-level tests: the real binary, real files, real TCP, and real
// clients (franz-go, and kcat/librdkafka when installed).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/freeport"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moonmq-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "moonmq")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build moonmq: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port no other pick in this test binary got.
func freePort(t *testing.T) int { return freeport.Must(t) }

// proc is a broker process.
type proc struct {
	cmd     *exec.Cmd
	addr    string
	metrics string
	logs    *bytes.Buffer
	mu      *sync.Mutex
}

func writeConfig(t *testing.T, dataDir string, port, mport int, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "moonmq.json")
	cfg := fmt.Sprintf(`{"Server": {"Host": "127.0.0.1", "Port": %d, "MetricsPort": %d, "DataDir": %q%s}}`, port, mport, dataDir, extra)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func startProc(t *testing.T, configPath string, port, mport int) *proc {
	t.Helper()
	p := &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("127.0.0.1:%d", mport)}
	return startCmd(t, exec.Command(binary, "serve", "--config", configPath), p)
}

// startCmd starts the broker command cmd for p (addresses set) and waits
// until it serves.
func startCmd(t *testing.T, cmd *exec.Cmd, p *proc) *proc {
	t.Helper()
	p.cmd, p.logs, p.mu = cmd, &bytes.Buffer{}, &sync.Mutex{}
	// A writer, not StderrPipe: Wait then returns only after the last
	// line is copied, so a test that waits for the process to exit reads
	// its final log lines too.
	ready := make(chan struct{})
	p.cmd.Stderr = &procLog{p: p, ready: ready}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("broker log:\n%s", p.log())
		}
	})
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("broker did not start:\n%s", p.log())
	}
	return p
}

// procLog collects a broker's stderr and closes ready at its "moonmq
// serving" line.
type procLog struct {
	p       *proc
	ready   chan struct{}
	started bool
}

func (l *procLog) Write(b []byte) (int, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	l.p.logs.Write(b)
	if !l.started && bytes.Contains(l.p.logs.Bytes(), []byte("moonmq serving")) {
		l.started = true
		close(l.ready)
	}
	return len(b), nil
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

func TestServeRefusesBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(path, []byte(`{"Server": {"Port": 9092, "Bogus": 1}}`), 0o644)
	out, err := exec.Command(binary, "serve", "--config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown key "Bogus"`) {
		t.Fatalf("bad config: err %v, output %s", err, out)
	}
}

// TestKill9KeepsAcknowledged produces with acks=all from several producers,
// kills the broker with SIGKILL in the middle, restarts it and checks that
// every acknowledged record is there exactly once, in per-partition order.
func TestKill9KeepsAcknowledged(t *testing.T) {
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	cfgPath := writeConfig(t, dir, port, mport, "")
	p := startProc(t, cfgPath, port, mport)

	adm := kadm.NewClient(newClient(t, p.addr))
	if _, err := adm.CreateTopic(context.Background(), 4, 1, nil, "k9"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]int64{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.DefaultProduceTopic("k9"),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0),
				kgo.RecordDeliveryTimeout(2*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for i := 0; ctx.Err() == nil; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err == nil {
						mu.Lock()
						acked[v] = r.Offset
						mu.Unlock()
					}
				})
				if i%64 == 63 {
					time.Sleep(time.Millisecond)
				}
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	p.kill9(t)
	cancel()
	wg.Wait()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n == 0 {
		t.Fatal("nothing was acknowledged before the kill")
	}
	t.Logf("%d records acknowledged before SIGKILL", n)

	p = startProc(t, cfgPath, port, mport)
	cl := newClient(t, p.addr, kgo.ConsumeTopics("k9"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	adm = kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(context.Background(), "k9")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	seen := map[string]bool{}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	var read int64
	for read < total {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d records after restart", read, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			v := string(r.Value)
			if seen[v] {
				t.Errorf("value %s read twice", v)
			}
			seen[v] = true
			if off, ok := acked[v]; ok && off != r.Offset {
				t.Errorf("value %s acknowledged at offset %d, read at %d", v, off, r.Offset)
			}
		})
	}
	lost := 0
	for v := range acked {
		if !seen[v] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged records lost after kill -9", lost, len(acked))
	}
	t.Logf("all %d acknowledged records survived (log holds %d)", len(acked), total)
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestMetricsEndpoints(t *testing.T) {
	port, mport := freePort(t), freePort(t)
	p := startProc(t, writeConfig(t, t.TempDir(), port, mport, ""), port, mport)
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("m"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + p.metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var stats struct {
		ProducedRecords int64 `json:"produced_records"`
		Partitions      []struct {
			Topic         string `json:"topic"`
			HighWatermark int64  `json:"high_watermark"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(get("/stats")), &stats); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range stats.Partitions {
		found = found || p.Topic == "m" && p.HighWatermark == 1
	}
	if stats.ProducedRecords != 1 || !found {
		t.Fatalf("/stats: %+v", stats)
	}
	// A group consumes the record and commits; lag is then 0, and 1
	// after one more record.
	cons := newClient(t, p.addr, kgo.ConsumeTopics("m"), kgo.ConsumerGroup("g"), kgo.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := 0; n < 1 && ctx.Err() == nil; {
		fs := cons.PollFetches(ctx)
		n += fs.NumRecords()
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	cons.Close() // no prefetch of the next record
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	m := get("/metrics")
	for _, want := range []string{"moonmq_produced_records_total 2", `moonmq_requests_total{api="Produce",error_code="0"}`, "moonmq_fsync_duration_seconds_count",
		`moonmq_request_remote_seconds_count{api="Produce"} 2`,
		`moonmq_partition_log_end_offset{partition="0",topic="m"} 2`, `moonmq_partition_high_watermark{partition="0",topic="m"} 2`,
		`moonmq_consumer_group_lag{group="g",partition="0",topic="m"} 1`, "moonmq_fetched_records_total 1"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get("/health/live")
	get("/health/ready")
}

// TestKcat drives the broker with kcat (librdkafka): produce with every
// codec, consume, and list metadata. CI installs kcat and sets
// MOONMQ_REQUIRE_KCAT=1 so a missing kcat fails instead of skipping.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("MOONMQ_REQUIRE_KCAT") != "" {
			t.Fatal("kcat is required (apt-get install -y kcat)")
		}
		t.Skip("kcat not installed")
	}
	port, mport := freePort(t), freePort(t)
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, port, mport, "")
	p := startProc(t, cfgPath, port, mport)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kcat, append([]string{"-b", p.addr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kcat %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var want []string
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		var lines []string
		for i := 0; i < 50; i++ {
			lines = append(lines, fmt.Sprintf("%s-%d", codec, i))
		}
		run(strings.Join(lines, "\n")+"\n", "-P", "-t", "kc", "-z", codec, "-X", "request.required.acks=-1")
		want = append(want, lines...)
	}
	// Restart in between: what kcat produced must survive.
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	p = startProc(t, cfgPath, port, mport)
	out := run("", "-C", "-t", "kc", "-o", "beginning", "-e", "-q")
	got := strings.Fields(out)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("kcat consumed %d records, want %d:\n%s", len(got), len(want), out)
	}
	md := run("", "-L", "-t", "kc")
	if !strings.Contains(md, "leader 1, replicas: 1, isrs: 1") {
		t.Fatalf("kcat -L:\n%s", md)
	}
	// Keys and headers come back through kcat's format strings.
	run("k1:v1\n", "-P", "-t", "kh", "-K", ":", "-H", "h=x")
	out = run("", "-C", "-t", "kh", "-o", "beginning", "-e", "-q", "-f", "%k=%s;%h\n")
	if strings.TrimSpace(out) != "k1=v1;h=x" {
		t.Fatalf("key/header round trip: %q", out)
	}
	_ = strconv.Itoa
}
