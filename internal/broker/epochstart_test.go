package broker

import (
	"context"
	"os"
	"path/filepath"
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
	const partitions = 8
	_, b, tp := brokerOnFS(t, fsys, "starts", partitions)

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
// history file's opening for an append, or its temporary file's creation,
// to its closing or rename), each slowed as a disk's syncs would.
type epochWrites struct {
	vfs.FS
	slow    atomic.Bool
	mu      sync.Mutex
	writing int
	peak    int
}

const history = "leader-epoch-checkpoint.json"

func (w *epochWrites) begin() {
	w.mu.Lock()
	w.writing++
	w.peak = max(w.peak, w.writing)
	w.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
}

func (w *epochWrites) end() {
	w.mu.Lock()
	w.writing--
	w.mu.Unlock()
}

func (w *epochWrites) Create(name string) (vfs.File, error) {
	if w.slow.Load() && strings.HasSuffix(name, history+".tmp") {
		w.begin()
	}
	return w.FS.Create(name)
}

func (w *epochWrites) Rename(oldname, newname string) error {
	if w.slow.Load() && strings.HasSuffix(oldname, history+".tmp") {
		w.end()
	}
	return w.FS.Rename(oldname, newname)
}

func (w *epochWrites) OpenRW(name string) (vfs.File, error) {
	f, err := w.FS.OpenRW(name)
	if err != nil || !w.slow.Load() || !strings.HasSuffix(name, history) {
		return f, err
	}
	w.begin()
	return appendedHistory{f, w}, nil
}

// appendedHistory is a history file opened for an append.
type appendedHistory struct {
	vfs.File
	w *epochWrites
}

func (h appendedHistory) Close() error {
	h.w.end()
	return h.File.Close()
}

func (w *epochWrites) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}

// A burst of epoch-history changes (every partition's first append after
// a failover) is written to EpochsFile once per pause, not once per
// change: 20 changes over ~100 ms make at most two rewrites and the one
// at stop, and the file ends with every change.
func TestEpochsFileCoalescesBursts(t *testing.T) {
	fsys := &renames{FS: vfs.Default, name: EpochsFile + ".tmp"}
	dir, b, tp := brokerOnFS(t, fsys, "burst", 20)
	e := newEpochsFile(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go e.run(ctx, done)
	for i, p := range tp.partitions {
		e.set(p, []storage.EpochEntry{{Epoch: 3, StartOffset: int64(i)}})
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if n := fsys.count(); n < 1 || n > 3 {
		t.Errorf("%d rewrites of %s for a burst of %d changes, want 1 to 3", n, EpochsFile, len(tp.partitions))
	}
	data, err := os.ReadFile(filepath.Join(dir, EpochsFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), `"epoch": 3`); got != len(tp.partitions) {
		t.Errorf("%s holds %d of the %d changes: %s", EpochsFile, got, len(tp.partitions), data)
	}
}

// renames counts the renames of files named name.
type renames struct {
	vfs.FS
	name string
	mu   sync.Mutex
	n    int
}

func (r *renames) Rename(oldname, newname string) error {
	if filepath.Base(oldname) == r.name {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
	return r.FS.Rename(oldname, newname)
}

func (r *renames) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// brokerOnFS opens a single-node broker on fsys in a fresh directory,
// with a topic of n partitions; it returns the directory too.
func brokerOnFS(t *testing.T, fsys vfs.FS, name string, n int) (string, *Broker, *topic) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, WithFS(fsys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	b.mu.Lock()
	tp, err := b.createTopicLocked(name, n, nil)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DataDir, b, tp
}
