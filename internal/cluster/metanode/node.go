package metanode

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/status"
)

// NoLeader is the leader id reported when none is known.
const NoLeader int32 = -1

// Status is a node's view of the metadata log. Its first part is what a
// broker's /replication/status and /stats show of it.
type Status struct {
	// ID is this broker.
	ID int32 `json:"id"`
	status.MetadataLog
	// SnapshotIndex is the index of the local compaction snapshot (on an
	// observer, of the copy last saved).
	SnapshotIndex uint64 `json:"snapshotIndex"`
	// SnapshotsInstalled counts the snapshots this node took from a peer
	// since it started, because it was too far behind for entries.
	SnapshotsInstalled int `json:"snapshotsInstalled,omitempty"`
	// Source is the voter an observer pulls from.
	Source int32 `json:"source,omitempty"`
	// Incarnation is this process's incarnation id; LeaseExpiryMs the end
	// of its lease as last renewed (0 before the first registration).
	Incarnation   meta.UUID `json:"incarnation"`
	LeaseExpiryMs int64     `json:"leaseExpiryMs,omitempty"`
}

// Node is one broker's member of the metadata log: a voter running Raft,
// or an observer pulling the committed log from the voters. Either way it
// holds an applied copy of meta.State that Read serves. Start runs its
// goroutines, Stop ends them; the methods are safe for concurrent use.
type Node struct {
	cfg         Config
	voter       bool
	incarnation meta.UUID
	client      *http.Client
	scheme      string
	log         *slog.Logger

	raft *raftLoop // a voter's Raft; nil on an observer
	obs  *observer // an observer's puller; nil on a voter

	// mu guards the view below. Its writer is the goroutine applying the
	// log (the Raft loop or the puller); everyone else reads.
	mu      sync.RWMutex
	state   *meta.State
	applied uint64
	changed chan struct{} // closed at the next change of the view
	status  Status

	runMu       sync.Mutex
	started     bool
	stopped     bool
	ctx         context.Context // the node's run, ended by Stop or by the caller
	cancel      context.CancelFunc
	wg          sync.WaitGroup // the log's goroutines
	leaseWG     sync.WaitGroup // the lease renewer
	leaseCancel context.CancelFunc
	done        chan struct{} // closed when Stop or ctx ended the node
}

// New loads the node's state from DataDir (bootstrapping an empty log, on
// a voter, when there is none) and returns a stopped Node.
func New(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	inc, err := newUUID()
	if err != nil {
		return nil, err
	}
	if err := cfg.FS.MkdirAll(cfg.DataDir); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:         cfg,
		incarnation: inc,
		log:         cfg.Logger,
		changed:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	_, n.voter = cfg.Voters[cfg.ID]
	n.client, n.scheme = newClient(cfg.TLS)
	n.status = Status{ID: cfg.ID, MetadataLog: status.MetadataLog{Voter: n.voter, Role: "follower", Leader: NoLeader}, Incarnation: inc}
	if n.voter {
		n.raft, err = newRaftLoop(n)
	} else {
		n.status.Role = "observer"
		n.obs, err = newObserver(n)
	}
	if err != nil {
		return nil, err
	}
	n.status.Applied = n.applied
	return n, nil
}

// Start runs the node until Stop, or until ctx ends. It registers the
// broker and keeps renewing its lease.
func (n *Node) Start(ctx context.Context) error {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if n.started || n.stopped {
		return errors.New("metanode: already started or stopped") // a Node is not restartable: make a new one
	}
	n.started = true
	ctx, n.cancel = context.WithCancel(ctx)
	n.ctx = ctx
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if n.raft != nil {
			n.raft.run(ctx)
		} else {
			n.obs.run(ctx)
		}
	}()
	leaseCtx, leaseCancel := context.WithCancel(ctx)
	n.leaseCancel = leaseCancel
	n.leaseWG.Add(1)
	go func() {
		defer n.leaseWG.Done()
		n.renewLease(leaseCtx)
	}()
	go func() {
		<-ctx.Done()
		close(n.done)
	}()
	return nil
}

// Stop shortens this broker's lease (within ShutdownTimeout, if a leader
// can be reached), then stops the node's goroutines and waits for them.
// Stop is idempotent.
func (n *Node) Stop() {
	n.runMu.Lock()
	if !n.started || n.stopped {
		n.stopped = true
		n.runMu.Unlock()
		return
	}
	n.stopped = true
	n.runMu.Unlock()
	n.leaseCancel()
	n.leaseWG.Wait()
	n.endLease()
	n.cancel()
	n.wg.Wait()
	n.client.CloseIdleConnections()
}

// running reports whether the node runs (started, its context not ended),
// and returns the channel closed once it has stopped. It reads the
// context, not the channel, so that a node whose context just ended does
// not start a proposal.
func (n *Node) running() (<-chan struct{}, bool) {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if !n.started || n.ctx.Err() != nil {
		return n.done, false
	}
	return n.done, true
}

// Read calls f with the applied state and its log index, under a read
// lock: f must not keep s, nor call the Node. The state changes only
// between calls.
func (n *Node) Read(f func(s *meta.State, applied uint64)) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	f(n.state, n.applied)
}

// Snapshot returns a copy of the applied state, and its index.
func (n *Node) Snapshot() (meta.Snapshot, uint64) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.state.Snapshot(), n.applied
}

// Applied returns the log index the local copy has applied: it only
// grows, so it serves as the copy's version.
func (n *Node) Applied() uint64 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.applied
}

// Changed returns a channel that is closed the next time the applied
// state or the Status changes: wait on it, then call Changed again.
func (n *Node) Changed() <-chan struct{} {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.changed
}

// WaitApplied waits until the local copy has applied index.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	for {
		n.mu.RLock()
		applied, ch := n.applied, n.changed
		n.mu.RUnlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the node's view of the metadata log.
func (n *Node) Status() Status {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.status
}

// Incarnation is this process's incarnation id.
func (n *Node) Incarnation() meta.UUID { return n.incarnation }

// Leader is the metadata leader this node knows of, NoLeader if none.
func (n *Node) Leader() int32 { return n.Status().Leader }

// apply applies one committed entry's data at index (Raft loop or puller
// only). An entry that does not decode, or whose batch Apply refuses, is
// skipped: every broker reads the same entry and skips it alike. The
// refusal is returned for the proposer.
func (n *Node) apply(index uint64, data []byte) error {
	var err error
	var recs []meta.Record
	if len(data) > 0 {
		recs, err = meta.DecodeBatch(data)
		if err != nil {
			n.log.Error("metadata log: an entry does not decode; skipped, as on every broker", "index", index, "err", err)
		}
	}
	n.mu.Lock()
	if err == nil && recs != nil {
		err = n.state.ApplyBatch(recs)
		if err != nil {
			n.log.Info("metadata log: a committed entry was refused; skipped, as on every broker", "index", index, "err", err)
		}
	}
	n.applied = index
	n.status.Applied = index
	n.changedLocked()
	n.mu.Unlock()
	return err
}

// install replaces the state with a snapshot at index (Raft loop or puller
// only).
func (n *Node) install(s *meta.State, index uint64, fromPeer bool) {
	n.mu.Lock()
	n.state, n.applied = s, index
	n.status.Applied = index
	if fromPeer {
		n.status.SnapshotsInstalled++
	}
	n.changedLocked()
	n.mu.Unlock()
}

// setStatus updates the Status with f, notifying Changed if it changed.
func (n *Node) setStatus(f func(*Status)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.status
	f(&n.status)
	if n.status != old {
		n.changedLocked()
	}
}

func (n *Node) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// voterIDs returns the voters in id order.
func (n *Node) voterIDs() []int32 {
	ids := make([]int32, 0, len(n.cfg.Voters))
	for id := range n.cfg.Voters {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// retryPause is how long Propose waits before it looks for a leader
// again: about one Raft heartbeat.
func (n *Node) retryPause() time.Duration {
	return n.cfg.TickInterval * time.Duration(n.cfg.HeartbeatTicks) * 2
}
