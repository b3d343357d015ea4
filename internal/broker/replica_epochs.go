package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// EpochsFile is the replica's leader-epoch history of every partition, in
// DataDir ("<DataDir>/replication-epochs.json", docs/REPLICATION.md).
//
// Each partition's own history (storage's leader-epoch-checkpoint.json,
// beside its segments) stays authoritative: it is written atomically
// together with the change that needs it, and truncation (KIP-101/279) and
// the "records but no epoch history: discard and recopy" rule read it. This
// file is the same histories gathered in one place, for operators and
// tools: it is rewritten atomically (vfs.WriteFileAtomic) whenever a
// partition's history changes (an epoch added, truncated, trimmed or reset)
// or a partition appears or goes, at most every epochsFileEvery, and at
// every start and clean stop. After a crash it may lag the partitions'
// files by that much of their changes until the next start rewrites it.
const EpochsFile = "replication-epochs.json"

// epochsFileEvery is the least time between two rewrites of EpochsFile.
const epochsFileEvery = 200 * time.Millisecond

// epochsDoc is the JSON form of EpochsFile.
type epochsDoc struct {
	Version    int               `json:"version"`
	Partitions []epochsPartition `json:"partitions"`
}

type epochsPartition struct {
	Topic     string               `json:"topic"`
	TopicID   string               `json:"topicId"`
	Partition int32                `json:"partition"`
	Epochs    []storage.EpochEntry `json:"epochs"`
}

// epochsFile gathers the partitions' epoch histories and writes EpochsFile.
type epochsFile struct {
	b     *Broker
	path  string
	dirty chan struct{}

	mu   sync.Mutex
	hist map[*partition.Partition][]storage.EpochEntry

	wmu  sync.Mutex // serializes writes
	last []byte     // what was last written
}

func newEpochsFile(b *Broker) *epochsFile {
	return &epochsFile{b: b, path: filepath.Join(b.cfg.DataDir, EpochsFile), dirty: make(chan struct{}, 1),
		hist: map[*partition.Partition][]storage.EpochEntry{}}
}

// track starts following p's history.
func (e *epochsFile) track(p *partition.Partition) {
	e.set(p, p.Log().EpochHistory())
	p.Log().SetEpochObserver(func(h []storage.EpochEntry) { e.set(p, h) })
}

// forget drops a deleted partition.
func (e *epochsFile) forget(p *partition.Partition) {
	p.Log().SetEpochObserver(nil)
	e.mu.Lock()
	delete(e.hist, p)
	e.mu.Unlock()
	e.markDirty()
}

// set records p's history. It runs under p's log lock (the observer), so
// it only copies and signals.
func (e *epochsFile) set(p *partition.Partition, h []storage.EpochEntry) {
	e.mu.Lock()
	e.hist[p] = h
	e.mu.Unlock()
	e.markDirty()
}

func (e *epochsFile) markDirty() {
	select {
	case e.dirty <- struct{}{}:
	default:
	}
}

// write writes the file if its content changed.
func (e *epochsFile) write() error {
	e.mu.Lock()
	doc := epochsDoc{Version: 1, Partitions: make([]epochsPartition, 0, len(e.hist))}
	for p, h := range e.hist {
		if h == nil {
			h = []storage.EpochEntry{}
		}
		doc.Partitions = append(doc.Partitions, epochsPartition{Topic: p.Topic, TopicID: formatUUID(p.TopicID), Partition: p.Index, Epochs: h})
	}
	e.mu.Unlock()
	sort.Slice(doc.Partitions, func(i, j int) bool {
		a, b := doc.Partitions[i], doc.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	data, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if bytes.Equal(data, e.last) {
		return nil
	}
	if err := vfs.WriteFileAtomic(e.b.fs, e.path, data); err != nil {
		return err
	}
	e.last = data
	return nil
}

// run rewrites the file after changes until ctx ends, then once more.
func (e *epochsFile) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			if err := e.write(); err != nil {
				e.b.log.Warn("writing "+EpochsFile+" failed", "err", err)
			}
			return
		case <-e.dirty:
			if err := e.write(); err != nil {
				// The partitions' own histories are intact; retry on
				// the next change or at stop.
				e.b.log.Warn("writing "+EpochsFile+" failed", "err", err)
			}
			// Changes come in bursts of thousands (every partition's
			// first append after a failover, a new topic): one rewrite
			// of the whole file per pause covers the burst, where one
			// per change would write and sync it thousands of times
			// beside the partitions' own histories.
			select {
			case <-ctx.Done():
			case <-time.After(epochsFileEvery):
			}
		}
	}
}
