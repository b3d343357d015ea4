package metrics

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// statusPage is the page at / for a person: role, replication group, ISR,
// per-partition lag and throughput charts, drawn in the browser from
// /stats and /stats/history.
//
//go:embed status.html
var statusPage []byte

// Throughput history: one sample of the counters every historyEvery,
// historyLen of them (10 minutes at the default).
const (
	historyEvery = 5 * time.Second
	historyLen   = 120
)

// sample is one point of /stats/history: the cumulative counters at a
// time (Unix milliseconds); the page turns neighbours into rates.
type sample struct {
	T               int64 `json:"t"`
	ProducedBytes   int64 `json:"produced_bytes"`
	ProducedRecords int64 `json:"produced_records"`
	FetchedBytes    int64 `json:"fetched_bytes"`
}

// history keeps the last samples in a ring.
type history struct {
	mu      sync.Mutex
	samples []sample
	next    int
	full    bool
}

func newHistory() *history { return &history{samples: make([]sample, historyLen)} }

func (h *history) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples[h.next] = s
	h.next = (h.next + 1) % len(h.samples)
	h.full = h.full || h.next == 0
}

// list returns the samples oldest first.
func (h *history) list() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]sample{}, h.samples[:h.next]...)
	}
	return append(append([]sample{}, h.samples[h.next:]...), h.samples[:h.next]...)
}

// take samples the counters of src's /stats document, whatever its Go
// type: the fields are read back from its JSON.
func (h *history) take(src Source, now time.Time) {
	if src.Stats == nil {
		return
	}
	data, err := json.Marshal(src.Stats())
	if err != nil {
		return
	}
	s := sample{T: now.UnixMilli()}
	if json.Unmarshal(data, &s) != nil {
		return
	}
	s.T = now.UnixMilli()
	h.add(s)
}

// run samples every interval until ctx ends.
func (h *history) run(ctx context.Context, src Source, every time.Duration) {
	h.take(src, time.Now())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.take(src, now)
		}
	}
}

func serveStatusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(statusPage)
}

func serveHistory(h *history) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		list := []sample{}
		if h != nil {
			list = h.list()
		}
		_ = json.NewEncoder(w).Encode(list)
	}
}
