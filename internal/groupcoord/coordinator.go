// Package groupcoord is the group coordinator: consumer groups'
// membership (the state machine of internal/group, which it owns), their
// committed offsets, and the records of when each group became empty, all
// of it kept in __consumer_offsets; and the group side of the Kafka APIs
// that read and change them (OffsetCommit, OffsetFetch, OffsetDelete,
// DeleteGroups, the commits of TxnOffsetCommit).
//
// It writes only __consumer_offsets, and only through the
// coordinator.Writer it is built with; of the broker it knows only its
// Host. It never reads or writes another topic, never decides leadership,
// and takes no request from the wire: the broker's API layer decodes,
// authorizes and routes, then calls an exported method here. Nothing
// outside resets its state: a new leader calls Reload, which rebuilds it
// from the topic as a start does.
package groupcoord

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/clock"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/group"
	"github.com/moonmq/moonmq/internal/partition"
)

// Topic is the internal, compacted topic that holds committed offsets
// and group-metadata records. State that must survive goes there first and
// is applied to memory from there, so a restart (and, with replication, a
// new leader) rebuilds exactly what was acknowledged.
const Topic = "__consumer_offsets"

// topicConfigs are the configs Topic is created with: compaction keeps the
// last record of each key, which is all a reload needs.
func topicConfigs() map[string]string { return map[string]string{"cleanup.policy": "compact"} }

// TopicConfigs are the configs the coordinator gives its topic.
func TopicConfigs() map[string]string { return topicConfigs() }

// Host is what the coordinator needs of the broker besides the Writer.
type Host interface {
	// Partitions is how many partitions topic has (0: no such topic):
	// a commit for any other partition is refused.
	Partitions(topic string) int
	// Owned returns the partitions of the internal topic name whose
	// groups this broker coordinates (every partition, but in cluster
	// mode only those its replication group owns), none when the topic
	// was never created: loading reads them but must not create them.
	Owned(name string) []*partition.Partition
	// Leading reports whether this broker writes its own state now (a
	// single node, a static leader, a failover leader that serves). The
	// leader-only passes do nothing elsewhere, whoever calls them.
	Leading() bool
}

// Config builds a Coordinator.
type Config struct {
	Writer coordinator.Writer
	Host   Host
	Logger *slog.Logger
	// Clock stamps commits and the times groups became empty, and is the
	// "now" offsets retention and membership timeouts compare them with
	// (nil: clock.New()).
	Clock *clock.Clock
	// OffsetsRetentionMinutes is Kafka's offsets.retention.minutes; -1
	// keeps offsets for ever.
	OffsetsRetentionMinutes int64
	// OffsetsRetentionCheck is how often RunLeader looks for expired
	// offsets.
	OffsetsRetentionCheck time.Duration
	// ExpiredOffsets and ExpiredGroups count what offsets retention
	// removed, for the broker's stats (nil: not counted).
	ExpiredOffsets, ExpiredGroups *atomic.Int64
}

// Coordinator is one broker's group coordinator.
type Coordinator struct {
	cfg     Config
	w       coordinator.Writer
	host    Host
	log     *slog.Logger
	groups  *group.Coordinator
	offsets *offsetStore
}

// New returns a coordinator with no state; Reload loads it.
func New(cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ExpiredOffsets == nil {
		cfg.ExpiredOffsets = new(atomic.Int64)
	}
	if cfg.ExpiredGroups == nil {
		cfg.ExpiredGroups = new(atomic.Int64)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.New()
	}
	return &Coordinator{cfg: cfg, w: cfg.Writer, host: cfg.Host, log: cfg.Logger,
		groups:  group.New(group.WithLogger(cfg.Logger.With("component", "groups")), group.WithClock(cfg.Clock)),
		offsets: newOffsetStore()}
}

// Reload replaces the committed offsets in memory with what Topic holds
// and forgets every group's membership, as a start (with nothing to
// forget) and a new leader must. Membership is not replicated: what this
// replica remembers from an earlier term of its own is stale (members have
// since rejoined another leader, with epochs and assignments that may
// collide).
//
// The loaded groups are registered by RegisterGroups, not here: the
// transaction coordinator reloads in between, and the transactions it
// finishes may commit offsets of groups that must then be registered too.
func (c *Coordinator) Reload(context.Context) error {
	c.offsets.reset()
	if err := c.load(); err != nil {
		return err
	}
	c.groups.Reset()
	return nil
}

// LoadPartition makes the groups of one partition of Topic (of n) this
// coordinator's, as a move of that partition into the broker's
// replication group hands them over: what it remembered of them from an
// earlier stay is forgotten, their committed offsets are read from p (up
// to its high watermark, which the move's cut-over put at the old owner's
// log end), and they are registered. The caller answers NOT_COORDINATOR
// for them until it returns.
func (c *Coordinator) LoadPartition(p *partition.Partition, n int) error {
	c.UnloadPartition(p.Index, n)
	if _, err := c.loadPartition(p); err != nil {
		return err
	}
	c.RegisterGroups() // groups already known are left as they are
	return nil
}

// UnloadPartition forgets the groups of partition index of Topic (of n),
// which a move handed to another replication group: their offsets and
// their members (a JoinGroup or SyncGroup still waiting is answered
// NOT_COORDINATOR), as a failover forgets membership.
func (c *Coordinator) UnloadPartition(index int32, n int) {
	picks := func(g string) bool { return coordinator.PartitionFor(g, n) == index }
	c.offsets.drop(picks)
	c.groups.Forget(picks)
}

// RegisterGroups makes the groups known through Topic (committed offsets,
// or a record that they are empty) exist as Empty, as in Kafka, so they can
// be listed, described, deleted and expired: each empty since its recorded
// time, or since now when it has no record.
func (c *Coordinator) RegisterGroups() {
	since := c.offsets.emptySinceAll()
	for _, g := range c.offsets.groupNames() {
		if _, ok := since[g]; !ok {
			since[g] = time.Time{}
		}
	}
	for g, t := range since {
		c.groups.EnsureGroupSince(g, t)
	}
}

// Run expires sessions, pending member ids and rebalance deadlines until
// ctx ends. Every replica runs it, for its life.
func (c *Coordinator) Run(ctx context.Context) { c.groups.Run(ctx, 100*time.Millisecond) }

// RunLeader runs the passes only a leader makes, offsets retention and the
// recording of when groups became empty (which retention measures from),
// until ctx ends: a single node's or static leader's for its life, a
// failover leader's for its term.
func (c *Coordinator) RunLeader(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		coordinator.Every(ctx, c.cfg.Clock, c.cfg.OffsetsRetentionCheck, func(now time.Time) {
			_, _, _ = c.ExpireOffsets(ctx, now) // logged; retried at the next check
		})
	})
	coordinator.Every(ctx, c.cfg.Clock, time.Second, func(now time.Time) {
		if _, err := c.RecordGroupStates(now); err != nil {
			// Below min.insync.replicas this fails every second: the
			// ISR is reported loudly elsewhere.
			c.log.Debug("recording when groups became empty failed; retrying in a second", "err", err)
		}
	})
	wg.Wait()
}

// partitionFor is the partition of Topic that holds group's records.
func (c *Coordinator) partitionFor(group string) (*partition.Partition, error) {
	return c.w.Partition(Topic, group, topicConfigs())
}

// EachCommitted calls fn for every committed offset, for the consumer-lag
// metrics. fn runs outside the coordinator's locks.
func (c *Coordinator) EachCommitted(fn func(group, topic string, partition int32, offset int64)) {
	for k, v := range c.offsets.all() {
		fn(k.group, k.topic, k.partition, v.offset)
	}
}

// The membership APIs are internal/group's; the coordinator owns the state
// machine so that one owner resets and reloads groups and their offsets.

// JoinGroup joins a classic group; it returns once the rebalance is done.
func (c *Coordinator) JoinGroup(ctx context.Context, r *kmsg.JoinGroupRequest, clientID, clientHost string) *kmsg.JoinGroupResponse {
	return c.groups.JoinGroup(ctx, r, clientID, clientHost)
}

// SyncGroup hands out a classic group's assignments.
func (c *Coordinator) SyncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	return c.groups.SyncGroup(ctx, r)
}

// Heartbeat keeps a classic group's member alive.
func (c *Coordinator) Heartbeat(r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	return c.groups.Heartbeat(r)
}

// LeaveGroup removes members from a classic group.
func (c *Coordinator) LeaveGroup(r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	return c.groups.LeaveGroup(r)
}

// ListGroups lists the groups of both protocols.
func (c *Coordinator) ListGroups(r *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	return c.groups.ListGroups(r)
}

// DescribeGroups describes classic groups.
func (c *Coordinator) DescribeGroups(r *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	return c.groups.DescribeGroups(r)
}

// ConsumerGroupHeartbeat is a KIP-848 member's heartbeat; topics is the
// caller's snapshot of the topics it may be assigned.
func (c *Coordinator) ConsumerGroupHeartbeat(r *kmsg.ConsumerGroupHeartbeatRequest, topics group.Topics, clientID, clientHost string) *kmsg.ConsumerGroupHeartbeatResponse {
	return c.groups.ConsumerGroupHeartbeat(r, topics, clientID, clientHost)
}

// ConsumerGroupDescribe describes KIP-848 consumer groups.
func (c *Coordinator) ConsumerGroupDescribe(r *kmsg.ConsumerGroupDescribeRequest, topics group.Topics) *kmsg.ConsumerGroupDescribeResponse {
	return c.groups.ConsumerGroupDescribe(r, topics)
}
