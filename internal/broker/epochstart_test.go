package broker

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// A produce that starts the leader epoch on many partitions (a new
// topic's first, or the first after a failover) persists their epoch
// starts at once, not one partition after another, and each history is
// what the appends alone would have written.
func TestProduceStartsEpochsTogether(t *testing.T) {
	fsys := &epochWrites{FS: vfs.Default}
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, WithFS(fsys))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const partitions = 8
	b.mu.Lock()
	tp, err := b.createTopicLocked("starts", partitions, nil)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	fsys.slow.Store(true)
	req := plainProduce(t, "starts", partitions, 1, "v")
	resp, _ := b.handleProduce(req, nil)
	for _, rp := range resp.(*kmsg.ProduceResponse).Topics[0].Partitions {
		if rp.ErrorCode != 0 {
			t.Fatalf("partition %d: error %d", rp.Partition, rp.ErrorCode)
		}
	}
	fsys.slow.Store(false)
	most := fsys.most()
	if most < 2 {
		t.Errorf("at most %d epoch starts persisted at once over %d partitions, want several", most, partitions)
	}
	want := []storage.EpochEntry{{Epoch: 0, StartOffset: 0}}
	for _, p := range tp.partitions {
		if got := p.Log().EpochHistory(); !slices.Equal(got, want) {
			t.Errorf("partition %d: history %v, want %v", p.Index, got, want)
		}
	}
}

// epochWrites counts the epoch histories being written at once (from the
// temporary file's creation to its rename), each slowed as a disk's syncs
// would.
type epochWrites struct {
	vfs.FS
	slow    atomic.Bool
	mu      sync.Mutex
	writing int
	peak    int
}

const historyTmp = "leader-epoch-checkpoint.json.tmp"

func (w *epochWrites) Create(name string) (vfs.File, error) {
	if w.slow.Load() && strings.HasSuffix(name, historyTmp) {
		w.mu.Lock()
		w.writing++
		w.peak = max(w.peak, w.writing)
		w.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	return w.FS.Create(name)
}

func (w *epochWrites) Rename(oldname, newname string) error {
	if w.slow.Load() && strings.HasSuffix(oldname, historyTmp) {
		w.mu.Lock()
		w.writing--
		w.mu.Unlock()
	}
	return w.FS.Rename(oldname, newname)
}

func (w *epochWrites) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}
