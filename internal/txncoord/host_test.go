package txncoord

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
)

// testHost is a broker reduced to what the coordinator asks of it: local
// partitions that a running flusher makes durable, each written and
// waited on as the broker's own writes are; and a group coordinator that
// only records as whom offsets were committed and how transactions ended.
type testHost struct {
	t     *testing.T
	dir   string
	flush *partition.Flusher

	mu    sync.Mutex
	parts map[string][]*partition.Partition

	nextPID atomic.Int64
	expired atomic.Int64
	ended   sync.Map                 // producer id -> commit
	wroteAs atomic.Pointer[[2]int64] // the last TxnOffsetCommit's producer id and epoch
}

func newTestHost(t *testing.T) *testHost {
	h := &testHost{t: t, dir: t.TempDir(), parts: map[string][]*partition.Partition{},
		flush: partition.NewFlusher(partition.FlusherConfig{Fatal: func(err error) { t.Errorf("fsync: %v", err) }})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.flush.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		for _, p := range h.Partitions() {
			_ = p.Close()
		}
	})
	return h
}

// coordinator returns a coordinator over h, as the broker builds one.
func (h *testHost) coordinator(ctx context.Context) *Coordinator {
	return New(Config{Writer: testWriter{h}, Host: h, Offsets: h, OffsetsTopic: testOffsetsTopic,
		Log: slog.New(slog.DiscardHandler), Ctx: ctx, IDExpirationMs: 1, IDExpirationCheckMs: 3600000, ExpiredIDs: &h.expired})
}

// topic returns a topic's partitions, making it with n partitions if
// there is none.
func (h *testHost) topic(name string, n int) []*partition.Partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ps := h.parts[name]; ps != nil {
		return ps
	}
	for i := range n {
		l, err := storage.Open(filepath.Join(h.dir, name, strconv.Itoa(i)),
			storage.Options{RetentionMs: -1, RetentionBytes: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			h.t.Fatal(err)
		}
		p, err := partition.New(partition.Config{Topic: name, Index: int32(i), Log: l, Flusher: h.flush,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			h.t.Fatal(err)
		}
		h.parts[name] = append(h.parts[name], p)
	}
	return h.parts[name]
}

func (h *testHost) Partition(topic string, index int32) *partition.Partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := h.parts[topic]
	if index < 0 || int(index) >= len(ps) {
		return nil
	}
	return ps[index]
}

func (h *testHost) Partitions() []*partition.Partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.parts))
	for n := range h.parts {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*partition.Partition
	for _, n := range names {
		out = append(out, h.parts[n]...)
	}
	return out
}

func (h *testHost) Internal(topic string) bool     { return strings.HasPrefix(topic, "__") }
func (h *testHost) NextProducerID() (int64, error) { return h.nextPID.Add(1) - 1, nil }
func (h *testHost) Leading() bool                  { return true }

const testOffsetsTopic = "__consumer_offsets"

// testCoordinatorPartitions is how many partitions the coordinators'
// topics have here: more than one, so that ids spread over them as in a
// cluster.
const testCoordinatorPartitions = 3

func (h *testHost) PartitionOf(group string) (int32, error) {
	h.topic(testOffsetsTopic, testCoordinatorPartitions)
	return coordinator.PartitionFor(group, testCoordinatorPartitions), nil
}

func (h *testHost) Owned(topic string) []*partition.Partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parts[topic]
}
func (h *testHost) WriteTxnOffsets(_ context.Context, pid int64, epoch int16, _ *kmsg.TxnOffsetCommitRequest) int16 {
	h.wroteAs.Store(&[2]int64{pid, int64(epoch)})
	return 0
}
func (h *testHost) EndTxn(pid int64, commit bool) { h.ended.Store(pid, commit) }

// testWriter is the coordinator.Writer over a testHost's partitions.
type testWriter struct{ h *testHost }

func (w testWriter) Partition(name, key string, _ map[string]string) (*partition.Partition, error) {
	return w.h.topic(name, testCoordinatorPartitions)[coordinator.PartitionFor(key, testCoordinatorPartitions)], nil
}

func (testWriter) Append(p *partition.Partition, batch []byte, flush partition.Flush) (int64, error) {
	return p.AppendOwn(batch, flush)
}

func (testWriter) Wait(ctx context.Context, p *partition.Partition, end int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.WaitCommitted(ctx, end)
}

// The test host is one broker: no partition is in another group.
func (*testHost) Remote(string, int32) bool { return false }

func (*testHost) AppendMarker(p *partition.Partition, batch []byte, strict bool, flush partition.Flush) (int64, error) {
	return p.AppendMarker(batch, strict, flush)
}

func (*testHost) WriteRemoteMarkers(context.Context, int64, int16, bool, bool, int32, []txn.TP) error {
	return errors.New("the test host has no other group")
}

// Epoch is a single node's: it never changes.
func (*testHost) Epoch(*partition.Partition) int32 { return 0 }
