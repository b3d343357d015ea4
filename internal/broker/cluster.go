package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/cluster/metanode"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/groupcoord"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/txncoord"
)

// Cluster mode (docs/CLUSTER.md): this broker's replication group is one
// of several, and the cluster's metadata log says which group owns which
// partition. clusterMode is the broker's side of it. It runs the metadata
// node (a voter or an observer), keeps an immutable view of the applied
// metadata for the request paths, and, while this broker leads its
// group, publishes the group's state and makes the group's topics match
// the metadata log. Every group holds every partition of every topic;
// it serves only the ones it owns and refuses the others with the owner's
// leader as the hint (KIP-951), so that a move later has a copy to fill.
//
// The metadata log is the only source of topics in cluster mode: the
// request handlers propose to it and never create or delete a topic
// themselves; the leader's reconcile pass is the one writer of the
// group's topic registry (followers copy it through the manifest, as in
// any replication group).
type clusterMode struct {
	b     *Broker
	group string
	self  int32
	log   *slog.Logger

	node *metanode.Node
	view atomic.Pointer[clusterView]

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// security is what was last applied of the metadata log's ACLs and
	// users (cluster_security.go).
	security securityMirror

	// lastWarn limits the leader loop's warnings while the metadata log
	// has no leader (they would come every pass).
	lastWarn atomic.Int64
	// leaderSeenMs is the broker time at which the metadata log last had
	// a leader as far as this broker knows (see leaseNowMs).
	leaderSeenMs atomic.Int64

	// spare is a block of producer ids taken ahead from the metadata log
	// (start, limit; limit 0: none), so that new idempotent producers are
	// served while the log has no leader, until the block runs out.
	// keepSpare refills it; refill wakes it.
	spareMu sync.Mutex
	spare   [2]int64
	refill  chan struct{}

	// fences are the move fences of the group's Raft log as this replica
	// last applied them (setFences); movers are the copiers of the moves
	// into the group, on its leader (cluster_move.go).
	fences atomic.Pointer[groupFences]
	movers movers
	// lastLoad is the automatic balancer's last reading of the
	// partitions' sizes (cluster_balance.go), its goroutine's alone.
	lastLoad loadSample
	// handovers are the coordinators' partitions moved in or out that
	// this broker's coordinators have not loaded or forgotten yet
	// (cluster_coordmove.go).
	handovers coordHandovers
	// placeMu orders the writes of the partitions' placements, so an
	// older view never overwrites a newer one's epoch bases.
	placeMu sync.Mutex
}

// clusterView is one reading of the applied metadata, rebuilt whenever it
// changes, so that produce and fetch check ownership without a lock.
type clusterView struct {
	applied uint64
	// topicsDigest changes when a topic, its partitions or its configs
	// change (not with leases and group states): the reconcile pass
	// runs only then.
	topicsDigest uint64
	topics       map[string]meta.Topic
	byID         map[[16]byte]string
	groups       map[string]meta.Group
	brokers      map[int32]meta.Broker
	// members lists each group's registered brokers, by id.
	members map[string][]int32
	// preferred is each group's preferred leader
	// (meta.PreferredLeaders): Metadata lists it first, and
	// ElectLeaders moves the group's leadership to it.
	preferred map[string]int32
}

// clusterLeaderTick is how often the group leader re-checks the metadata
// when nothing changed (a failed proposal is retried then).
const clusterLeaderTick = 500 * time.Millisecond

// clusterProposeTimeout bounds one proposal to the metadata log.
const clusterProposeTimeout = 10 * time.Second

// clusterEnabled reports whether cfg runs cluster mode.
func clusterEnabled(cfg *config.Server) bool { return cfg.Cluster != nil && cfg.Cluster.Enabled }

func newClusterMode(b *Broker) *clusterMode {
	c := &clusterMode{b: b, group: b.cfg.Cluster.GroupId, self: int32(b.cfg.Cluster.BrokerId),
		log: b.log.With("component", "cluster")}
	c.view.Store(&clusterView{topics: map[string]meta.Topic{}, byID: map[[16]byte]string{},
		groups: map[string]meta.Group{}, brokers: map[int32]meta.Broker{}, members: map[string][]int32{}})
	return c
}

// start runs the metadata node with its handler on the replication port
// and the goroutine that keeps the view current. Stop ends both.
func (c *clusterMode) start(ctx context.Context, mux *http.ServeMux, r *replica) error {
	voters := map[int32]string{}
	for _, v := range c.b.cfg.Cluster.MetadataVoters {
		voters[int32(v.Id)] = v.Address
	}
	host, port := c.b.Advertised()
	node, err := metanode.New(metanode.Config{
		ID: c.self, GroupID: c.group, Voters: voters,
		ClientAddress:      net.JoinHostPort(host, strconv.Itoa(int(port))),
		Machine:            cmp.Or(c.b.cfg.Cluster.Machine, host),
		ReplicationAddress: replicationAddress(c.b.cfg.Cluster.ReplicationAddress, voters[c.self], r.cfg.ReplicateHost, host, r.cfg.ReplicatePort),
		DataDir:            c.b.cfg.DataDir, FS: c.b.fs, Token: r.cfg.Token, TLS: r.tls.ClientConfig(),
		Now: c.b.clock.Now, Logger: c.b.log,
	})
	if err != nil {
		return err
	}
	mux.Handle(metanode.HandlerPrefix, node.Handler())
	c.mountTxnHandlers(mux)
	mux.HandleFunc(PathMoveRead, c.serveMoveRead)
	mux.HandleFunc(PathMoveFence, c.serveMoveFence)
	mux.HandleFunc(PathLeaderTransfer, c.serveLeaderTransfer)
	mux.HandleFunc(PathLoad, c.serveLoad)
	if err := node.Start(ctx); err != nil {
		return err
	}
	c.node = node
	// The copy the node restarted with is applied before clients are
	// served: they must not meet a broker that has not heard of its ACLs
	// yet.
	c.rebuildView()
	c.applySecurity()
	vctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.refill = make(chan struct{}, 1)
	c.wg.Add(2)
	go func() { defer c.wg.Done(); c.watch(vctx) }()
	go func() { defer c.wg.Done(); c.keepSpare(vctx) }()
	if c.b.cfg.Cluster.AutoBalance {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.autoBalance(vctx) }()
	}
	c.log.Info("cluster mode: metadata node started", "cluster", c.b.cfg.Cluster.ClusterId, "group", c.group,
		"voter", slices.Contains(slices.Collect(maps.Keys(voters)), c.self))
	return nil
}

// replicationAddress is the replication address this broker registers,
// where other groups' brokers reach it: Cluster.ReplicationAddress if
// set, else its MetadataVoters entry if it is a voter, else
// ReplicateHost, or the client address's host when ReplicateHost binds
// every interface.
func replicationAddress(advertised, voterAddr, replicateHost, clientHost string, port int) string {
	if advertised != "" {
		return advertised
	}
	if voterAddr != "" {
		return voterAddr
	}
	h := replicateHost
	if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
		h = clientHost
	}
	return net.JoinHostPort(h, strconv.Itoa(port))
}

// stop ends the watcher and the spare's keeper (first, so that a
// proposal of the keeper's does not hold up the node's stop) and the
// metadata node (its lease ends with it).
func (c *clusterMode) stop() {
	if c.node == nil {
		return
	}
	c.cancel()
	c.node.Stop()
	c.wg.Wait()
}

// watch rebuilds the view at each change of the applied metadata.
func (c *clusterMode) watch(ctx context.Context) {
	for {
		changed := c.node.Changed()
		// Every lease renewal is a change, so this is at most a lease
		// interval older than the moment the metadata log lost its leader.
		c.leaseNowMs()
		c.rebuildView()
		c.applySecurity()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (c *clusterMode) rebuildView() {
	v := &clusterView{topics: map[string]meta.Topic{}, byID: map[[16]byte]string{},
		groups: map[string]meta.Group{}, brokers: map[int32]meta.Broker{}, members: map[string][]int32{}}
	c.node.Read(func(s *meta.State, applied uint64) {
		v.applied = applied
		h := fnv.New64a()
		for _, t := range s.Topics() {
			v.topics[t.Name] = t
			v.byID[[16]byte(t.ID)] = t.Name
			fmt.Fprintf(h, "%s/%s/%d;", t.Name, t.ID, len(t.Partitions))
			configs := s.Configs(meta.ResourceTopic, t.Name)
			for _, k := range slices.Sorted(maps.Keys(configs)) {
				fmt.Fprintf(h, "%s=%s;", k, configs[k])
			}
		}
		v.topicsDigest = h.Sum64()
		for _, g := range s.Groups() {
			v.groups[g.ID] = g
		}
		for _, br := range s.Brokers() {
			v.brokers[br.ID] = br
			v.members[br.Group] = append(v.members[br.Group], br.ID)
		}
	})
	machineOf := map[int32]string{}
	for _, m := range v.members {
		slices.Sort(m)
	}
	for id, br := range v.brokers {
		machineOf[id] = br.Machine
	}
	v.preferred = meta.PreferredLeaders(v.members, machineOf)
	c.publishView(v)
}

// current is the latest view.
func (c *clusterMode) current() *clusterView { return c.view.Load() }

// replicas lists a group's brokers as Metadata gives them: the preferred
// leader first, then the others by id.
func (v *clusterView) replicas(group string) []int32 {
	out := make([]int32, 0, len(v.members[group]))
	pref, ok := v.preferred[group]
	if ok {
		out = append(out, pref)
	}
	for _, id := range v.members[group] {
		if !ok || id != pref {
			out = append(out, id)
		}
	}
	return out
}

// partition returns what the metadata says of a partition.
func (v *clusterView) partition(topic string, index int32) (meta.Partition, bool) {
	t, ok := v.topics[topic]
	if !ok || index < 0 || int(index) >= len(t.Partitions) {
		return meta.Partition{}, false
	}
	return t.Partitions[index], true
}

// leaderHint is the owner's leader and epoch of a partition another group
// owns: what a refusal names so the client goes there.
type leaderHint struct {
	leader, epoch int32
}

// foreign reports whether a partition of this topic is owned by another
// group, and that group's leader. A partition the metadata does not know
// (yet) is not foreign: the caller's own checks answer it.
func (c *clusterMode) foreign(topic string, index int32) (leaderHint, bool) {
	v := c.current()
	p, ok := v.partition(topic, index)
	if !ok || p.Owner == c.group {
		return leaderHint{}, false
	}
	g, ok := v.groups[p.Owner]
	if !ok || g.Leader < 0 {
		return leaderHint{leader: -1, epoch: -1}, true
	}
	return leaderHint{leader: g.Leader, epoch: partitionEpoch(p, g)}, true
}

// owner is what /stats and /metrics say of a partition's owner; false
// when the metadata does not know the partition.
func (c *clusterMode) owner(v *clusterView, topic string, index int32) (status.PartitionOwner, bool) {
	p, ok := v.partition(topic, index)
	if !ok {
		return status.PartitionOwner{}, false
	}
	o := status.PartitionOwner{Group: p.Owner, Leader: -1, LeaderEpoch: -1, ISR: []int32{}, Local: p.Owner == c.group}
	if p.Move != meta.MoveNone {
		o.Move, o.Source, o.Target = string(p.Move), p.Source, p.Target
	}
	if g, ok := c.groupState(v, p.Owner); ok {
		o.Leader, o.LeaderEpoch = g.Leader, partitionEpoch(p, g)
		o.ISR = append(o.ISR, g.ISR...)
	}
	return o, true
}

// listed are the brokers clients are told of, by id: those whose lease
// runs and, in a group that published its state, that are in its ISR. A
// broker that died drops out when its group's leader takes it out of the
// ISR (IsrLagSeconds), or when its lease ends if it led the group, not
// only at the end of its lease: clients that send a request to every
// broker (ListGroups) would otherwise wait for a dead one. self is always
// listed.
func (c *clusterMode) listed(v *clusterView, nowMs int64) []int32 {
	var out []int32
	for _, id := range slices.Sorted(maps.Keys(v.brokers)) {
		br := v.brokers[id]
		g, published := c.groupState(v, br.Group)
		inSync := !published || g.Leader < 0 || slices.Contains(g.ISR, id)
		if id == c.self || br.Live(nowMs) && inSync {
			out = append(out, id)
		}
	}
	return out
}

// groupState is a group's leader, term and ISR: for this broker's own
// group what the group itself knows now, for the others what they
// published. A group's failover so reaches the clients of its own
// brokers also while the metadata log has no leader to take the
// publication.
func (c *clusterMode) groupState(v *clusterView, id string) (meta.Group, bool) {
	if id == c.group {
		if r := c.b.repl; r != nil {
			if l := r.leaderID(); l >= 0 {
				isr := r.committedISR()
				slices.Sort(isr)
				return meta.Group{ID: id, Leader: l, Term: c.b.epoch.Load(), ISR: isr}, true
			}
		}
	}
	g, ok := v.groups[id]
	return g, ok
}

// partitionEpoch is the leader epoch a partition exposes, at its owner's
// term as groupState gives it.
func partitionEpoch(p meta.Partition, g meta.Group) int32 {
	if e, ok := meta.LeaderEpoch(p.EpochBase, g.Term); ok {
		return e
	}
	return p.LeaderEpoch
}

// endpoint is a registered broker's client host and port.
func (v *clusterView) endpoint(id int32) (string, int32, bool) {
	br, ok := v.brokers[id]
	if !ok {
		return "", 0, false
	}
	host, ps, err := net.SplitHostPort(br.ClientAddress)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, false
	}
	return host, int32(port), true
}

// nowMs is broker time, which the metadata leader stamps leases with.
func (c *clusterMode) nowMs() int64 { return c.b.clock.Now().UnixMilli() }

// leaseNowMs is the time leases are judged at: now while the metadata log
// has a leader, which renews the leases of live brokers; the last moment
// it had one while it has none. Nobody can renew a lease then, and a
// lease only decides what clients are told: letting them all run out
// would hide every other group's brokers from this broker's clients, so
// that a client bootstrapped here could not reach a partition whose group
// failed over, while produce and fetch go on in every group. A broker
// that dies meanwhile still drops out of its own group's ISR.
func (c *clusterMode) leaseNowMs() int64 {
	now := c.nowMs()
	if c.node.Leader() != metanode.NoLeader {
		c.leaderSeenMs.Store(now)
		return now
	}
	if seen := c.leaderSeenMs.Load(); seen > 0 {
		return seen
	}
	return now
}

// propose sends a command to the metadata log, bounded in time.
func (c *clusterMode) propose(ctx context.Context, cmd metanode.Command) (metanode.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterProposeTimeout)
	defer cancel()
	return c.node.Propose(ctx, cmd)
}

// runLeader is the group leader's loop: publish the group's state, make
// sure the coordinators' topics exist, and make the group's topics match
// the metadata. It runs while this broker leads its group.
func (c *clusterMode) runLeader(ctx context.Context) {
	t := time.NewTicker(clusterLeaderTick)
	defer t.Stop()
	defer c.stopMovers()
	var reconciled *uint64 // the digest the last clean pass matched
	for {
		changed := c.node.Changed()
		c.leaderPass(ctx, &reconciled)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

func (c *clusterMode) leaderPass(ctx context.Context, reconciled **uint64) {
	r := c.b.repl
	if r == nil || !r.role.serving() {
		c.cancelMovers()
		return
	}
	if err := c.publishGroupState(ctx, r); err != nil && ctx.Err() == nil {
		c.warn("cluster mode: publishing the group's state to the metadata log failed; retrying", "err", err)
	}
	v := c.current()
	if *reconciled == nil || **reconciled != v.topicsDigest {
		if c.reconcile(v) {
			d := v.topicsDigest
			*reconciled = &d
		}
		// Partitions it just created take their placements.
		c.applyPlacements()
	}
	c.tendMoves(ctx, v)
	c.handOverCoordinators(ctx)
}

// warn logs at most one warning per 30 seconds.
func (c *clusterMode) warn(msg string, args ...any) {
	now := c.b.clock.Now().UnixNano()
	if last := c.lastWarn.Load(); now-last < int64(30*time.Second) || !c.lastWarn.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn(msg, args...)
}

// publishGroupState writes this group's leader, term and ISR to the
// metadata log when what it holds differs, so every broker of the
// cluster names the right leader for the group's partitions.
func (c *clusterMode) publishGroupState(ctx context.Context, r *replica) error {
	want := meta.GroupStateRecord{GroupID: c.group, Leader: c.self, Term: c.b.epoch.Load(), ISR: r.committedISR()}
	slices.Sort(want.ISR)
	if g, ok := c.current().groups[c.group]; ok && g.Leader == want.Leader && g.Term == want.Term && slices.Equal(g.ISR, want.ISR) {
		return nil
	}
	_, err := c.propose(ctx, metanode.Command{PublishGroupState: &want})
	if err == nil {
		c.log.Info("cluster mode: published the group's state", "leader", want.Leader, "term", want.Term, "isr", want.ISR)
	}
	return err
}

// coordinatorTopics are the coordinators' internal topics, whose
// partitions (Cluster.CoordinatorPartitions of each) are spread over the
// groups like any topic's: each group hosts the consumer groups and
// transactional ids of the partitions it owns.
var coordinatorTopics = []string{offsetsTopic, txncoord.StateTopic}

// internalTopicConfigs are the configs the coordinators give their topics.
func internalTopicConfigs(name string) map[string]string {
	switch name {
	case offsetsTopic:
		return groupcoord.TopicConfigs()
	case txncoord.StateTopic:
		return txncoord.StateConfigs()
	}
	return nil
}

// ensureCoordinatorTopics creates the coordinators' topics in the
// metadata log if no broker did yet, on first use (a FindCoordinator, a
// coordinator's first write) as Kafka creates its own, so that the groups
// of a new cluster have registered by then. The partitions are dealt over
// the live groups in turn. Another broker's concurrent creation wins and
// is fine.
func (c *clusterMode) ensureCoordinatorTopics(ctx context.Context) error {
	for _, name := range coordinatorTopics {
		// The applied state itself, not the view: it may lag.
		var exists bool
		c.node.Read(func(s *meta.State, _ uint64) { _, exists = s.Topic(name) })
		if exists {
			continue
		}
		n := c.b.cfg.Cluster.Partitions()
		_, err := c.propose(ctx, metanode.Command{CreateTopic: &metanode.CreateTopic{Name: name, Partitions: int32(n), Configs: internalTopicConfigs(name), Placement: meta.Placement{RoundRobin: true}}})
		if metanode.ErrorCode(err) == errTopicAlreadyExists {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// reconcile makes the group's topics match the metadata: it creates the
// topics the metadata has (with its ids and configs), grows their
// partitions, and deletes the topics the metadata no longer has. A local
// topic is deleted only once this copy of the metadata has seen it (its
// metaIndex): a leader whose copy lags must not delete what it has not
// heard of yet. It reports whether the group's topics now match v (a
// failed step, or a topic left for a newer copy, makes the next pass try
// again).
func (c *clusterMode) reconcile(v *clusterView) (clean bool) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.repl.role.serving() {
		return false // a follower's topics are its leader's manifest
	}
	clean = true
	for _, name := range slices.Sorted(maps.Keys(v.topics)) {
		mt := v.topics[name]
		configs := c.topicConfigs(name)
		lt := b.topics[name]
		if lt != nil && lt.id != [16]byte(mt.ID) {
			if lt.metaIndex == 0 || lt.metaIndex > v.applied {
				clean = false
				continue // not known to be replaced: a newer copy will say
			}
			c.log.Info("cluster mode: replacing a topic the metadata log re-created", "topic", name)
			if err := b.deleteTopicLocked(lt); err != nil {
				c.log.Error("cluster mode: deleting a replaced topic failed", "topic", name, "err", err)
				clean = false
				continue
			}
			lt = nil
		}
		if lt == nil {
			t, err := b.createTopicWithIDLocked(name, [16]byte(mt.ID), len(mt.Partitions), configs)
			if err != nil {
				c.log.Error("cluster mode: creating a topic of the metadata log failed", "topic", name, "err", err)
				clean = false
				continue
			}
			c.stamp(t, v.applied)
			continue
		}
		if lt.metaIndex == 0 {
			c.stamp(lt, v.applied)
			lt = b.topics[name]
		}
		if len(mt.Partitions) > len(lt.partitions) {
			if err := b.addPartitionsLocked(lt, len(mt.Partitions)); err != nil {
				c.log.Error("cluster mode: adding partitions failed", "topic", name, "err", err)
				clean = false
				continue
			}
			lt = b.topics[name]
		}
		if !maps.Equal(configs, lt.overrides) {
			if err := b.setTopicConfigsLocked(lt, configs); err != nil {
				c.log.Error("cluster mode: saving a topic's configs failed", "topic", name, "err", err)
				clean = false
			}
		}
	}
	for name, lt := range b.topics {
		if _, ok := v.topics[name]; ok || lt.metaIndex == 0 || lt.metaIndex > v.applied {
			continue
		}
		c.log.Info("cluster mode: deleting a topic the metadata log deleted", "topic", name)
		if err := b.deleteTopicLocked(lt); err != nil {
			c.log.Error("cluster mode: deleting a topic failed", "topic", name, "err", err)
			clean = false
		}
	}
	return clean
}

// stamp records that the metadata copy at index holds t. The caller holds
// b.mu.
func (c *clusterMode) stamp(t *topic, index uint64) {
	if err := c.b.setMetaIndexLocked(t, index); err != nil {
		c.log.Error("cluster mode: saving a topic failed", "topic", t.name, "err", err)
	}
}

// topicConfigs are a topic's configs as the metadata holds them.
func (c *clusterMode) topicConfigs(name string) map[string]string {
	var out map[string]string
	c.node.Read(func(s *meta.State, _ uint64) { out = s.Configs(meta.ResourceTopic, name) })
	return out
}

// waitLocal waits until the group holds the metadata's topic name (the
// leader's reconcile pass creates it), for at most d.
func (c *clusterMode) waitLocal(ctx context.Context, name string, d time.Duration) *topic {
	deadline := time.Now().Add(d)
	for {
		mt, known := c.current().topics[name]
		if t := c.b.lookup(name); t != nil && known && t.id == [16]byte(mt.ID) && len(t.partitions) >= len(mt.Partitions) {
			return t
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-c.node.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// coordinatorLeader is the broker that coordinates key (a group id, or
// with FindCoordinator type 1 a transactional id): the leader of the group
// owning key's partition of the coordinators' topic. ok is false while
// there is none.
func (c *clusterMode) coordinatorLeader(coordinatorType int8, key string) (int32, bool) {
	kind := groupCoordinator
	if coordinatorType == 1 {
		kind = txnCoordinator
	}
	v := c.current()
	p, ok := c.coordinatorPartition(v, kind, key)
	if !ok {
		return -1, false
	}
	g, ok := c.groupState(v, p.Owner)
	if !ok || g.Leader < 0 {
		return -1, false
	}
	return g.Leader, true
}

// coordinatorPartition is key's partition of the coordinators' topic of
// the given kind, as v knows it; false before the topic is created.
func (c *clusterMode) coordinatorPartition(v *clusterView, kind coordinatorKind, key string) (meta.Partition, bool) {
	name := offsetsTopic
	if kind == txnCoordinator {
		name = txncoord.StateTopic
	}
	t, ok := v.topics[name]
	if !ok || len(t.Partitions) == 0 {
		return meta.Partition{}, false
	}
	return v.partition(name, coordinator.PartitionFor(key, len(t.Partitions)))
}

// coordinates reports whether this group hosts the coordinator of key.
func (c *clusterMode) coordinates(kind coordinatorKind, key string) bool {
	p, ok := c.coordinatorPartition(c.current(), kind, key)
	if !ok || p.Owner != c.group {
		return false
	}
	name := offsetsTopic
	if kind == txnCoordinator {
		name = txncoord.StateTopic
	}
	return !c.handingOver(name, p.Partition)
}

// takeProducerIDs returns a block of producer ids for this broker to hand
// out: the spare one when there is one, else one taken from the metadata
// log now. Either way the spare is refilled behind it.
func (c *clusterMode) takeProducerIDs(ctx context.Context) (start, limit int64, err error) {
	c.spareMu.Lock()
	start, limit = c.spare[0], c.spare[1]
	c.spare = [2]int64{}
	c.spareMu.Unlock()
	select {
	case c.refill <- struct{}{}:
	default:
	}
	if limit > 0 {
		return start, limit, nil
	}
	return c.allocateProducerIDs(ctx)
}

// keepSpare keeps a spare block of producer ids, taking one from the
// metadata log whenever there is none, and trying again every second
// while the log cannot answer, until ctx ends. Blocks are unique across
// the cluster and across terms, so a spare taken as a follower serves
// when this broker leads; one lost with the process only leaves a gap.
func (c *clusterMode) keepSpare(ctx context.Context) {
	for {
		c.spareMu.Lock()
		have := c.spare[1] > 0
		c.spareMu.Unlock()
		if !have {
			start, limit, err := c.allocateProducerIDs(ctx)
			switch {
			case err == nil:
				c.spareMu.Lock()
				c.spare = [2]int64{start, limit}
				c.spareMu.Unlock()
				continue
			case ctx.Err() != nil:
				return
			}
			c.log.Debug("cluster mode: taking a spare block of producer ids failed; trying again", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-c.refill:
		}
	}
}

// allocateProducerIDs takes the next block of producer ids from the
// metadata log: ids are unique across the cluster.
func (c *clusterMode) allocateProducerIDs(ctx context.Context) (start, limit int64, err error) {
	res, err := proposeBlock(ctx, func() (metanode.Result, error) {
		return c.propose(ctx, metanode.Command{AllocateProducerIDs: &metanode.AllocateProducerIDs{BrokerID: c.self}})
	})
	if err != nil {
		return 0, 0, err
	}
	for _, rec := range res.Records {
		if r, ok := rec.(meta.ProducerIdsRecord); ok {
			return r.NextProducerID - meta.ProducerIdBlockSize, r.NextProducerID, nil
		}
	}
	return 0, 0, errors.New("the metadata log answered a producer-id allocation without a block")
}

// blockAttempts bounds the proposals of one producer-id block.
const blockAttempts = 8

// proposeBlock proposes a producer-id block until one commits. A block
// names the state it was proposed against, so of blocks proposed at once
// (brokers taking spares, InitProducerId on several leaders) all but the
// first to commit are refused (INVALID_REQUEST); by the time a proposer
// hears so, its state holds the block that won, and it proposes again
// against that. Other errors, and ctx's end, are the caller's.
func proposeBlock(ctx context.Context, propose func() (metanode.Result, error)) (metanode.Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := propose()
		if err == nil || !errors.Is(err, kerr.InvalidRequest) || attempt == blockAttempts || ctx.Err() != nil {
			return res, err
		}
	}
}

// findCoordinator names, for each key, the leader of the group owning
// the key's partition of the coordinators' topic.
func (c *clusterMode) findCoordinator(q *kmsg.FindCoordinatorRequest) kmsg.Response {
	if q.Version < 4 && q.CoordinatorKey == "" {
		resp := q.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = errInvalidGroupID, -1, -1
		return resp
	}
	v := c.current()
	name := offsetsTopic
	if q.CoordinatorType == 1 {
		name = txncoord.StateTopic
	}
	if _, ok := v.topics[name]; !ok {
		ctx, cancel := context.WithTimeout(c.b.ctx, 2*time.Second)
		err := c.ensureCoordinatorTopics(ctx)
		cancel()
		if err != nil {
			c.warn("cluster mode: creating the coordinators' topics in the metadata log failed; clients retry", "err", err)
		}
		v = c.current()
	}
	return coordinatorAnswer(q, func(key string) (int32, string, int32, bool) {
		id, ok := c.coordinatorLeader(q.CoordinatorType, key)
		if !ok {
			return -1, "", -1, false
		}
		host, port, ok := v.endpoint(id)
		return id, host, port, ok
	})
}

// metadata answers Metadata from the metadata copy: every live broker of
// every group, and each partition's owner group's leader, brokers and ISR.
// A topic asked for that the metadata lacks is created through it when
// allowed.
func (c *clusterMode) metadata(r *kmsg.MetadataRequest, allowCreate bool) *kmsg.MetadataResponse {
	b := c.b
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	id := b.clusterID
	resp.ClusterID = &id
	resp.ControllerID = b.repl.leaderID()
	v := c.current()
	for _, bid := range c.listed(v, c.leaseNowMs()) {
		if host, port, ok := v.endpoint(bid); ok {
			// The rack is the broker's group: rack-aware clients and
			// tools (moonmq cluster status) see the failure domains.
			rack := v.brokers[bid].Group
			resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: bid, Host: host, Port: port, Rack: &rack})
		}
	}
	var names []string
	var missing []kmsg.MetadataResponseTopic
	if r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0) {
		names = slices.Sorted(maps.Keys(v.topics))
	} else {
		for _, rt := range r.Topics {
			var name string
			switch {
			case rt.Topic != nil:
				name = *rt.Topic
			case rt.TopicID != [16]byte{}:
				n, ok := v.byID[rt.TopicID]
				if !ok {
					missing = append(missing, kmsg.MetadataResponseTopic{ErrorCode: errUnknownTopicID, TopicID: rt.TopicID})
					continue
				}
				name = n
			default:
				missing = append(missing, kmsg.MetadataResponseTopic{ErrorCode: errInvalidRequest})
				continue
			}
			if _, ok := v.topics[name]; !ok {
				code := c.autoCreate(name, allowCreate && (r.AllowAutoTopicCreation || r.Version < 4))
				if code == 0 {
					v = c.current()
				}
				if _, ok := v.topics[name]; !ok {
					n := name
					missing = append(missing, kmsg.MetadataResponseTopic{ErrorCode: code, Topic: &n})
					continue
				}
			}
			names = append(names, name)
		}
	}
	for _, name := range names {
		mt := v.topics[name]
		n := name
		out := kmsg.MetadataResponseTopic{Topic: &n, TopicID: [16]byte(mt.ID), IsInternal: internalTopic(name)}
		for _, p := range mt.Partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = p.Partition
			mp.Leader, mp.LeaderEpoch = -1, -1
			mp.Replicas = v.replicas(p.Owner)
			if g, ok := c.groupState(v, p.Owner); ok && g.Leader >= 0 {
				mp.Leader, mp.LeaderEpoch, mp.ISR = g.Leader, partitionEpoch(p, g), slices.Clone(g.ISR)
			} else {
				mp.ErrorCode = errLeaderNotAvailable
			}
			if mp.Replicas == nil {
				mp.Replicas = []int32{}
			}
			if mp.ISR == nil {
				mp.ISR = []int32{}
			}
			out.Partitions = append(out.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, out)
	}
	resp.Topics = append(resp.Topics, missing...)
	return resp
}

// autoCreate creates a topic a client named (Server.AutoCreateTopics)
// through the metadata log. It returns 0 once the metadata has it, else
// the code to answer: UNKNOWN_TOPIC_OR_PARTITION when it may not be
// created, LEADER_NOT_AVAILABLE (retriable) when the creation failed for
// now.
func (c *clusterMode) autoCreate(name string, allow bool) int16 {
	b := c.b
	if !allow || b.cfg.AutoCreateTopics == nil || !*b.cfg.AutoCreateTopics || internalTopic(name) {
		return errUnknownTopicOrPartition
	}
	if err := validTopicName(name); err != nil {
		return errInvalidTopicException
	}
	_, err := c.propose(b.ctx, metanode.Command{CreateTopic: &metanode.CreateTopic{Name: name, Partitions: int32(b.cfg.DefaultPartitions)}})
	if code := metanode.ErrorCode(err); code != 0 && code != errTopicAlreadyExists {
		c.warn("cluster mode: auto-creating a topic failed", "topic", name, "err", err)
		return errLeaderNotAvailable
	}
	return 0
}

// describeCluster answers DescribeCluster from the metadata copy.
func (c *clusterMode) describeCluster(resp *kmsg.DescribeClusterResponse) {
	v := c.current()
	resp.Brokers = resp.Brokers[:0]
	for _, bid := range c.listed(v, c.leaseNowMs()) {
		if host, port, ok := v.endpoint(bid); ok {
			br := kmsg.NewDescribeClusterResponseBroker()
			rack := v.brokers[bid].Group
			br.NodeID, br.Host, br.Port, br.Rack = bid, host, port, &rack
			resp.Brokers = append(resp.Brokers, br)
		}
	}
}

// lookupOrCreate is the broker's lookupOrCreate in cluster mode: a topic
// is the metadata's, and this group serves it once its leader created it
// locally.
func (c *clusterMode) lookupOrCreate(name string, allowCreate bool) (*topic, int16) {
	if t := c.local(name); t != nil {
		return t, 0
	}
	if _, ok := c.current().topics[name]; !ok {
		if code := c.autoCreate(name, allowCreate); code != 0 {
			return nil, code
		}
	}
	if t := c.waitLocal(c.b.ctx, name, 2*time.Second); t != nil {
		return t, 0
	}
	return nil, errLeaderNotAvailable
}

// local is the group's copy of the metadata's topic name, nil while the
// group has none (or only an older topic of that name).
func (c *clusterMode) local(name string) *topic {
	t := c.b.lookup(name)
	if t == nil {
		return nil
	}
	if mt, ok := c.current().topics[name]; !ok || [16]byte(mt.ID) != t.id {
		return nil
	}
	return t
}

// createTopics creates topics through the metadata log; the groups that
// own their partitions create them locally as their leaders see them.
func (c *clusterMode) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	return c.b.createTopics(r, metaTopics{c, ctx})
}

// metaTopics creates topics in the metadata log.
type metaTopics struct {
	c   *clusterMode
	ctx context.Context
}

func (m metaTopics) exists(name string) bool {
	_, ok := m.c.current().topics[name]
	return ok
}

func (metaTopics) maxPartitions() int { return meta.MaxPartitionsPerCommand }

// assign reads a manual replica assignment as Kafka's tools write one
// (kafka-topics --replica-assignment): each partition lists brokers, and
// in cluster mode they must all be of one group, which then owns the
// partition. Which brokers of the group are listed does not matter: every
// broker of the owner holds the partition.
func (m metaTopics) assign(a []kmsg.CreateTopicsRequestTopicReplicaAssignment) ([]string, int16, string) {
	v := m.c.current()
	groups := make([]string, len(a))
	seen := make([]bool, len(a))
	for _, pa := range a {
		p := pa.Partition
		if p < 0 || int(p) >= len(a) || seen[p] {
			return nil, errInvalidReplicaAssign, fmt.Sprintf("the assignment must list partitions 0 to %d once each (partition %d)", len(a)-1, p)
		}
		seen[p] = true
		if len(pa.Replicas) == 0 {
			return nil, errInvalidReplicaAssign, fmt.Sprintf("partition %d: no replicas", p)
		}
		for _, id := range pa.Replicas {
			br, ok := v.brokers[id]
			switch {
			case !ok:
				return nil, errInvalidReplicaAssign, fmt.Sprintf("partition %d: broker %d is not registered in the cluster", p, id)
			case groups[p] != "" && br.Group != groups[p]:
				return nil, errInvalidReplicaAssign, fmt.Sprintf("partition %d: brokers %v are of more than one group; list brokers of the group that is to own it", p, pa.Replicas)
			}
			groups[p] = br.Group
		}
	}
	return groups, 0, ""
}

func (m metaTopics) create(name string, n int, configs map[string]string, groups []string) ([16]byte, int16, string) {
	res, err := m.c.propose(m.ctx, metanode.Command{CreateTopic: &metanode.CreateTopic{Name: name, Partitions: int32(n), Configs: configs,
		Placement: meta.Placement{Groups: groups}}})
	if err != nil {
		return [16]byte{}, metanode.ErrorCode(err), err.Error()
	}
	for _, rec := range res.Records {
		if tr, ok := rec.(meta.TopicRecord); ok {
			return [16]byte(tr.TopicID), 0, ""
		}
	}
	return [16]byte{}, 0, ""
}

// deleteTopics deletes topics through the metadata log.
func (c *clusterMode) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	for _, a := range deleteAsks(r) {
		out := kmsg.NewDeleteTopicsResponseTopic()
		out.Topic, out.TopicID = a.name, a.id
		v := c.current()
		name, known := "", false
		if a.name != nil {
			name = *a.name
			_, known = v.topics[name]
		} else {
			name, known = v.byID[a.id]
		}
		switch {
		case !known && a.name == nil:
			out.ErrorCode = errUnknownTopicID
		case !known:
			out.ErrorCode = errUnknownTopicOrPartition
		case internalTopic(name):
			out.ErrorCode = errInvalidTopicException
		default:
			n := name
			out.Topic, out.TopicID = &n, [16]byte(v.topics[name].ID)
			if _, err := c.propose(ctx, metanode.Command{DeleteTopic: &metanode.DeleteTopic{Name: name}}); err != nil {
				out.ErrorCode = metanode.ErrorCode(err)
				msg := err.Error()
				out.ErrorMessage = &msg
			}
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// createPartitions grows topics through the metadata log.
func (c *clusterMode) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range r.Topics {
		out := kmsg.NewCreatePartitionsResponseTopic()
		out.Topic = rt.Topic
		fail := func(code int16, msg string) {
			out.ErrorCode = code
			out.ErrorMessage = &msg
		}
		mt, ok := c.current().topics[rt.Topic]
		switch {
		case !ok:
			fail(errUnknownTopicOrPartition, "no topic "+rt.Topic)
		case internalTopic(rt.Topic):
			fail(errInvalidTopicException, "internal topics keep their partition count")
		case int(rt.Count) <= len(mt.Partitions):
			fail(errInvalidPartitions, "partition count can only grow")
		case len(rt.Assignment) > 0:
			fail(errInvalidReplicaAssign, "manual replica assignment is not supported")
		case r.ValidateOnly:
		default:
			if _, err := c.propose(ctx, metanode.Command{CreatePartitions: &metanode.CreatePartitions{Name: rt.Topic, Total: rt.Count}}); err != nil {
				fail(metanode.ErrorCode(err), err.Error())
			}
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// alterTopicConfigs changes a topic's configs through the metadata log,
// one SetConfig per key that changes.
func (c *clusterMode) alterTopicConfigs(name string, edit func(map[string]string) error, validateOnly bool) (int16, string) {
	if _, ok := c.current().topics[name]; !ok {
		return errUnknownTopicOrPartition, "no topic " + name
	}
	if internalTopic(name) {
		return errInvalidTopicException, name + " is an internal topic: its configs are the broker's"
	}
	cur := c.topicConfigs(name)
	next := maps.Clone(cur)
	if err := edit(next); err != nil {
		return errInvalidConfig, err.Error()
	}
	for k, v := range next {
		if err := validateTopicConfig(k, &v); err != nil {
			return errInvalidConfig, err.Error()
		}
		if v == "" {
			return errInvalidConfig, fmt.Sprintf("%s: an empty value cannot be stored in cluster mode", k)
		}
	}
	if validateOnly {
		return 0, ""
	}
	keys := map[string]bool{}
	for k := range cur {
		keys[k] = true
	}
	for k := range next {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if cur[k] == next[k] {
			continue
		}
		sc := &metanode.SetConfig{ResourceType: meta.ResourceTopic, ResourceName: name, Key: k, Value: next[k]}
		if _, err := c.propose(c.b.ctx, metanode.Command{SetConfig: sc}); err != nil {
			return metanode.ErrorCode(err), err.Error()
		}
	}
	return 0, ""
}

// foreignPartition reports, in cluster mode, whether another group owns
// the partition, with its leader.
func (b *Broker) foreignPartition(topic string, index int32) (leaderHint, bool) {
	if b.cl == nil {
		return leaderHint{}, false
	}
	return b.cl.foreign(topic, index)
}

// allForeign reports whether another group owns every partition asked
// for, so the request needs nothing of this group's copy of the topic.
func allForeign[P any](b *Broker, topic string, parts []P, index func(P) int32) bool {
	if b.cl == nil || len(parts) == 0 {
		return false
	}
	for _, p := range parts {
		if _, foreign := b.cl.foreign(topic, index(p)); !foreign {
			return false
		}
	}
	return true
}

// leaderHints collects the distinct leaders an answer names, whose
// endpoints it then lists (KIP-951).
type leaderHints []int32

func (h *leaderHints) add(id int32) {
	if id >= 0 && !slices.Contains(*h, id) {
		*h = append(*h, id)
	}
}

// produceBrokers are the endpoints a Produce answer of version lists for
// the leaders it names (v10+).
func (h leaderHints) produceBrokers(b *Broker, version int16) []kmsg.ProduceResponseBroker {
	var out []kmsg.ProduceResponseBroker
	for _, id := range h {
		if host, port, ok := b.hintEndpoint(id); ok && version >= 10 {
			out = append(out, kmsg.ProduceResponseBroker{NodeID: id, Host: host, Port: port})
		}
	}
	return out
}

// fetchBrokers are the endpoints a Fetch answer of version lists for the
// leaders it names (a tagged field: flexible versions, v12+).
func (h leaderHints) fetchBrokers(b *Broker, version int16) []kmsg.FetchResponseBroker {
	var out []kmsg.FetchResponseBroker
	for _, id := range h {
		if host, port, ok := b.hintEndpoint(id); ok && version >= 12 {
			out = append(out, kmsg.FetchResponseBroker{NodeID: id, Host: host, Port: port})
		}
	}
	return out
}

// leaderHintFor is the leader a follower's refusal names for a partition:
// the owner group's in cluster mode when another group owns it, else this
// group's leader, groupLeader.
func (b *Broker) leaderHintFor(topic string, index int32, groupLeader int32) leaderHint {
	if h, foreign := b.foreignPartition(topic, index); foreign {
		return h
	}
	h := leaderHint{leader: groupLeader, epoch: b.epoch.Load()}
	if p, code := b.partitionOf(topic, index); code == 0 {
		h.epoch = b.exposedEpoch(p)
	}
	return h
}

// hintEndpoint is the client endpoint of a broker a refusal names.
func (b *Broker) hintEndpoint(id int32) (string, int32, bool) {
	if b.cl != nil {
		if host, port, ok := b.cl.current().endpoint(id); ok {
			return host, port, true
		}
	}
	return b.repl.endpoint(id)
}

// coordinatorTopic is a coordinators' topic: created in the metadata log
// if needed, then in this group by its leader's reconcile pass. Each of
// its partitions is written only by its owner group's coordinators.
func (c *clusterMode) coordinatorTopic(name string) (*topic, error) {
	if t := c.local(name); t != nil && len(t.partitions) > 0 {
		return t, nil
	}
	if err := c.ensureCoordinatorTopics(c.b.ctx); err != nil {
		return nil, err
	}
	t := c.waitLocal(c.b.ctx, name, 5*time.Second)
	if t == nil || len(t.partitions) == 0 {
		return nil, fmt.Errorf("cluster mode: %s is not created in this group yet", name)
	}
	return t, nil
}
