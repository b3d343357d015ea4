package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRequestMemoryIsBounded: connections that each announce a 100 MiB
// produce and send half of it do not make the broker buffer what they
// send: reading pauses once QueuedMaxRequestBytes are taken, the
// process's peak memory stays near that bound, and once the attackers go
// away a normal client is served and the budget is whole again. Without
// the bound the broker held about 2.1 bytes per byte sent (over 2 GB
// here).
func TestRequestMemoryIsBounded(t *testing.T) {
	for _, conns := range []int{20, 500} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) { requestMemoryAttack(t, conns) })
	}
}

func requestMemoryAttack(t *testing.T, conns int) {
	port, mport := freePort(t), freePort(t)
	cfg := writeConfig(t, t.TempDir(), port, mport, `, "QueuedMaxRequestBytes": 209715200`)
	p := startProc(t, cfg, port, mport)

	const announced, sent = 100 << 20, 50 << 20
	body := make([]byte, 1<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A Produce v9 header, then zeros: the broker must read
			// the whole frame before it can parse any of it.
			hdr := []byte{announced >> 24, announced >> 16 & 0xff, announced >> 8 & 0xff, announced & 0xff}
			hdr = append(hdr, 0, 0, 0, 9, 0, 0, 0, 1)
			if _, err := c.Write(hdr); err != nil {
				return
			}
			for n := 0; n < sent; n += len(body) {
				if _, err := c.Write(body); err != nil {
					return
				}
			}
		}()
	}
	// Wait until all but the readers the budget admits are paused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := memStats(t, p.metrics)
		if m.ReadersWaiting >= int64(conns-2) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the admitted readers take in what they can
	peak := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("peak RSS %d MiB with %d connections each sending %d MiB of a %d MiB frame (QueuedMaxRequestBytes 200 MiB)", peak>>20, conns, sent>>20, announced>>20)
	if peak > 600<<20 {
		t.Fatalf("peak RSS %d MiB: request memory is not bounded", peak>>20)
	}
	if m := memStats(t, p.metrics); m.QueuedMaxRequestBytes != 200<<20 || m.ReadersWaiting < 1 {
		t.Fatalf("/stats memory %+v: want the 200 MiB bound and readers waiting", m)
	}

	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic("after-attack"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("still serving")}).FirstErr(); err != nil {
		t.Fatalf("produce after the attack: %v", err)
	}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		m := memStats(t, p.metrics)
		if m.QueuedRequestBytes == 0 && m.ReadersWaiting == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("request memory not given back: %+v", m)
		}
	}
}

type memDoc struct {
	QueuedRequestBytes    int64 `json:"queued_request_bytes"`
	QueuedMaxRequestBytes int64 `json:"queued_max_request_bytes"`
	ReadersWaiting        int64 `json:"readers_waiting"`
}

func memStats(t *testing.T, metrics string) memDoc {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Memory memDoc `json:"memory"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc.Memory
}

// peakRSS is the process's resident high-water mark (Linux VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
