package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeBroker is a /stats source whose counters grow on every call.
func fakeBroker() Source {
	var calls atomic.Int64
	return Source{
		Registry:     prometheus.NewRegistry(),
		HistoryEvery: 20 * time.Millisecond,
		Stats: func() any {
			n := calls.Add(1)
			return map[string]any{
				"node_id": 1, "cluster_id": "c-test", "role": "leader", "connections": 3,
				"produced_bytes": n * 4096, "produced_records": n * 4, "fetched_bytes": n * 1024,
				"partitions": []map[string]any{
					{"topic": "orders", "partition": 0, "log_start_offset": 0, "high_watermark": 90, "log_end_offset": 100, "size_bytes": 2048,
						"owner": map[string]any{"group": "g2", "leader": 4, "leader_epoch": 3, "isr": []int{4, 5}, "local": false}},
					{"topic": "payments", "partition": 1, "log_start_offset": 5, "high_watermark": 7, "log_end_offset": 7, "size_bytes": 100},
				},
				"replication": map[string]any{
					"role": "leader", "replicaId": 1, "leader": 1, "epoch": 7, "isr": []int{1, 2},
					"followers": map[string]any{"2": map[string]any{"lastFetch": time.Now().Format(time.RFC3339Nano), "lag": 10}},
				},
			}
		},
	}
}

func serveFake(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, fakeBroker(), Access{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { s.Close() })
	return "http://" + s.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStatusEndpoints(t *testing.T) {
	base := serveFake(t)
	if code, body := get(t, base+"/"); code != 200 || !strings.Contains(body, "<title>MoonMQ status</title>") {
		t.Fatalf("GET / answered %d", code)
	}
	if code, _ := get(t, base+"/nope"); code != 404 {
		t.Fatalf("GET /nope answered %d", code)
	}
	// The sampler keeps adding points; wait (generously) for a few.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, base+"/stats/history")
		var hist []sample
		if err := json.Unmarshal([]byte(body), &hist); err != nil {
			t.Fatalf("history %q: %v", body, err)
		}
		if len(hist) >= 3 {
			for i := 1; i < len(hist); i++ {
				if hist[i].T < hist[i-1].T || hist[i].ProducedBytes <= hist[i-1].ProducedBytes {
					t.Fatalf("history out of order: %+v", hist)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history has %d samples after 20 s", len(hist))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Without Serve there is no history, but the endpoint answers.
	srv := Handler(fakeBroker(), Access{})
	rec := &recorder{header: http.Header{}}
	req, _ := http.NewRequest("GET", "/stats/history", nil)
	srv.ServeHTTP(rec, req)
	if strings.TrimSpace(rec.body.String()) != "[]" {
		t.Fatalf("history without Serve: %q", rec.body.String())
	}
}

func TestHistoryRing(t *testing.T) {
	h := newHistory()
	for i := 0; i < historyLen+5; i++ {
		h.add(sample{T: int64(i)})
	}
	l := h.list()
	if len(l) != historyLen || l[0].T != 5 || l[len(l)-1].T != historyLen+4 {
		t.Fatalf("ring holds %d samples from %d to %d", len(l), l[0].T, l[len(l)-1].T)
	}
}

type recorder struct {
	header http.Header
	body   strings.Builder
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.WriteString(string(b)) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// chromium finds a headless-capable Chromium, or skips (fails with
// MOONMQ_REQUIRE_CHROMIUM=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("MOONMQ_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("MOONMQ_REQUIRE_CHROMIUM=1 but no chromium (apt-get install chromium)")
	}
	t.Skip("chromium not installed (apt-get install chromium)")
	return ""
}

// TestStatusPageInChromium loads the page in headless Chromium and checks
// what a person would see: the role, the replication group and its ISR, a
// lagging follower and partition, a partition's owner group in cluster
// mode, and the throughput charts.
func TestStatusPageInChromium(t *testing.T) {
	browser := chromium(t)
	base := serveFake(t)
	// Let a few history samples accumulate so the charts have lines.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var hist []sample
		_, body := get(t, base+"/stats/history")
		_ = json.Unmarshal([]byte(body), &hist)
		if len(hist) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no history after 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", base+"/")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	dom := string(out)
	if !strings.Contains(dom, `data-loaded="yes"`) {
		t.Fatalf("the page never rendered the broker's figures:\n%s\nchromium stderr:\n%s", dom, stderr.String())
	}
	for _, want := range []string{
		`<span id="role">leader</span>`,
		`<span id="cluster">c-test</span>`,
		`id="repl-isr">1, 2</td>`,
		`id="repl-epoch">7</td>`,
		`<td>orders</td>`,
		`<td class="num lagging">10</td>`, // follower 2 and orders/0 are 10 behind
		`<td>payments</td>`,
		`<td>g2</td><td class="num">4</td><td>4,5</td>`, // cluster mode: the owner group of orders/0
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not show %s", want)
		}
	}
	for _, id := range []string{"chart-produce", "chart-fetch"} {
		m := regexp.MustCompile(`id="` + id + `"[^>]*data-points="(\d+)"`).FindStringSubmatch(dom)
		if m == nil {
			t.Errorf("%s was not drawn", id)
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n < 3 {
			t.Errorf("%s has %d points, want at least 3", id, n)
		}
	}
	if !regexp.MustCompile(`<b id="rate-produce">[0-9.]+ (B|KiB|MiB)/s</b>`).MatchString(dom) {
		t.Errorf("no produce rate shown")
	}
	if t.Failed() {
		t.Log(fmt.Sprintf("page as rendered:\n%s", dom))
	}
}
