// Package broker owns the single-node Kafka broker: the topic registry and
// its on-disk metadata, the request handlers for every advertised API,
// replication's broker side, and the client listener.
//
// It may not parse frames or record batches itself (internal/protocol and
// internal/recordbatch do). It appends to a partition, and moves or waits
// for its high watermark, only through internal/partition, which owns that
// state; it reads partition data through the partition's storage.Log.
//
// Security policy and state live in internal/auth (users, ACLs and the
// authorizer's decision, login back-off, connection limits, quotas, TLS
// configurations); the broker may not decide those itself. It keeps their
// connection side (the SASL exchange on the socket, admitting connections,
// asking the authorizer per request, throttling a connection's reader),
// the Kafka API handlers that read and change users and ACLs, and the
// internal topics their records are persisted in (security.go).
package broker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/groupcoord"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txncoord"
	"github.com/moonmq/moonmq/internal/vfs"
)

// Broker is a running single-node broker.
type Broker struct {
	cfg config.Server
	log *slog.Logger
	fs  vfs.FS
	// clock is broker time, for every timestamp the broker writes and
	// every retention and expiry decision, and the wall clock it watches
	// for steps (clock.go).
	clock  *clock.Clock
	acks   config.AcksFloor
	nodeID int32
	// boundPort is the port the client listener got, for Port 0 (tests).
	boundPort int

	clusterID string
	// epoch is the leader epoch stamped on appended batches. A single node
	// leads every partition in epoch 0; replication will drive it.
	epoch atomic.Int32

	mu     sync.RWMutex
	topics map[string]*topic
	byID   map[[16]byte]*topic

	// logDamaged is set when this start found that a log lost data that
	// had been durable (storage recovery, or less than the clean-shutdown
	// marker names). A failover replica then never stands for election
	// before catching up with a leader (raftgroup.Config.LogDamaged).
	logDamaged atomic.Bool

	flush *partition.Flusher
	// flushIdle, when set, replaces the flusher's idle pass interval
	// (partition.FlusherConfig.IdleEvery): tests.
	flushIdle time.Duration
	// volume is the data directory's filesystem, synced whole by the
	// flusher's large passes; nil when it cannot be. Closed with the logs.
	volume *storage.Volume
	stats  *Stats
	// mem bounds the memory client connections make the broker hold.
	mem *memory
	// segFiles holds the descriptors of every partition's rolled segments.
	segFiles *vfs.Pool
	// disk judges the data directory's disk: full, stalled (disk.go).
	disk       *diskhealth.Monitor
	diskFaults *diskhealth.Faults // tests only
	// readFailures limits the log lines of failing partition reads.
	readFailures partitionLogLimiter

	// repl is the replication group this broker is part of, nil on a
	// single node.
	repl *replica
	// cl is cluster mode's metadata side (cluster.go), nil outside it.
	cl *clusterMode

	// servers are the client listeners (failover mode closes their
	// connections when this replica stops leading).
	serversMu sync.Mutex
	servers   map[*Server]struct{}

	// groups is the group coordinator: membership, committed offsets
	// and their topic (groups.go wires it).
	groups *groupcoord.Coordinator
	txns   *txncoord.Coordinator

	// sec is who may connect and what they may do (security.go).
	sec *security

	pidMu             sync.Mutex
	pidNext, pidLimit int64

	// ctx ends when the broker closes; background waits use it.
	ctx context.Context

	// fatal is called when the broker must stop (a failed fsync). It
	// defaults to logging and exiting, because retrying an fsync can report
	// success for data the kernel already dropped.
	fatal func(error)

	wg     sync.WaitGroup
	cancel context.CancelFunc
	closed atomic.Bool
}

// topic is an immutable snapshot of a topic: a change (new partitions, new
// configs) installs a new snapshot in the registry, so handlers may hold one
// without the broker lock. Snapshots share their *partition.Partition values.
type topic struct {
	name       string
	id         [16]byte
	dir        string
	overrides  map[string]string
	settings   topicSettings
	partitions []*partition.Partition
	// metaIndex is, in cluster mode, an index of the metadata log at
	// which this broker's copy held the topic (0: not known to have): only
	// a copy at or past it may conclude that the topic was deleted.
	metaIndex uint64
}

// topicMeta is the on-disk description of a topic (topic.json).
type topicMeta struct {
	Name       string
	ID         string
	Partitions int
	Configs    map[string]string
	MetaIndex  uint64 `json:",omitempty"`
}

// Option configures a Broker.
type Option func(*Broker)

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(b *Broker) { b.log = l } }

// WithFS replaces the filesystem, for crash-simulation tests.
func WithFS(fs vfs.FS) Option { return func(b *Broker) { b.fs = fs } }

// WithClock replaces the broker's clocks, for tests that step the wall
// clock.
func WithClock(c *clock.Clock) Option { return func(b *Broker) { b.clock = c } }

// WithDiskFaults injects disk faults below the disk monitor (tests and
// the fault harness: diskhealth.FaultsFileEnv).
func WithDiskFaults(f *diskhealth.Faults) Option { return func(b *Broker) { b.diskFaults = f } }

// WithFatal replaces what happens when the broker hits an unrecoverable
// error such as a failed fsync.
func WithFatal(f func(error)) Option { return func(b *Broker) { b.fatal = f } }

// New opens the data directory, recovers every partition and returns a
// broker ready to Serve.
func New(cfg config.Server, opts ...Option) (*Broker, error) {
	b := &Broker{
		cfg:    cfg,
		log:    slog.Default(),
		fs:     vfs.Default,
		topics: map[string]*topic{},
		byID:   map[[16]byte]*topic{},
		nodeID: 1,
		stats:  newStats(),
	}
	for _, o := range opts {
		o(b)
	}
	if b.clock == nil {
		b.clock = clock.New()
	}
	b.mem = newMemory(cfg.QueuedMaxRequestBytes)
	b.mem.register(b.stats.reg)
	if b.fatal == nil {
		b.fatal = b.storageFailure
	}
	if cfg.Replication != nil && cfg.Replication.Enabled {
		b.nodeID = int32(cfg.Replication.ReplicaId)
	}
	if staticReplication(&cfg) {
		b.epoch.Store(staticEpoch)
		b.repl = newReplica(b)
	} else if failoverReplication(&cfg) {
		// The epoch comes from the group's Raft log once a leader serves.
		b.repl = newReplica(b)
		if clusterEnabled(&cfg) {
			b.cl = newClusterMode(b)
		}
	}
	b.newDiskHealth()
	b.newSegmentPool()
	b.stats.reg.MustRegister(newPartitionCollector(b))
	if b.repl != nil {
		b.stats.reg.MustRegister(newReplicationCollector(b.repl))
	}
	var err error
	if b.acks, err = config.ParseAcks(cfg.Acks); err != nil {
		return nil, err
	}
	if b.sec, err = newSecurity(b); err != nil {
		return nil, err
	}
	if err := b.fs.MkdirAll(b.topicsDir()); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", cfg.DataDir, err)
	}
	// A full disk is known before recovery writes and the first request.
	b.disk.Poll()
	if err := b.loadClusterID(); err != nil {
		return nil, err
	}
	if b.cl != nil {
		// Clients see one cluster, whichever group they ask.
		b.clusterID = cfg.Cluster.ClusterId
	}
	b.flush = newFlusher(b)
	b.groups = b.newGroupCoordinator()
	ctx, cancel := context.WithCancel(context.Background())
	b.ctx, b.cancel = ctx, cancel
	b.txns = newTxnCoordinator(b)
	// The flusher runs first: recovering transactions writes markers and
	// waits for them to be durable.
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.flush.Run(ctx) }()
	fail := func(err error) (*Broker, error) {
		cancel()
		b.wg.Wait()
		b.closeLogs()
		return nil, err
	}
	if err := b.loadTopics(); err != nil {
		return fail(err)
	}
	if err := b.groups.Reload(ctx); err != nil {
		return fail(err)
	}
	// A follower writes nothing of its own: its logs are copies of the
	// leader's, transactions included.
	following := b.following()
	if !following {
		if err := b.txns.Load(ctx); err != nil {
			return fail(err)
		}
	}
	b.groups.RegisterGroups()
	if following {
		// Retention and compaction come from the leader's log start and
		// bytes, so the copy stays identical.
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.groups.Run(ctx) }()
	} else {
		b.startLeaderLoops(ctx, &b.wg)
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.groups.Run(ctx) }()
	}
	b.wg.Add(5)
	go func() { defer b.wg.Done(); b.every(ctx, frameTrimEvery, func(time.Time) { b.mem.frames.Trim() }) }()
	go func() { defer b.wg.Done(); b.disk.Run(ctx) }()
	go func() { defer b.wg.Done(); b.watchClock(ctx) }()
	go func() { defer b.wg.Done(); b.recoveryPointLoop(ctx) }()
	// Every replica: producer state is memory derived from each one's
	// own copy of the log.
	go func() {
		defer b.wg.Done()
		b.every(ctx, time.Duration(b.cfg.ProducerIdExpirationCheckMs)*time.Millisecond, func(now time.Time) { b.ExpireProducers(now) })
	}()
	if b.repl != nil {
		if err := b.repl.start(ctx); err != nil {
			return fail(err)
		}
	}
	return b, nil
}

// following reports whether this broker is a static-mode follower.
func (b *Broker) following() bool { return b.repl != nil && !b.repl.role.serving() }

// fenced reports whether this broker may not append batches of its own: a
// failover replica that is not running as leader.
func (b *Broker) fenced() bool { return b.repl != nil && b.repl.failover && !b.repl.role.leading() }

func (b *Broker) topicsDir() string { return filepath.Join(b.cfg.DataDir, "topics") }

func (b *Broker) loadClusterID() error {
	path := filepath.Join(b.cfg.DataDir, "meta.json")
	var meta struct{ ClusterID string }
	if data, err := vfs.ReadFile(b.fs, path); err == nil {
		if err := json.Unmarshal(data, &meta); err != nil || meta.ClusterID == "" {
			return fmt.Errorf("%s is damaged (%v); restore it or remove it to get a new cluster id", path, err)
		}
		b.clusterID = meta.ClusterID
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	id := newUUID()
	meta.ClusterID = base64.RawURLEncoding.EncodeToString(id[:])
	data, _ := json.Marshal(meta)
	if err := vfs.WriteFileAtomic(b.fs, path, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b.clusterID = meta.ClusterID
	return nil
}

func (b *Broker) loadTopics() error {
	// A topic deleted while the broker was running is renamed away first;
	// finish removing any that a crash left behind.
	_ = b.fs.RemoveAll(filepath.Join(b.cfg.DataDir, "deleted"))
	names, err := b.fs.ReadDir(b.topicsDir())
	if err != nil {
		return fmt.Errorf("list topics in %s: %w", b.topicsDir(), err)
	}
	for _, name := range names {
		dir := filepath.Join(b.topicsDir(), name)
		data, err := vfs.ReadFile(b.fs, filepath.Join(dir, "topic.json"))
		if errors.Is(err, os.ErrNotExist) {
			// Creation never completed: topic.json is written last.
			b.log.Warn("removing half-created topic directory", "dir", dir)
			_ = b.fs.RemoveAll(dir)
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", dir, err)
		}
		var meta topicMeta
		if err := json.Unmarshal(data, &meta); err != nil {
			return fmt.Errorf("%s/topic.json is damaged: %v", dir, err)
		}
		id, err := parseUUID(meta.ID)
		if err != nil {
			return fmt.Errorf("%s/topic.json: %v", dir, err)
		}
		t := &topic{name: meta.Name, id: id, dir: dir, overrides: meta.Configs, metaIndex: meta.MetaIndex}
		if t.overrides == nil {
			t.overrides = map[string]string{}
		}
		t.settings = resolveSettings(&b.cfg, t.overrides)
		if t.partitions, err = b.openPartitions(t, 0, meta.Partitions); err != nil {
			return err
		}
		b.topics[t.name] = t
		b.byID[t.id] = t
	}
	if len(b.topics) > 0 {
		b.log.Info("recovered topics", "topics", len(b.topics))
	}
	return nil
}

func (b *Broker) storageOptions(t *topic) storage.Options {
	ret := t.settings.retentionMs
	if !t.settings.cleanupDelete {
		ret = -1
	}
	retBytes := t.settings.retentionBytes
	if !t.settings.cleanupDelete {
		retBytes = -1
	}
	return storage.Options{
		// Every segment is checked at open (CRC, offsets, leader epochs),
		// not only the newest: a clean stop says nothing about damage to
		// the files while the broker was down, and a damaged older segment
		// found later, by a read, can no longer be cut off safely. The
		// price is reading every log once per start (docs/RELIABILITY.md).
		VerifyAll:      true,
		FS:             b.fs,
		Pool:           b.segFiles,
		Space:          b.space(),
		SegmentBytes:   t.settings.segmentBytes,
		RetentionMs:    ret,
		RetentionBytes: retBytes,
		Logger:         b.log.With("topic", t.name),
	}
}

// space is what the logs ask before an append: the disk monitor (nil,
// not a nil monitor, for brokers that tests build by hand).
func (b *Broker) space() interface{ CheckWrite() error } {
	if b.disk == nil {
		return nil
	}
	return b.disk
}

func (b *Broker) openPartition(t *topic, index int32) (*partition.Partition, error) {
	dir := filepath.Join(t.dir, fmt.Sprint(index))
	l, err := storage.Open(dir, b.storageOptions(t))
	if err != nil {
		return nil, fmt.Errorf("open partition %s/%d: %w", t.name, index, err)
	}
	if r := l.Recovery(); r.Damaged {
		b.logDamaged.Store(true)
		b.log.Error("partition log lost data that had been durable; a replica will not stand for election before catching up with a leader",
			"topic", t.name, "partition", index, "reason", r.Reason, "log_end", r.LostFrom, "dropped_bytes", r.DroppedBytes)
	}
	p, err := partition.New(partition.Config{
		Topic: t.name, TopicID: t.id, Index: index, Log: l,
		Policy: b.commitPolicy(), Fence: brokerFence{b, &placement{}}, Flusher: b.flush,
		// In a failover group what is durable here is not necessarily
		// committed: an unreplicated tail may still be truncated. The
		// high watermark comes only from the group (the leader's
		// decision, or the leader's on a follower).
		UncommittedTail: b.repl != nil && b.repl.failover,
		FS:              b.fs, Logger: b.log, Clock: b.clock,
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	if b.repl != nil {
		b.repl.track(p)
	}
	return p, nil
}

// openPartitions opens (creating them when new) the partitions [from, to)
// of t, several at once: each costs a few fsyncs of its own, which the
// filesystem's journal commits together when they run side by side, so a
// topic of 10,000 partitions is created, and recovered at start, in a
// fraction of the time one at a time takes. On an error every partition
// opened is closed again and the error of the lowest index returned.
func (b *Broker) openPartitions(t *topic, from, to int) ([]*partition.Partition, error) {
	if to <= from {
		return nil, nil
	}
	parts := make([]*partition.Partition, to-from)
	errs := make([]error, to-from)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openParallelism, to-from) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				parts[i-from], errs[i-from] = b.openPartition(t, int32(i))
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range parts {
			if p != nil {
				p.Close()
			}
		}
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
	}
	return parts, nil
}

// openParallelism bounds the partitions opened at once.
const openParallelism = 16

// createTopic creates a topic with n partitions. The caller holds b.mu.
func (b *Broker) createTopicLocked(name string, n int, overrides map[string]string) (*topic, error) {
	return b.createTopicWithIDLocked(name, newUUID(), n, overrides)
}

// createTopicWithIDLocked creates a topic with a given id (a follower
// copies the leader's). The caller holds b.mu.
func (b *Broker) createTopicWithIDLocked(name string, id [16]byte, n int, overrides map[string]string) (*topic, error) {
	if overrides == nil {
		overrides = map[string]string{}
	}
	t := &topic{name: name, id: id, dir: filepath.Join(b.topicsDir(), name), overrides: overrides}
	t.settings = resolveSettings(&b.cfg, overrides)
	if err := b.fs.MkdirAll(t.dir); err != nil {
		return nil, err
	}
	var err error
	if t.partitions, err = b.openPartitions(t, 0, n); err != nil {
		_ = b.fs.RemoveAll(t.dir)
		return nil, err
	}
	if err := b.saveTopic(t); err != nil {
		for _, p := range t.partitions {
			p.Close()
		}
		_ = b.fs.RemoveAll(t.dir)
		return nil, err
	}
	b.topics[name] = t
	b.byID[t.id] = t
	b.log.Info("created topic", "topic", name, "partitions", n, "configs", overrides)
	return t, nil
}

// setMetaIndexLocked records that the cluster metadata copy at index
// holds t (topic.metaIndex). A topic is copied on write, as for its
// configs: readers hold the old one. The caller holds b.mu.
func (b *Broker) setMetaIndexLocked(t *topic, index uint64) error {
	nt := *t
	nt.metaIndex = index
	if err := b.saveTopic(&nt); err != nil {
		return err
	}
	b.topics[nt.name], b.byID[nt.id] = &nt, &nt
	return nil
}

func (b *Broker) saveTopic(t *topic) error {
	meta := topicMeta{Name: t.name, ID: formatUUID(t.id), Partitions: len(t.partitions), Configs: t.overrides, MetaIndex: t.metaIndex}
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(b.fs, filepath.Join(t.dir, "topic.json"), data); err != nil {
		return err
	}
	return b.fs.SyncDir(b.topicsDir())
}

// deleteTopicLocked removes a topic. The caller holds b.mu.
func (b *Broker) deleteTopicLocked(t *topic) error {
	delete(b.topics, t.name)
	delete(b.byID, t.id)
	for _, p := range t.partitions {
		p.Delete()
		if b.repl != nil {
			b.repl.forget(p)
		}
	}
	// Rename first so that a crash mid-removal does not resurrect a
	// partial topic; the deleted/ directory is purged at start.
	gone := filepath.Join(b.cfg.DataDir, "deleted")
	if err := b.fs.MkdirAll(gone); err != nil {
		return err
	}
	dst := filepath.Join(gone, t.name+"-"+formatUUID(t.id))
	if err := b.fs.Rename(t.dir, dst); err != nil {
		return err
	}
	_ = b.fs.SyncDir(b.topicsDir())
	b.log.Info("deleted topic", "topic", t.name)
	return b.fs.RemoveAll(dst)
}

// lookup returns the topic, or nil.
func (b *Broker) lookup(name string) *topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[name]
}

// internalTopic reports whether clients may not write or delete the topic
// directly: the broker owns its contents.
func internalTopic(name string) bool {
	return name == offsetsTopic || name == producerIDsTopic || name == txncoord.StateTopic || name == usersTopic || name == aclsTopic
}

// lookupOrCreate returns the topic, auto-creating it when allowed.
func (b *Broker) lookupOrCreate(name string, allowCreate bool) (*topic, int16) {
	if b.cl != nil {
		return b.cl.lookupOrCreate(name, allowCreate)
	}
	if t := b.lookup(name); t != nil {
		return t, 0
	}
	if !allowCreate || !*b.cfg.AutoCreateTopics || internalTopic(name) {
		// Internal topics are created by the broker itself, with their
		// compaction settings, never as a side effect of a client call.
		return nil, errUnknownTopicOrPartition
	}
	if err := validTopicName(name); err != nil {
		return nil, errInvalidTopicException
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name]; t != nil {
		return t, 0
	}
	t, err := b.createTopicLocked(name, b.cfg.DefaultPartitions, nil)
	if err != nil {
		b.log.Error("auto-create topic failed", "topic", name, "err", err)
		return nil, errKafkaStorageError
	}
	return t, 0
}

// sortedTopics returns all topics sorted by name.
func (b *Broker) sortedTopics() []*topic {
	b.mu.RLock()
	ts := make([]*topic, 0, len(b.topics))
	for _, t := range b.topics {
		ts = append(ts, t)
	}
	b.mu.RUnlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	return ts
}

// startLeaderLoops starts the loops only a leader runs (retention and
// compaction, offsets retention, transaction timeouts), owned by wg and
// stopped with ctx: a single node's or static leader's for its life, a
// failover leader's for its term.
func (b *Broker) startLeaderLoops(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(3)
	go func() { defer wg.Done(); b.retentionLoop(ctx) }()
	go func() { defer wg.Done(); b.groups.RunLeader(ctx) }()
	go func() { defer wg.Done(); b.txns.Run(ctx) }()
	if b.cl != nil {
		wg.Add(1)
		go func() { defer wg.Done(); b.cl.runLeader(ctx) }()
	}
}

// retentionLoop enforces topic retention and compaction until ctx ends.
func (b *Broker) retentionLoop(ctx context.Context) {
	b.every(ctx, time.Duration(b.cfg.RetentionCheckMs)*time.Millisecond, b.EnforceRetention)
}

// every calls fn with broker time every interval until ctx ends.
func (b *Broker) every(ctx context.Context, interval time.Duration, fn func(time.Time)) {
	coordinator.Every(ctx, b.clock, interval, fn)
}

// EnforceRetention applies every topic's retention now, and compacts the
// topics whose cleanup.policy includes compact.
func (b *Broker) EnforceRetention(now time.Time) {
	for _, t := range b.sortedTopics() {
		if t.settings.cleanupCompact {
			b.compact(t, now)
		}
		for _, p := range t.partitions {
			n, err := p.Log().EnforceRetention(now)
			if err != nil {
				b.log.Error("retention failed", "topic", t.name, "partition", p.Index, "err", err)
				continue
			}
			if n > 0 {
				b.log.Info("retention removed segments", "topic", t.name, "partition", p.Index, "segments", n, "log_start_offset", p.Log().StartOffset())
				p.TrimAborted()
			}
		}
	}
}

// compact runs the cleaner over a topic's closed segments. It is safe
// against concurrent fetches and appends (storage swaps cleaned segments in
// atomically) and never touches the active segment.
func (b *Broker) compact(t *topic, now time.Time) {
	for _, p := range t.partitions {
		st, err := p.Log().Compact(now, storage.CompactOptions{
			DeleteRetentionMs:  t.settings.deleteRetention,
			MinCompactionLagMs: t.settings.minCompactLag,
			// Only what can never be taken back decides what is
			// superseded.
			MaxOffset: p.HighWatermark(),
		})
		if err != nil {
			b.log.Error("compaction failed", "topic", t.name, "partition", p.Index, "err", err)
			continue
		}
		if st.SegmentsRewritten > 0 {
			b.log.Info("compacted", "topic", t.name, "partition", p.Index, "segments", st.SegmentsRewritten,
				"records_before", st.RecordsBefore, "records_after", st.RecordsAfter, "bytes_before", st.BytesBefore, "bytes_after", st.BytesAfter)
		}
	}
}

// Close stops background work and closes every log. Client connections are
// closed by the Server that owns them.
func (b *Broker) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.cancel()
	if b.repl != nil {
		b.repl.stop()
	}
	b.wg.Wait()
	// A final sync: acks=1 data written just before shutdown is kept.
	b.flush.SyncAll()
	b.checkpointRecoveryPoints()
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			p.SaveState()
		}
	}
	b.closeLogs()
	b.mem.frames.Close()
	return nil
}

func (b *Broker) closeLogs() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.topics {
		for _, p := range t.partitions {
			p.Close()
		}
	}
	if b.volume != nil {
		_ = b.volume.Close() // a directory opened read-only: nothing to lose
		b.volume = nil
	}
}

func validTopicName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name is longer than 249 characters")
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("topic name %q may only contain ASCII letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

func newUUID() [16]byte {
	var id [16]byte
	for {
		_, _ = rand.Read(id[:])
		id[6] = id[6]&0x0f | 0x40
		id[8] = id[8]&0x3f | 0x80
		if id != [16]byte{} {
			return id
		}
	}
}

func formatUUID(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

func parseUUID(s string) ([16]byte, error) {
	var id [16]byte
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("bad topic id %q", s)
	}
	copy(id[:], b)
	return id, nil
}

// recoveryPointInterval is how often every partition's durable log end is
// checkpointed. A start that recovers less than its checkpoint knows its
// disk lost data that had been durable (storage.RecoveryReport.Damaged);
// the interval bounds how recent a loss can go unnoticed, and keeps the
// cost at one small atomic write per changed partition.
const recoveryPointInterval = 2 * time.Second

// recoveryPointShare bounds the time checkpoints take: a pass that took d
// is followed by one at least recoveryPointShare×d later. Each changed
// partition's checkpoint is a file written and renamed; with 10,000
// partitions taking writes, passes every 2 s were a tenth of the broker's
// CPU. Kafka checkpoints every 60 s (log.flush.offset.checkpoint.interval.ms).
const recoveryPointShare = 20

// recoveryPointWait is how long to wait after a pass that took took.
func recoveryPointWait(took time.Duration) time.Duration {
	return max(recoveryPointInterval, took*recoveryPointShare)
}

// recoveryPointLoop checkpoints recovery points until ctx ends; Close
// writes the last ones after its final sync.
func (b *Broker) recoveryPointLoop(ctx context.Context) {
	timer := time.NewTimer(recoveryPointInterval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		b.checkpointRecoveryPoints()
		timer.Reset(recoveryPointWait(time.Since(start)))
	}
}

func (b *Broker) checkpointRecoveryPoints() {
	var parts []*partition.Partition
	var names []string
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			parts = append(parts, p)
			names = append(names, t.name)
		}
	}
	errs := make([]error, len(parts))
	if b.volume != nil {
		logs := make([]*storage.Log, len(parts))
		for i, p := range parts {
			logs[i] = p.Log()
		}
		errs = b.volume.CheckpointRecoveryPoints(logs)
	} else {
		for i, p := range parts {
			errs[i] = p.Log().CheckpointRecoveryPoint()
		}
	}
	for i, err := range errs {
		// A full disk is the disk monitor's to report, once.
		if err != nil && !errors.Is(err, storage.ErrClosed) && !diskhealth.IsSpaceError(err) {
			b.log.Warn("checkpoint recovery point", "topic", names[i], "partition", parts[i].Index, "err", err)
		}
	}
}

// LogDamaged reports whether this start found a log that lost data that
// had been durable: storage recovery found damage below the log's recovery
// point or in an older segment, or a partition holds less than the
// clean-shutdown marker names (read by ConsumeCleanShutdown).
func (b *Broker) LogDamaged() bool { return b.logDamaged.Load() }

// Advertised is the host and port clients are told to dial.
func (b *Broker) Advertised() (string, int32) {
	addr := b.cfg.AdvertisedAddress
	if addr == "" && b.cfg.Replication != nil && b.cfg.Replication.Enabled {
		addr = b.cfg.Replication.ClientAddress
	}
	if addr == "" {
		addr = b.cfg.ClientListenAddr()
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	if b.boundPort != 0 && b.cfg.Port == 0 && b.cfg.AdvertisedAddress == "" {
		p = b.boundPort
	}
	return host, int32(p)
}
