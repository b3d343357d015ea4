package metanode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/vfs"
)

// ObserverFileName is an observer's saved copy in DataDir, so that a
// restarted broker answers Metadata from it before it reaches a voter.
const ObserverFileName = "metadata-copy.json"

const observerFileVersion = 1

// observerFile is the JSON form of ObserverFileName.
type observerFile struct {
	Version int           `json:"version"`
	Index   uint64        `json:"index"`
	State   meta.Snapshot `json:"state"`
}

// observer is a non-voter's follower of the log: one goroutine (run) pulls
// committed entries from a voter and writes the Node's state.
type observer struct {
	n      *Node
	path   string
	source int // index in voterIDs of the voter pulled from
	saved  uint64
	saveAt time.Time
}

func newObserver(n *Node) (*observer, error) {
	o := &observer{n: n, path: filepath.Join(n.cfg.DataDir, ObserverFileName), source: int(n.cfg.ID) % len(n.cfg.Voters)}
	n.state = meta.New()
	b, err := vfs.ReadFile(n.cfg.FS, o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metanode: read %s: %w", o.path, err)
	}
	var f observerFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("metanode: parse %s: %w", o.path, err)
	}
	if f.Version != observerFileVersion {
		return nil, fmt.Errorf("metanode: %s: unsupported version %d", o.path, f.Version)
	}
	st, err := meta.Restore(f.State)
	if err != nil {
		return nil, fmt.Errorf("metanode: %s: %w", o.path, err)
	}
	n.state, n.applied, o.saved = st, f.Index, f.Index
	n.status.SnapshotIndex = f.Index
	return o, nil
}

// run pulls until ctx ends. A voter that fails, or that knows no leader
// (it may be cut off while the others go on), is left for the next one;
// a voter that names the leader is left for the leader, whose copy is the
// freshest.
func (o *observer) run(ctx context.Context) {
	defer o.save(true)
	ids := o.n.voterIDs()
	for ctx.Err() == nil {
		src := ids[o.source]
		o.n.setStatus(func(s *Status) { s.Source = src })
		a, err := o.n.pull(ctx, src, o.n.applied, o.n.cfg.PullWait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			o.n.log.Debug("metadata: pull failed", "voter", src, "err", err)
			o.n.setStatus(func(s *Status) { s.Leader = NoLeader })
			o.source = (o.source + 1) % len(ids)
			sleep(ctx, o.n.retryPause())
			continue
		}
		if err := o.take(a); err != nil {
			o.n.log.Warn("metadata: a voter's answer does not fit this copy; asking again", "voter", src, "err", err)
			sleep(ctx, o.n.retryPause())
		}
		o.n.setStatus(func(s *Status) { s.Leader = a.Leader })
		switch {
		case a.Leader == NoLeader:
			o.source = (o.source + 1) % len(ids)
		case a.Leader != src:
			for i, id := range ids {
				if id == a.Leader {
					o.source = i
				}
			}
		}
		o.save(false)
	}
}

// take applies a pull's answer to the copy.
func (o *observer) take(a pullAnswer) error {
	n := o.n
	if a.Snapshot != nil && a.Snapshot.Index > n.applied {
		st, err := decodeSnapshot(a.Snapshot.State)
		if err != nil {
			return err
		}
		n.install(st, a.Snapshot.Index, true)
	}
	for _, e := range a.Entries {
		if e.Index <= n.applied {
			continue
		}
		if e.Index != n.applied+1 {
			return fmt.Errorf("entry %d after %d", e.Index, n.applied)
		}
		_ = n.apply(e.Index, e.Data)
	}
	return nil
}

// save writes the copy when it changed, at most every SaveInterval unless
// final. A failed save is logged: the copy in memory goes on serving, and
// the next start pulls what it misses.
func (o *observer) save(final bool) {
	n := o.n
	if n.applied == o.saved || (!final && time.Now().Before(o.saveAt)) {
		return
	}
	b, err := json.Marshal(observerFile{Version: observerFileVersion, Index: n.applied, State: n.state.Snapshot()})
	if err == nil {
		err = vfs.WriteFileAtomic(n.cfg.FS, o.path, b)
	}
	o.saveAt = time.Now().Add(n.cfg.SaveInterval)
	if err != nil {
		n.log.Warn("metadata: saving the local copy failed", "err", err)
		return
	}
	o.saved = n.applied
	n.setStatus(func(s *Status) { s.SnapshotIndex = o.saved })
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
