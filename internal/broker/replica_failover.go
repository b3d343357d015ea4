package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/replication/raftgroup"
	"github.com/moonmq/moonmq/internal/replication/shipping"
	"github.com/moonmq/moonmq/internal/txncoord"
	"github.com/moonmq/moonmq/internal/vfs"
)

// Failover mode (Replication.Enabled and Failover.Enabled): the replicas
// elect a leader with raftgroup. The serving leader (its claim committed,
// epoch E) appends under E, runs replication.Leader in failover mode and
// serves clients once it rebuilt its state from the internal topics; every
// other replica refuses clients like a static follower and copies the
// leader's logs with shipping.Follower.

// errNotServing refuses an append on a failover replica that is not
// running as leader.
var errNotServing = coordinator.ErrNotServing

// errNotFollowing refuses a shipped append or truncation on a failover
// replica that is not following.
var errNotFollowing = errors.New("this replica is not following a leader")

// driveTick is how often the failover loop re-checks the group's state,
// advances the leader's clock and proposes its ISR changes.
const driveTick = 50 * time.Millisecond

// silentGrace is how long a new leader waits, from its promotion, for an
// ISR member it has neither heard from over Raft nor seen fetching before
// proposing it out of the ISR (replication.WithSilentRemoval). A live
// member has answered the election or the claim's append by then, or a
// heartbeat (one every Raft tick, 50 ms); the dead previous leader has
// not. Waiting IsrLagSeconds instead would stall acks=all for that long
// after every failover.
const silentGrace = 150 * time.Millisecond

// failoverReplication reports whether cfg asks for failover mode.
func failoverReplication(cfg *config.Server) bool {
	r := cfg.Replication
	return r != nil && r.Enabled && r.Failover.Enabled
}

// mayFollow is checked under a partition's append lock before the shipping
// follower writes it.
func (r *replica) mayFollow() error {
	if r.failover && r.role.get() != roleFollowing {
		return errNotFollowing
	}
	return nil
}

// committedISR is the ISR committed in the group's Raft log (every replica
// before any exists).
func (r *replica) committedISR() []int32 {
	st := r.node.State()
	if !st.HasISR {
		return slices.Clone(r.ids)
	}
	return slices.Clone(st.ISR)
}

// peerAddress is the replication address of replica id.
func (r *replica) peerAddress(id int32) (string, bool) {
	for _, p := range r.cfg.Peers {
		if int32(p.Id) == id {
			return p.Address, true
		}
	}
	return "", false
}

// uncleanRestart consumes the clean-shutdown marker and reports whether
// this start follows an unclean stop of a replica that had run in a
// failover group before (a fresh DataDir has no Raft state and nothing to
// have lost).
func (r *replica) uncleanRestart() (bool, error) {
	clean, err := r.b.ConsumeCleanShutdown()
	if err != nil {
		return false, fmt.Errorf("clean-shutdown marker: %w", err)
	}
	_, err = vfs.ReadFile(r.b.fs, filepath.Join(r.b.cfg.DataDir, raftgroup.FileName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return !clean, nil
}

// noteCatchUp records that p's durable end has (or has not) reached hw,
// the leader's high watermark, and once every partition has, lets this
// replica stand for election again.
func (r *replica) noteCatchUp(p *partition.Partition, hw int64) {
	now := p.Log().DurableEnd() >= hw
	r.mu.Lock()
	if r.caught == nil {
		r.caught = map[*partition.Partition]bool{}
	}
	was := r.caught[p]
	r.caught[p] = now
	r.mu.Unlock()
	if !now || was {
		return // only a partition that just caught up can complete the set
	}
	for _, t := range r.b.sortedTopics() {
		for _, q := range t.partitions {
			r.mu.Lock()
			ok := r.caught[q]
			r.mu.Unlock()
			if !ok {
				return
			}
		}
	}
	if r.unclean.CompareAndSwap(true, false) {
		r.b.log.Info("failover replication: caught up with the leader after an unclean restart", "leader", r.leaderID())
		r.node.ClearUnclean()
	}
}

func (r *replica) startFailover(ctx context.Context, mux *http.ServeMux, log *slog.Logger) error {
	unclean, err := r.uncleanRestart()
	if err != nil {
		return err
	}
	damaged := r.b.logDamaged.Load()
	switch {
	case damaged:
		log.Error("failover replication: a log lost data that had been durable; not standing for election until caught up with a leader, however long that takes")
	case unclean:
		log.Warn("failover replication: restarted without a clean shutdown; not standing for election until caught up with a leader (or, if none appears, for a few seconds)")
	}
	unclean = unclean || damaged
	r.unclean.Store(unclean)
	peers := map[int32]string{}
	for _, p := range r.cfg.Peers {
		peers[int32(p.Id)] = p.Address
	}
	r.tr = raftgroup.NewHTTPTransport(raftgroup.HTTPConfig{Peers: peers, Token: r.cfg.Token,
		TLS: r.tls.ClientConfig(), Logger: log})
	node, err := raftgroup.NewNode(raftgroup.Config{
		ID: r.self, Members: r.ids, Role: replication.ParseRole(r.cfg.Role),
		DataDir: r.b.cfg.DataDir, FS: r.b.fs, Transport: r.tr, Token: r.cfg.Token,
		Logger: log.With("component", "raft"), UncleanRestart: unclean, LogDamaged: damaged,
		Degraded: r.b.disk.Degraded,
	})
	if err != nil {
		r.tr.Close()
		return err
	}
	r.node = node
	mux.Handle("/replication/raft/", node.Handler())
	if r.b.cl != nil {
		if err := r.b.cl.start(ctx, mux, r); err != nil {
			r.tr.Close()
			return fmt.Errorf("cluster mode: start the metadata node: %w", err)
		}
	}
	r.fol = shipping.NewFollower(shipping.FollowerConfig{ReplicaID: r.self, Token: r.cfg.Token, TLS: r.tls.ClientConfig(), Logger: log, Pause: r.fetchPause, Fatal: r.b.fatal}, sink{r})
	if err := r.fol.Start(ctx); err != nil {
		r.tr.Close()
		return err
	}
	r.role.move(roleIdle, roleFollowing)
	if err := node.Start(ctx); err != nil {
		r.fol.Stop()
		r.tr.Close()
		return err
	}
	go func() { _ = r.srv.Serve(r.ln) }()
	go func() { defer close(r.done); r.drive(ctx) }()
	log.Info("failover replication: started", "replicate", r.ln.Addr().String(), "replicas", r.ids)
	return nil
}

// stopFailover ends leadership, the Raft node and its transport. The HTTP
// server and the follower are stopped by stop.
func (r *replica) stopFailover() {
	if !r.failover || r.node == nil {
		return
	}
	r.node.Stop()
	<-r.done
	r.stepDown()
	r.tr.Close()
}

// drive acts on the group's state: it promotes this replica when its claim
// commits, demotes it when it stops serving, steers the follower towards
// the leader, feeds committed ISR changes to replication.Leader and
// proposes its ISR changes.
func (r *replica) drive(ctx context.Context) {
	tick := time.NewTicker(driveTick)
	defer tick.Stop()
	log := r.b.log.With("component", "replication")
	for {
		select {
		case <-ctx.Done():
			return
		case st := <-r.node.Changes():
			r.apply(ctx, st, log)
		case now := <-tick.C:
			// Changes holds only the latest status: re-check so a missed
			// step (serving lost and regained) is still acted on.
			r.apply(ctx, r.node.Status(), log)
			r.tickLeader(ctx, now, log)
		}
	}
}

func (r *replica) apply(ctx context.Context, st raftgroup.Status, log *slog.Logger) {
	if r.b.cl != nil {
		// Before a promotion: a new leader refuses appends to the
		// partitions its group fenced from its first moment.
		r.b.cl.setFences(st.State.Fences, st.State.Floors)
	}
	if !st.Unclean {
		// Cleared by the node (its wait ran out) or never set.
		r.unclean.Store(false)
	}
	if st.Serving && st.Epoch > 0 {
		r.mu.Lock()
		ldr := r.ldr
		r.mu.Unlock()
		if ldr != nil && ldr.Epoch() == st.Epoch {
			r.isrChanged(st)
			return
		}
		if ldr != nil {
			r.stepDown()
		}
		r.promote(ctx, st, log)
		return
	}
	r.mu.Lock()
	wasLeader := r.ldr != nil
	r.mu.Unlock()
	if wasLeader {
		log.Warn("failover replication: stopped leading; closing client connections", "epoch", r.b.epoch.Load(), "leader", st.Leader)
		r.stepDown()
	}
	if st.Leader == raftgroup.NoLeader || st.Leader == r.self {
		return
	}
	r.mu.Lock()
	same := r.leader == st.Leader && r.followedEpoch == st.Epoch
	r.leader, r.followedEpoch = st.Leader, st.Epoch
	r.mu.Unlock()
	if same {
		return
	}
	addr, ok := r.peerAddress(st.Leader)
	if !ok {
		return
	}
	r.b.epoch.Store(st.Epoch) // what Metadata reports; a follower appends nothing of its own
	log.Info("failover replication: following", "leader", st.Leader, "epoch", st.Epoch, "address", addr)
	r.fol.SetLeader(st.Leader, addr, st.Epoch)
}

// barrier waits until no append that started before it is still running.
func (r *replica) barrier() {
	for _, t := range r.b.sortedTopics() {
		for _, p := range t.partitions {
			p.Barrier()
		}
	}
}

// promote makes this replica the leader of epoch st.Epoch: the follower
// stops writing, replication.Leader starts from every partition's current
// position and high watermark, and once the internal topics' state is
// rebuilt clients are served.
func (r *replica) promote(ctx context.Context, st raftgroup.Status, log *slog.Logger) {
	r.role.move(roleFollowing, roleIdle)
	r.fol.ClearLeader()
	r.barrier() // no shipped append is still running
	b := r.b
	// Nor a shipped topic change (the sink checks under b.mu).
	b.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier
	b.mu.Unlock()
	b.epoch.Store(st.Epoch)
	isr := r.ids
	if st.State.HasISR {
		isr = st.State.ISR
	}
	var opts []replication.Option
	if r.cfg.IsrLagSeconds > 0 {
		opts = append(opts, replication.WithIsrLag(time.Duration(r.cfg.IsrLagSeconds*float64(time.Second))))
	}
	opts = append(opts, replication.WithMinISR(defaultMinISR(&b.cfg)), replication.WithSilentRemoval(silentGrace))
	ldr := replication.NewLeader(opts...)
	ldr.Configure(r.ids, r.self, isr, st.Epoch)
	// The epoch's clock, which the silent-member grace counts from,
	// starts now rather than at the first tick.
	ldr.Tick(time.Now())
	for _, id := range st.Heard {
		ldr.Heard(id)
	}
	r.mu.Lock()
	r.epochStart = map[*partition.Partition]int64{}
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			k := replKey(p)
			r.epochStart[p] = p.Log().EndOffset()
			ldr.SetMinISR(k, t.settings.minISR)
			ldr.AppendLocal(k, p.Log().EndOffset(), p.Log().DurableEnd())
			ldr.SeedHighWatermark(k, p.HighWatermark())
		}
	}
	r.ldr, r.leader, r.followedEpoch = ldr, r.self, 0
	r.isrSeen = slices.Clone(isr)
	r.pos, r.seen = map[*partition.Partition]map[int32]int64{}, map[int32]time.Time{}
	r.started = time.Now()
	r.mu.Unlock()
	r.role.move(roleIdle, rolePromoting)
	log.Info("failover replication: leading; rebuilding state", "epoch", st.Epoch, "isr", isr)
	lctx, cancel := context.WithCancel(ctx)
	r.leadCancel = cancel
	r.leadLoops.Add(1)
	go func() {
		defer r.leadLoops.Done()
		for {
			err := b.rebuildLeaderState(lctx)
			if err == nil {
				break
			}
			if lctx.Err() != nil {
				return
			}
			log.Error("failover replication: rebuilding state failed; not serving yet, retrying", "err", err)
			select {
			case <-lctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if lctx.Err() != nil {
			return // leadership ended during the rebuild
		}
		b.startLeaderLoops(lctx, &r.leadLoops)
		if !r.role.move(rolePromoting, roleServing) {
			return // stepping down
		}
		log.Info("failover replication: serving clients", "epoch", st.Epoch)
	}()
}

// stepDown ends leadership: clients are refused and disconnected, the
// leader's loops stop, no append of its own runs any more, and the follower
// may write again.
func (r *replica) stepDown() {
	r.role.stop()
	if r.leadCancel != nil {
		r.leadCancel()
		r.leadLoops.Wait()
		r.leadCancel = nil
	}
	r.mu.Lock()
	wasLeader := r.ldr != nil
	r.ldr = nil
	r.leader = raftgroup.NoLeader
	r.epochStart = nil
	r.mu.Unlock()
	r.barrier() // no append of the old leadership is still running
	if wasLeader {
		r.b.closeClients()
		r.b.wakeAll()
	}
	r.role.move(roleIdle, roleFollowing)
}

// wakeAll wakes every partition's waiters (acks=all producers and long
// polls re-check their condition).
func (b *Broker) wakeAll() {
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			p.Wake()
		}
	}
}

// isrChanged feeds a newly committed ISR to replication.Leader and raises
// the high watermarks it then allows.
func (r *replica) isrChanged(st raftgroup.Status) {
	if !st.State.HasISR {
		return
	}
	r.mu.Lock()
	if r.ldr == nil || slices.Equal(r.isrSeen, st.State.ISR) {
		r.mu.Unlock()
		return
	}
	r.isrSeen = slices.Clone(st.State.ISR)
	r.ldr.ISRCommitted(st.State.ISR, st.Epoch)
	r.mu.Unlock()
	r.b.log.Info("failover replication: ISR committed", "isr", st.State.ISR, "epoch", st.Epoch)
	r.raiseAll()
	// Writes waiting for a high watermark re-check min.insync.replicas.
	r.b.wakeAll()
}

// raiseAll raises every partition's high watermark to the leader's. It
// also refreshes each partition's min.insync.replicas (replicaPolicy), so
// a changed topic config takes effect within one tick.
func (r *replica) raiseAll() {
	for _, t := range r.b.sortedTopics() {
		for _, p := range t.partitions {
			p.Recommit()
		}
	}
}

// tickLeader advances the leader's clock and proposes its ISR changes.
func (r *replica) tickLeader(ctx context.Context, now time.Time, log *slog.Logger) {
	st := r.node.Status()
	r.mu.Lock()
	if r.ldr == nil {
		r.mu.Unlock()
		return
	}
	if st.RaftTerm == uint64(r.ldr.Epoch()) {
		for _, id := range st.Heard {
			r.ldr.Heard(id)
		}
	}
	r.ldr.Tick(now)
	props := r.ldr.Proposals()
	if _, pending := r.ldr.Pending(); !pending && len(props) == 0 && !r.node.State().HasISR {
		// Record the ISR this leader works from (the whole group) in the
		// Raft log, so that from now on only its members may be elected
		// whatever their configured Role.
		props = append(props, replication.ISRChange{Epoch: r.ldr.Epoch(), ISR: slices.Clone(r.isrSeen), Replica: r.self, Expand: true})
	}
	r.mu.Unlock()
	for _, c := range props {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := r.node.ProposeISR(pctx, c)
		cancel()
		if err != nil && raftgroup.CertainlyNotProposed(err) {
			// Never appended: it may be proposed again.
			log.Warn("failover replication: ISR change not proposed; will retry", "isr", c.ISR, "epoch", c.Epoch, "err", err)
			r.mu.Lock()
			if r.ldr != nil {
				r.ldr.ProposalFailed(c)
			}
			r.mu.Unlock()
			continue
		}
		if err != nil {
			// Not certain to have failed: the change stays pending (and
			// acks=all keeps waiting for the larger set) until a new epoch.
			log.Warn("failover replication: proposing an ISR change failed", "isr", c.ISR, "epoch", c.Epoch, "err", err)
			continue
		}
		log.Info("failover replication: proposed ISR change", "isr", c.ISR, "replica", c.Replica, "expand", c.Expand)
	}
	r.raiseAll()
	if len(props) > 0 {
		// A pending shrink may put partitions under min.insync.replicas:
		// writes waiting for their high watermark answer at once.
		r.b.wakeAll()
	}
}

// rebuildLeaderState reloads what the broker keeps in memory from the
// internal topics, as a start does: committed offsets, producer ids and
// transactions (finished and swept). It first waits until the high
// watermark of each internal topic covers its log end, so nothing the
// previous leader acknowledged is missed.
func (b *Broker) rebuildLeaderState(ctx context.Context) error {
	// Users and ACLs apply themselves as their high watermarks move
	// (statelog.go); waiting for them here means no request is judged
	// with credentials or ACLs older than the group committed.
	for _, name := range []string{offsetsTopic, producerIDsTopic, txncoord.StateTopic, usersTopic, aclsTopic} {
		t := b.lookup(name)
		if t == nil {
			continue
		}
		for _, p := range t.partitions {
			end := p.Log().EndOffset()
			// Not waitOwn: that gives up at once while the ISR is below
			// min.insync.replicas, and this wait outlasts such a spell.
			if !partition.WaitUntil(ctx, []*partition.Partition{p}, time.Hour, func() bool { return p.HighWatermark() >= end }) {
				return ctx.Err()
			}
		}
	}
	for _, step := range b.leaderReloads() {
		if err := step.reload(ctx); err != nil {
			return fmt.Errorf("rebuilding %s: %w", step.name, err)
		}
	}
	return nil
}

// leaderReload is one owner's state that a new leader rebuilds before it
// serves: the owner forgets what it held from an earlier term and reloads
// itself from its internal topic.
type leaderReload struct {
	name   string
	reload func(ctx context.Context) error
}

// leaderReloads lists them in the order they run: transactions after
// offsets, since finishing a transaction applies its pending commits, and
// the group registry last, since those commits may be all a group has.
func (b *Broker) leaderReloads() []leaderReload {
	return []leaderReload{
		{"coordinator hand-overs", func(context.Context) error { // cluster_coordmove.go
			if b.cl != nil {
				b.cl.dropHandovers()
			}
			return nil
		}},
		{"committed offsets", b.groups.Reload}, // groupcoord
		{"producer ids", b.resetProducerIDs},   // idempotence.go
		{"transactions", b.txns.Reload},        // internal/txncoord
		{"group registry", func(context.Context) error { b.groups.RegisterGroups(); return nil }},
	}
}
