package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/group"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
)

// testHost is one topic "t" with one partition, and the coordinator's own
// topic once written; it always leads.
type testHost struct {
	dir   string
	flush *partition.Flusher

	mu  sync.Mutex
	own []*partition.Partition
}

// testPartitions is how many partitions the test coordinator's topic has:
// more than one, so that groups spread over them as in a cluster.
const testPartitions = 3

func (h *testHost) Partitions(topic string) int {
	if topic == "t" {
		return 1
	}
	return 0
}

func (h *testHost) Owned(string) []*partition.Partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.own
}

func (h *testHost) Leading() bool { return true }

// The Writer half: the coordinator's topic in a temporary directory, made
// durable by a running flusher, as the broker's own writes are.

func (h *testHost) Partition(name, key string, _ map[string]string) (*partition.Partition, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own == nil {
		quiet := slog.New(slog.DiscardHandler)
		for i := range int32(testPartitions) {
			l, err := storage.Open(filepath.Join(h.dir, fmt.Sprintf("%s-%d", name, i)), storage.Options{RetentionMs: -1, RetentionBytes: -1, Logger: quiet})
			if err != nil {
				return nil, err
			}
			p, err := partition.New(partition.Config{Topic: name, Index: i, Log: l, Flusher: h.flush, Logger: quiet})
			if err != nil {
				return nil, err
			}
			h.own = append(h.own, p)
		}
	}
	return h.own[coordinator.PartitionFor(key, len(h.own))], nil
}

func (h *testHost) Append(p *partition.Partition, batch []byte, flush partition.Flush) (int64, error) {
	return p.AppendOwn(batch, flush)
}

func (h *testHost) Wait(ctx context.Context, p *partition.Partition, end int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.WaitCommitted(ctx, end); err != nil {
		return errors.Join(coordinator.ErrCommitTimeout, err)
	}
	return nil
}

var _ coordinator.Writer = (*testHost)(nil)

// newTestCoordinator returns a loaded coordinator with the default offsets
// retention (7 days), over a testHost.
func newTestCoordinator(t *testing.T) *Coordinator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &testHost{dir: t.TempDir(), flush: partition.NewFlusher(partition.FlusherConfig{Fatal: func(err error) { t.Errorf("fsync: %v", err) }})}
	var wg sync.WaitGroup
	wg.Go(func() { h.flush.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, p := range h.own {
			_ = p.Close()
		}
	})
	c := New(Config{Writer: h, Host: h, Logger: slog.New(slog.DiscardHandler),
		OffsetsRetentionMinutes: 7 * 24 * 60, OffsetsRetentionCheck: time.Hour})
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	c.RegisterGroups()
	return c
}

// testTopics is topic "t", one partition, as a KIP-848 group sees it.
type testTopics struct{}

var testTopic = group.TopicMeta{Name: "t", ID: [16]byte{1}, Partitions: 1}

func (testTopics) Topic(name string) (group.TopicMeta, bool) { return testTopic, name == "t" }
func (testTopics) TopicByID(id [16]byte) (group.TopicMeta, bool) {
	return testTopic, id == testTopic.ID
}
func (testTopics) Names() []string { return []string{"t"} }
