package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/reqmem"
	"github.com/moonmq/moonmq/internal/status"
)

// memory bounds what client connections make the broker hold: request
// bytes being read and handled, fetch answers built and not yet written,
// and the frame buffers kept for reuse (shared by all connections, so
// their total does not grow with the connection count). Produce frames
// and fetch answers are the pool's, and go back to it once written.
type memory struct {
	requests  *reqmem.Budget
	responses *reqmem.Budget
	frames    *reqmem.Pool
}

// fallbackQueuedBytes applies when a config was built without defaults
// (tests): large enough never to be the bottleneck there.
const fallbackQueuedBytes = 1 << 30

func newMemory(queued int64) *memory {
	if queued <= 0 {
		queued = fallbackQueuedBytes
	}
	return &memory{
		requests:  reqmem.NewBudget(queued),
		responses: reqmem.NewBudget(queued),
		// Half the budget keeps the frames of a steady load warm: with
		// an eighth, 64 pipelined producers missed the pool on every
		// other frame, and mapping and faulting in each fresh buffer
		// cost a fifth of the broker's CPU (docs/BENCHMARKS.md). Off the
		// heap, so that the garbage collector does not let garbage grow
		// to as much again.
		frames: reqmem.NewOffHeapPool(queued / 2),
	}
}

// frameTrimEvery is how often idle frame buffers are looked at: one idle
// through a whole period is released, so a burst's buffers are given back
// within two periods and a steady load's stay warm.
const frameTrimEvery = 5 * time.Second

// frameBuffer returns memory for a frame body of n bytes: pooled up to
// the pool's largest class; nil above it, so that ReadFrameBody grows the
// buffer as bytes arrive instead of allocating what a client only claims.
func (m *memory) frameBuffer(n int) []byte {
	if n > reqmem.MaxPooled {
		return nil
	}
	return m.frames.Get(n)
}

// readInto returns an allocator for one partition's fetch read: the
// buffer comes from the frame pool, off the heap, and *lent says which it
// was. The answer gives it back once written (releaseAnswer); a read the
// answer does not keep gives it back at once. From the heap, a fast
// consumer's reads were most of the broker's garbage, and the garbage
// collector let as much again build up before it ran.
func (m *memory) readInto(lent *[]byte) func(int) []byte {
	return func(n int) []byte {
		*lent = m.frames.Get(n)
		return *lent
	}
}

// releaseAnswer gives back the read buffers an answer holds (a fetch's);
// the answer must not be used afterwards.
func (m *memory) releaseAnswer(resp kmsg.Response) {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return
	}
	for i := range f.Topics {
		for j := range f.Topics[i].Partitions {
			p := &f.Topics[i].Partitions[j]
			m.frames.Put(p.RecordBatches)
			p.RecordBatches = nil
		}
	}
}

// fetchRoom is how many record bytes a fetch may gather now: what the
// answers in flight leave of their budget, at least one byte so that the
// first batch still goes out (KIP-74) and no consumer stalls forever.
func (m *memory) fetchRoom(maxBytes int) int {
	free := m.responses.Total() - m.responses.Used()
	return int(max(min(int64(maxBytes), free), 1))
}

// holdAnswer counts a finished answer's record bytes against the answer
// budget until the writer has sent them (releaseAnswer); only fetch
// answers carry enough to matter.
func (m *memory) holdAnswer(resp kmsg.Response) int64 {
	n := int64(recordBytes(resp))
	if n > 0 {
		m.responses.Force(n)
	}
	return n
}

func (m *memory) register(reg *prometheus.Registry) {
	g := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	reg.MustRegister(
		g("moonmq_queued_request_bytes", "Bytes of client requests being read or handled (bounded by Server.QueuedMaxRequestBytes).", m.requests.Used),
		g("moonmq_queued_request_bytes_limit", "Server.QueuedMaxRequestBytes.", m.requests.Total),
		g("moonmq_request_readers_waiting", "Connections whose reading is paused until request memory is free.", m.requests.Waiting),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moonmq_request_memory_waits_total",
			Help: "Requests whose reading waited for request memory."}, func() float64 { return float64(m.requests.Waits()) }),
		g("moonmq_fetch_answer_bytes_in_flight", "Record bytes of fetch answers built and not yet written.", m.responses.Used),
		g("moonmq_frame_pool_idle_bytes", "Bytes of frame buffers kept for reuse, for all connections.", m.frames.Idle),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moonmq_frame_pool_hits_total",
			Help: "Frame buffers lent from the pool."}, func() float64 { return float64(m.frames.Hits()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "moonmq_frame_pool_misses_total",
			Help: "Frame buffers allocated afresh because none of their size was idle."}, func() float64 { return float64(m.frames.Misses()) }),
	)
}

func (m *memory) snapshot() status.Memory {
	return status.Memory{
		QueuedRequestBytes: m.requests.Used(), QueuedMaxRequestBytes: m.requests.Total(),
		ReadersWaiting: m.requests.Waiting(), RequestMemoryWaits: m.requests.Waits(),
		FetchAnswerBytes: m.responses.Used(), FramePoolIdleBytes: m.frames.Idle(),
		FramePoolHits: m.frames.Hits(), FramePoolMisses: m.frames.Misses(),
	}
}
