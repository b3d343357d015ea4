package broker

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/replication/raftgroup"
	"github.com/moonmq/moonmq/internal/replication/shipping"
	"github.com/moonmq/moonmq/internal/status"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

// CleanShutdownFile is the marker a broker leaves in its DataDir after a
// clean stop, once the final sync is done; a start removes it. A failover
// replica that starts without it, and had run before, restarted uncleanly
// (KIP-966): it may not stand for election until it has caught up with a
// leader.
const CleanShutdownFile = "clean-shutdown"

// MarkCleanShutdown writes the clean-shutdown marker, durably, with every
// partition's log end. Call it after Close has returned, so that it is only
// there if everything before it was synced.
func (b *Broker) MarkCleanShutdown() error {
	ends := map[string]int64{}
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			ends[fmt.Sprintf("%s/%d", t.name, p.Index)] = p.Log().EndOffset()
		}
	}
	data, err := json.Marshal(cleanShutdown{LogEnds: ends})
	if err != nil {
		return err
	}
	return vfs.WriteFileAtomic(b.fs, filepath.Join(b.cfg.DataDir, CleanShutdownFile), data)
}

// cleanShutdown is the marker's content.
type cleanShutdown struct {
	// LogEnds is every partition's log end at the clean stop: a start
	// that finds less (a segment lost or cut while the broker was down)
	// is not a clean restart, whatever the marker says.
	LogEnds map[string]int64 `json:"logEnds"`
}

// ConsumeCleanShutdown reports whether the clean-shutdown marker was there
// and every partition still holds what it held at the clean stop, and
// removes the marker, durably, so that a crash of this run is never
// mistaken for a clean stop. A second call reports false.
func (b *Broker) ConsumeCleanShutdown() (bool, error) {
	path := filepath.Join(b.cfg.DataDir, CleanShutdownFile)
	data, err := vfs.ReadFile(b.fs, path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	clean := b.logsAsLeft(data)
	if err := b.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return clean, b.fs.SyncDir(b.cfg.DataDir)
}

// logsAsLeft checks the marker's log ends against the logs as recovered.
func (b *Broker) logsAsLeft(marker []byte) bool {
	var m cleanShutdown
	if err := json.Unmarshal(marker, &m); err != nil || m.LogEnds == nil {
		b.log.Warn("clean-shutdown marker unreadable or from an older version; treating this start as unclean", "err", err)
		return false
	}
	now := map[string]int64{}
	for _, t := range b.sortedTopics() {
		for _, p := range t.partitions {
			now[fmt.Sprintf("%s/%d", t.name, p.Index)] = p.Log().EndOffset()
		}
	}
	for key, end := range m.LogEnds {
		if got, ok := now[key]; !ok && end > 0 || got < end {
			b.log.Error("a partition holds less than at the last clean stop (lost or damaged segment files); treating this start as unclean, and this replica will not stand for election before catching up with a leader",
				"partition", key, "log_end_at_stop", end, "log_end_now", got)
			b.logDamaged.Store(true)
			return false
		}
	}
	return true
}

// staticEpoch is the fixed leader epoch of static replication mode: the
// leader never changes without a restart, so there is nothing to fence.
const staticEpoch int32 = 1

// PathStatus is the replication status endpoint.
const PathStatus = "/replication/status"

// replica is the broker's part in a static replication group
// (Replication.Enabled and not Failover.Enabled). The leader serves
// clients and log shipping; a follower copies the leader's logs and refuses
// clients.
type replica struct {
	b    *Broker
	cfg  *config.Replication
	self int32
	ids  []int32 // the whole group, sorted
	// Forwarding to the leader (forward.go): its HTTP client, made on
	// first use, and how many forwards were relayed or failed.
	fwdOnce   sync.Once
	fwdHTTP   *http.Client
	fwdDone   atomic.Int64
	fwdFailed atomic.Int64
	// role is what this replica does with its logs and clients
	// (replica_role.go): a static leader serves from the start; in
	// failover mode it leads once its claim commits and serves once its
	// state is rebuilt.
	role roleState

	// Failover mode (Failover.Enabled): see replica_failover.go.
	failover      bool
	node          *raftgroup.Node
	tr            *raftgroup.HTTPTransport
	leadCancel    context.CancelFunc // ends the current leadership's loops
	leadLoops     sync.WaitGroup
	isrSeen       []int32 // the committed ISR last fed to ldr
	followedEpoch int32   // failover follower: the epoch followed
	// unclean is set while a failover replica that restarted uncleanly
	// has not caught up with a leader; caught holds, per partition,
	// whether its durable end has reached the leader's high watermark.
	unclean atomic.Bool
	caught  map[*partition.Partition]bool
	// epochStart is, per partition, the log end when this replica's
	// current leadership began (KIP-207; failover leader only).
	epochStart map[*partition.Partition]int64

	mu     sync.Mutex
	ldr    *replication.Leader
	pos    map[*partition.Partition]map[int32]int64 // followers' durable ends (leader)
	seen   map[int32]time.Time                      // followers' latest fetch (leader)
	leader int32                                    // the leader's id (-1: not known yet)
	isr    []int32                                  // follower: the leader's last status

	started time.Time // static leader: when it started leading; failover: when it last started leading

	// leaderLost is when leaderID first found no Raft leader (zero while
	// one is known): the last claim's leader is named for
	// deadLeaderGrace after it. Its own lock: every Metadata asks.
	lostMu     sync.Mutex
	leaderLost time.Time

	// epochs maintains EpochsFile; its writer runs from start to stop.
	epochs       *epochsFile
	epochsCancel context.CancelFunc
	epochsDone   chan struct{}

	fol  *shipping.Follower
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	// tls is Replication.TLS loaded (nil: plain HTTP), for the listener
	// and every request to a peer.
	tls *auth.PeerTLS
}

// staticReplication reports whether cfg asks for static replication.
func staticReplication(cfg *config.Server) bool {
	r := cfg.Replication
	return r != nil && r.Enabled && !r.Failover.Enabled
}

func newReplica(b *Broker) *replica {
	r := &replica{b: b, cfg: b.cfg.Replication, self: b.nodeID, leader: -1, started: time.Now(),
		pos: map[*partition.Partition]map[int32]int64{}, seen: map[int32]time.Time{}, done: make(chan struct{})}
	r.failover = r.cfg.Failover.Enabled
	r.epochs = newEpochsFile(b)
	r.ids = []int32{r.self}
	for _, p := range r.cfg.Peers {
		r.ids = append(r.ids, int32(p.Id))
	}
	sort.Slice(r.ids, func(i, j int) bool { return r.ids[i] < r.ids[j] })
	if !r.failover && (r.cfg.Role == "leader" || r.cfg.Role == "both") {
		r.role.move(roleIdle, rolePromoting)
		r.role.move(rolePromoting, roleServing)
		r.leader = r.self
		r.ldr = replication.NewLeader(replication.WithStatic(r.cfg.LagMax))
		r.ldr.Configure(r.ids, r.self, r.ids, staticEpoch)
	}
	return r
}

// key names a partition incarnation in replication.Leader: a topic deleted
// and recreated under its name starts afresh.
func replKey(p *partition.Partition) replication.TopicPartition {
	return replication.TopicPartition{Topic: p.Topic + "/" + formatUUID(p.TopicID), Partition: p.Index}
}

// track reports a partition the broker opened.
func (r *replica) track(p *partition.Partition) {
	r.epochs.track(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ldr == nil {
		return
	}
	r.ldr.AppendLocal(replKey(p), p.Log().EndOffset(), p.Log().DurableEnd())
}

// forget drops a deleted partition's follower positions.
func (r *replica) forget(p *partition.Partition) {
	r.epochs.forget(p)
	r.mu.Lock()
	delete(r.pos, p)
	delete(r.epochStart, p)
	if r.ldr != nil {
		r.ldr.RemovePartition(replKey(p))
	}
	r.mu.Unlock()
}

// replicaPolicy is the high-watermark policy of a replication group's
// partitions: the group's rule, computed by replication.Leader.
type replicaPolicy struct{ r *replica }

// Committed reports p's leader durable end to replication.Leader and
// returns the high watermark it allows; a follower (no Leader) has none:
// its high watermark is its leader's (sink.LeaderPosition).
func (pol replicaPolicy) Committed(p *partition.Partition, durable int64) (int64, bool) {
	r := pol.r
	m := r.b.minISROf(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ldr == nil {
		return 0, false
	}
	k := replKey(p)
	r.ldr.SetMinISR(k, m)
	r.ldr.AppendLocal(k, p.Log().EndOffset(), durable)
	return r.ldr.HighWatermark(k), true
}

// Held reports whether a failover leader holds p's high watermark because
// the ISR is below p's min.insync.replicas.
func (pol replicaPolicy) Held(p *partition.Partition) bool { return pol.r.heldUnderMinISR(p) }

// Acked: in static mode an acks=all produce also waits for every follower.
func (pol replicaPolicy) Acked(p *partition.Partition, end int64) bool { return pol.r.acked(p, end) }

// acked reports whether every follower has end of p on its disk.
func (r *replica) acked(p *partition.Partition, end int64) bool {
	if r.failover {
		// The high watermark is the lowest position over the acks=all set.
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pos := r.pos[p]
	for _, id := range r.ids {
		if id != r.self && pos[id] < end {
			return false
		}
	}
	return true
}

// hwBehindEpochStart reports whether p's high watermark is below its log
// end as of this leader's promotion (KIP-207): until it catches up, the
// latest offset this leader could name may be below one the previous
// leader already named, so ListOffsets answers OFFSET_NOT_AVAILABLE.
func (b *Broker) hwBehindEpochStart(p *partition.Partition) bool {
	r := b.repl
	if r == nil || !r.failover {
		return false
	}
	r.mu.Lock()
	start, ok := r.epochStart[p]
	r.mu.Unlock()
	return ok && p.HighWatermark() < start
}

// isrLag is Replication.IsrLagSeconds, or the default.
func (r *replica) isrLag() time.Duration {
	if r.cfg.IsrLagSeconds > 0 {
		return time.Duration(r.cfg.IsrLagSeconds * float64(time.Second))
	}
	return replication.DefaultIsrLag
}

// underMinISR reports whether fewer than minISR replicas are in sync for
// p, so that an acks=all produce is refused (NOT_ENOUGH_REPLICAS).
//
// Failover mode: the ISR is the group's (replication.Leader, which also
// holds p's high watermark while it is under the minimum). Static mode,
// where acks=all waits for every replica anyway, counts the leader and
// every follower that has fetched within IsrLagSeconds (or that may still
// start within it after the leader started): a minimum above that is
// refused at once instead of every produce timing out.
func (r *replica) underMinISR(p *partition.Partition, minISR int) bool {
	if r.failover {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ldr == nil {
			return false // not serving: the append is refused anyway
		}
		k := replKey(p)
		r.ldr.SetMinISR(k, minISR)
		return r.ldr.PartitionUnderMinISR(k)
	}
	if minISR <= 1 {
		return false
	}
	now, lag := time.Now(), r.isrLag()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range r.ids {
		last, ok := r.seen[id]
		if !ok {
			last = r.started
		}
		if id == r.self || now.Sub(last) <= lag {
			n++
		}
	}
	return n < minISR
}

// heldUnderMinISR reports whether a failover leader holds p's high
// watermark because the ISR is below p's min.insync.replicas.
func (r *replica) heldUnderMinISR(p *partition.Partition) bool {
	if !r.failover {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ldr != nil && r.ldr.PartitionUnderMinISR(replKey(p))
}

// counted is the set of replicas counted towards p's high watermark: the
// leader and every follower within LagMax of the log end.
func (r *replica) counted(p *partition.Partition) []int32 {
	if r.failover {
		return r.committedISR()
	}
	if !r.role.serving() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.isr) == 0 {
			return r.ids
		}
		return append([]int32(nil), r.isr...)
	}
	end := p.Log().EndOffset()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []int32{}
	for _, id := range r.ids {
		if pos, ok := r.pos[p][id]; id == r.self || ok && end-pos <= r.cfg.LagMax {
			out = append(out, id)
		}
	}
	return out
}

// groupISR is the replicas counted on every partition.
func (r *replica) groupISR() []int32 {
	if r.failover {
		return r.committedISR()
	}
	if !r.role.serving() {
		return r.counted(nil)
	}
	in := map[int32]int{}
	n := 0
	for _, t := range r.b.sortedTopics() {
		for _, p := range t.partitions {
			n++
			for _, id := range r.counted(p) {
				in[id]++
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []int32{}
	for _, id := range r.ids {
		if _, fetched := r.seen[id]; in[id] == n && (id == r.self || fetched) {
			out = append(out, id)
		}
	}
	return out
}

// leaderID is the leader's id, -1 while a follower has not found it.
func (r *replica) leaderID() int32 {
	if r.failover {
		st := r.node.Status()
		l := st.State.Leader
		if st.RaftLeader == raftgroup.NoLeader && !r.role.serving() {
			// No Raft leader known (it died, or this replica is cut
			// off): the last claim's replica is likely gone, and
			// "no leader" makes clients retry rather than dial it.
			// (Metadata names it a while longer: namedLeader.)
			return raftgroup.NoLeader
		}
		if l == r.self && !r.role.serving() {
			// Our claim is the latest but we do not serve (rebuilding,
			// or the majority is gone): naming ourselves would send
			// clients back to a replica that refuses them.
			return raftgroup.NoLeader
		}
		return l
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

// namedLeader is the leader Metadata names to clients: leaderID, except
// that for deadLeaderGrace after a failover replica's leaderID finds none
// it goes on naming the last claim's leader (one that died, or this
// replica while it rebuilds its state to serve, whose refusals clients
// retry). While an
// election runs, Kafka's own metadata names the broker that led until a
// new one is chosen, and clients dial it, fail and retry. "No leader"
// instead is not retried by every client: sarama fails the record at
// once, and three such failures open its producer's circuit breaker for
// ten seconds, failing every record meanwhile. Past the grace (a
// majority gone, or this replica cut off) it names no leader.
func (r *replica) namedLeader() int32 {
	id := r.leaderID()
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	if id >= 0 || !r.failover {
		r.leaderLost = time.Time{}
		return id
	}
	now := time.Now()
	if r.leaderLost.IsZero() {
		r.leaderLost = now
	}
	if l := r.node.Status().State.Leader; l >= 0 && now.Sub(r.leaderLost) < deadLeaderGrace {
		return l
	}
	return id
}

// deadLeaderGrace is how long namedLeader names a leader Raft no longer
// knows: a few election timeouts.
const deadLeaderGrace = 2 * time.Second

// endpoint returns the client host:port of replica id.
func (r *replica) endpoint(id int32) (string, int32, bool) {
	if id == r.self {
		h, p := r.b.Advertised()
		return h, p, true
	}
	for _, peer := range r.cfg.Peers {
		if int32(peer.Id) == id {
			h, ps, _ := net.SplitHostPort(peer.ClientAddress)
			p, _ := strconv.Atoi(ps)
			return h, int32(p), true
		}
	}
	return "", 0, false
}

// start listens on the replication port and, on a follower, starts
// finding the leader and copying its logs.
func (r *replica) start(ctx context.Context) (err error) {
	// Validate refuses this already; a configuration built without Parse
	// (the tests', an embedder's) must not open the port to everyone
	// either.
	if err := r.cfg.CheckListenerAuth(); err != nil {
		return err
	}
	// Before anything runs: a wrong file stops the start naming its key.
	if r.tls, err = auth.LoadPeerTLS((*auth.TLSFiles)(r.cfg.TLS), "Replication.TLS"); err != nil {
		return err
	}
	// The histories as storage recovered them: a crash may have left the
	// file behind its partitions' own.
	if err := r.epochs.write(); err != nil {
		return fmt.Errorf("write %s: %w", EpochsFile, err)
	}
	ectx, epochsCancel := context.WithCancel(context.Background())
	r.epochsCancel, r.epochsDone = epochsCancel, make(chan struct{})
	go r.epochs.run(ectx, r.epochsDone)
	defer func() {
		if err != nil {
			epochsCancel()
			<-r.epochsDone
			r.epochsCancel = nil
		}
	}()
	addr := net.JoinHostPort(r.cfg.ReplicateHost, strconv.Itoa(r.cfg.ReplicatePort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for replication on %s: %w (change Replication.ReplicatePort)", addr, err)
	}
	if r.tls != nil {
		// The Token is still checked on every request, over TLS.
		ln = tls.NewListener(ln, r.tls.Server)
	}
	r.ln = ln
	log := r.b.log.With("component", "replication")
	mux := http.NewServeMux()
	mux.Handle("/replication/", shipping.Handler(source{r}, r.cfg.Token, shipping.WithLogger(log)))
	mux.HandleFunc(PathStatus, r.serveStatus)
	mux.HandleFunc(PathForward, r.serveForward)
	// net/http reports failed handshakes (a peer with another CA, a
	// plain HTTP client) through ErrorLog; they go to the broker's log,
	// at most one a minute per address, as a misconfigured peer retries
	// many times a second.
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: serverErrorLog(log)}
	if r.failover {
		if err := r.startFailover(ctx, mux, log); err != nil {
			_ = ln.Close()
			return err
		}
		return nil
	}
	if r.role.serving() {
		go func() { _ = r.srv.Serve(ln) }()
		close(r.done)
		log.Info("static replication: leading", "replicate", ln.Addr().String(), "replicas", r.ids, "lag_max", r.cfg.LagMax)
		return nil
	}
	r.fol = shipping.NewFollower(shipping.FollowerConfig{ReplicaID: r.self, Token: r.cfg.Token, TLS: r.tls.ClientConfig(), Logger: log, Pause: r.fetchPause, Fatal: r.b.fatal}, sink{r})
	if err := r.fol.Start(ctx); err != nil {
		_ = ln.Close()
		return err
	}
	go func() { _ = r.srv.Serve(ln) }()
	go func() { defer close(r.done); r.findLeader(ctx) }()
	log.Info("static replication: following", "replicate", ln.Addr().String(), "peers", len(r.cfg.Peers))
	return nil
}

// stop ends replication: the metadata node of cluster mode (whose last
// act is to end this broker's lease, so it goes first), the HTTP server
// and the follower.
func (r *replica) stop() {
	if r.b.cl != nil {
		r.b.cl.stop()
	}
	if r.srv != nil {
		// Let in-flight fetches (long-polls end within their wait) finish
		// before the logs close.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if r.srv.Shutdown(ctx) != nil {
			_ = r.srv.Close()
		}
		cancel()
	}
	if r.fol != nil {
		r.fol.Stop()
	}
	r.stopFailover()
	if r.ln != nil {
		<-r.done
	}
	if r.epochsCancel != nil {
		// Nothing truncates or appends under a new epoch any more: the
		// final write is the histories the logs close with.
		r.epochsCancel()
		<-r.epochsDone
	}
}

// status is the body of GET /replication/status.
func (r *replica) status() status.Replication {
	d := status.Replication{Role: "follower", ReplicaID: r.self, Leader: r.leaderID(), Epoch: staticEpoch, ISR: r.groupISR()}
	if cl := r.b.cl; cl != nil && cl.node != nil {
		st := cl.node.Status()
		m := st.MetadataLog
		d.Metadata = &m
	}
	if r.failover {
		st := r.node.Status()
		d.Raft, d.Epoch = raftStatus(st), st.Epoch
		if !r.role.serving() {
			d.Follower = followerStatus(r.fol.Status())
			return d
		}
	} else if !r.role.serving() {
		d.Follower = followerStatus(r.fol.Status())
		return d
	}
	d.Role = "leader"
	d.Followers = map[string]status.FollowerPosition{}
	var parts []*partition.Partition
	for _, t := range r.b.sortedTopics() {
		parts = append(parts, t.partitions...)
	}
	r.mu.Lock()
	for _, id := range r.ids {
		if id == r.self {
			continue
		}
		fp := status.FollowerPosition{LastFetch: r.seen[id], Partitions: map[string]int64{}}
		for p, pos := range r.pos {
			if off, ok := pos[id]; ok && !p.Deleted() {
				fp.Partitions[fmt.Sprintf("%s-%d", p.Topic, p.Index)] = off
			}
		}
		var lag int64
		for _, p := range parts {
			start, end := p.Log().StartOffset(), p.Log().EndOffset()
			pos, ok := r.pos[p][id]
			if !ok || pos < start {
				pos = start
			}
			lag += max(0, end-pos)
		}
		fp.Lag = &lag
		d.Followers[strconv.Itoa(int(id))] = fp
	}
	r.mu.Unlock()
	return d
}

// followerStatus is the status document's copy of a follower's
// log-shipping state.
func followerStatus(s shipping.Status) *status.Follower {
	return &status.Follower{
		State: s.State, LeaderID: s.LeaderID, Leader: s.Leader, Epoch: s.Epoch,
		LastError: s.LastError, Unauthorized: s.Unauthorized, Fenced: s.Fenced,
		Fetches: s.Fetches, CorruptBatches: s.CorruptBatches, Unsyncable: s.Unsyncable, Resets: s.Resets,
		Paused: s.Paused,
	}
}

// raftStatus is the status document's copy of a failover replica's Raft
// view (all of it but the applied group state, which is not on the wire).
func raftStatus(s raftgroup.Status) *status.Raft {
	return &status.Raft{
		ReplicaID: s.ReplicaID, Role: s.Role, Leader: s.Leader, RaftLeader: s.RaftLeader, Epoch: s.Epoch,
		ISR: s.ISR, HasISR: s.HasISR, Serving: s.Serving, HandingOff: s.HandingOff, Heard: s.Heard,
		RaftTerm: s.RaftTerm, CommitIndex: s.CommitIndex, Applied: s.Applied,
		Unclean: s.Unclean, LogDamaged: s.LogDamaged, Err: s.Err,
	}
}

func (r *replica) serveStatus(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(w, req) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.status())
}

// findLeader asks every peer's status endpoint which one leads, follows it,
// and keeps polling the leader's status for its ISR.
func (r *replica) findLeader(ctx context.Context) {
	client := &http.Client{Timeout: 2 * time.Second}
	if tc := r.tls.ClientConfig(); tc != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc.Clone()
		client.Transport = tr
	}
	defer client.CloseIdleConnections()
	scheme := r.tls.Scheme() + "://"
	// A peer's TLS failure is logged when it starts or changes: it is a
	// misconfiguration (other failures are a peer that is down).
	tlsLogged := map[int]string{}
	get := func(addr string) (status.Replication, error) {
		var d status.Replication
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+addr+PathStatus, nil)
		if err != nil {
			return d, err
		}
		if r.cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return d, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return d, errors.New(resp.Status)
		}
		return d, json.NewDecoder(resp.Body).Decode(&d)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, p := range r.cfg.Peers {
			d, err := get(p.Address)
			if why, bad := raftgroup.TLSFailure(err); bad && why != tlsLogged[p.Id] && ctx.Err() == nil {
				r.b.log.Warn("static replication: TLS with a peer failed; every replica needs Replication.TLS with the same CA (ClientCAFile) and a certificate it signed",
					"peer", p.Id, "address", p.Address, "err", why)
				tlsLogged[p.Id] = why
			} else if err == nil {
				delete(tlsLogged, p.Id)
			}
			if err != nil || d.Role != "leader" || d.ReplicaID != int32(p.Id) {
				continue
			}
			r.mu.Lock()
			changed := r.leader != d.ReplicaID
			r.leader, r.isr = d.ReplicaID, d.ISR
			r.mu.Unlock()
			if changed {
				r.b.log.Info("static replication: following leader", "leader", d.ReplicaID, "address", p.Address)
				r.fol.SetLeader(d.ReplicaID, p.Address, staticEpoch)
			}
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// partitionOf resolves a shipping topic partition.
func (b *Broker) replPartition(tp replication.TopicPartition) *partition.Partition {
	t := b.lookup(tp.Topic)
	if t == nil || tp.Partition < 0 || int(tp.Partition) >= len(t.partitions) {
		return nil
	}
	return t.partitions[tp.Partition]
}

func topicInfos(ts []*topic) []shipping.TopicInfo {
	out := make([]shipping.TopicInfo, 0, len(ts))
	for _, t := range ts {
		cfgs := make(map[string]string, len(t.overrides))
		for k, v := range t.overrides {
			cfgs[k] = v
		}
		out = append(out, shipping.TopicInfo{Name: t.name, ID: formatUUID(t.id), Partitions: int32(len(t.partitions)),
			Configs: cfgs, MetaIndex: t.metaIndex})
	}
	return out
}

// source is the leader's side of log shipping.
type source struct{ r *replica }

func (s source) LeaderEpoch() (int32, bool) {
	if s.r.failover {
		s.r.mu.Lock()
		defer s.r.mu.Unlock()
		return s.r.b.epoch.Load(), s.r.ldr != nil
	}
	return staticEpoch, s.r.role.serving()
}

func (s source) Manifest() (string, []shipping.TopicInfo) {
	ts := s.r.b.sortedTopics()
	return digestOf(ts), topicInfos(ts)
}

// Digest hashes the topic list: names, ids, partition counts and configs.
// It is computed afresh (the list is small) so no change can be missed.
func (s source) Digest() string { return digestOf(s.r.b.sortedTopics()) }

func digestOf(ts []*topic) string {
	data, _ := json.Marshal(topicInfos(ts)) // map keys are sorted
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

func (s source) Partition(tp replication.TopicPartition) (shipping.PartitionLog, bool) {
	p := s.r.b.replPartition(tp)
	if p == nil {
		return nil, false
	}
	return p.Log(), true
}

func (s source) HighWatermark(tp replication.TopicPartition) int64 {
	if p := s.r.b.replPartition(tp); p != nil {
		return p.HighWatermark()
	}
	return 0
}

func (s source) OnFollowerFetch(replica int32, reports []shipping.FetchPosition) {
	r := s.r
	type report struct {
		p      *partition.Partition
		minISR int
		end    int64
	}
	rs := make([]report, 0, len(reports))
	for _, fp := range reports {
		if p := r.b.replPartition(replication.TopicPartition{Topic: fp.Topic, Partition: fp.Partition}); p != nil {
			rs = append(rs, report{p, r.b.minISROf(p), fp.Offset})
		}
	}
	now := time.Now()
	moved := make([]*partition.Partition, 0, len(rs))
	r.mu.Lock()
	if r.ldr == nil {
		r.mu.Unlock()
		return
	}
	r.seen[replica] = now
	for _, rp := range rs {
		p := rp.p
		k := replKey(p)
		// Before anything here can move it (SetMinISR included).
		hw := r.ldr.HighWatermark(k)
		r.ldr.SetMinISR(k, rp.minISR)
		if r.pos[p] == nil {
			r.pos[p] = map[int32]int64{}
		}
		// A follower's fetches are sequential: its latest report is its
		// position (lower than before only if it lost its data).
		prev, known := r.pos[p][replica]
		r.pos[p][replica] = rp.end
		// The Leader caps a follower's position at the leader's log end
		// as it last heard it, which the flusher reports only after the
		// leader's own fsync: a follower that copied and synced a record
		// first would be counted one fetch short, and its next fetch
		// long-polls (500 ms) with nothing new. Report the current ends
		// first.
		r.ldr.AppendLocal(k, p.Log().EndOffset(), p.Log().DurableEnd())
		r.ldr.FollowerFetch(replica, k, rp.end, now)
		// Neither this follower's position nor the high watermark
		// moved: no waiter's condition changed. A follower's fetch
		// names every partition it follows and mostly reports
		// positions it reported before, and waking each one's waiters
		// cost more than the rest of the report. (An ISR change raises
		// and wakes every partition itself: isrChanged.)
		if !known || prev != rp.end || r.ldr.HighWatermark(k) != hw {
			moved = append(moved, p)
		}
	}
	r.mu.Unlock()
	for _, p := range moved {
		p.Recommit()
		// acks=all waits for follower positions, not only the high
		// watermark.
		p.Wake()
	}
}

func (s source) WaitForData(ctx context.Context, parts []shipping.FetchPosition, wait time.Duration) {
	if wait <= 0 {
		return // WaitUntil reads 0 as no timeout
	}
	ps := make([]*partition.Partition, len(parts)) // nil: unknown here
	watched := make([]*partition.Partition, 0, len(parts))
	for i, fp := range parts {
		if p := s.r.b.replPartition(replication.TopicPartition{Topic: fp.Topic, Partition: fp.Partition}); p != nil {
			ps[i] = p
			watched = append(watched, p)
		}
	}
	partition.WaitUntil(ctx, watched, wait, func() bool {
		for i, p := range ps {
			if p != nil && !p.Deleted() && p.Log().EndOffset() > parts[i].Offset {
				return true
			}
		}
		return false
	})
}

// sink is the follower's side of log shipping. The Follower calls it from
// one goroutine.
type sink struct{ r *replica }

func (s sink) Topics() []shipping.TopicInfo { return topicInfos(s.r.b.sortedTopics()) }

func (s sink) CreateTopic(ti shipping.TopicInfo) error {
	id, err := parseUUID(ti.ID)
	if err != nil {
		return err
	}
	if err := validTopicName(ti.Name); err != nil {
		return err
	}
	b := s.r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := s.r.mayFollow(); err != nil {
		return err
	}
	if t := b.topics[ti.Name]; t != nil {
		if t.id == id {
			return nil
		}
		if err := b.deleteTopicLocked(t); err != nil {
			return err
		}
	}
	t, err := b.createTopicWithIDLocked(ti.Name, id, int(ti.Partitions), ti.Configs)
	if err != nil || ti.MetaIndex == 0 {
		return err
	}
	return b.setMetaIndexLocked(t, ti.MetaIndex)
}

func (s sink) SetMetaIndex(name string, index uint64) error {
	return s.withTopic(name, func(b *Broker, t *topic) error {
		if t.metaIndex == index {
			return nil
		}
		return b.setMetaIndexLocked(t, index)
	})
}

// withTopic runs f on the local topic name under the broker's lock, while
// this replica still follows.
func (s sink) withTopic(name string, f func(b *Broker, t *topic) error) error {
	b := s.r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := s.r.mayFollow(); err != nil {
		return err
	}
	t := b.topics[name]
	if t == nil {
		return fmt.Errorf("no topic %s", name)
	}
	return f(b, t)
}

func (s sink) DeleteTopic(name string) error {
	b := s.r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := s.r.mayFollow(); err != nil {
		return err
	}
	t := b.topics[name]
	if t == nil {
		return nil
	}
	return b.deleteTopicLocked(t)
}

func (s sink) CreatePartitions(name string, count int32) error {
	return s.withTopic(name, func(b *Broker, t *topic) error {
		if int(count) <= len(t.partitions) {
			return nil
		}
		return b.addPartitionsLocked(t, int(count))
	})
}

func (s sink) SetConfigs(name string, configs map[string]string) error {
	if err := s.r.mayFollow(); err != nil {
		return err
	}
	code, msg := s.r.b.alterTopicConfigs(name, func(m map[string]string) error {
		clear(m)
		for k, v := range configs {
			m[k] = v
		}
		return nil
	}, false)
	if code != 0 {
		return fmt.Errorf("set configs of %s: error %d: %s", name, code, msg)
	}
	return nil
}

func (s sink) Partition(tp replication.TopicPartition) (shipping.ReplicaLog, bool) {
	p := s.r.b.replPartition(tp)
	if p == nil {
		return nil, false
	}
	return replicaLog{Log: p.Log(), p: p, stats: s.r.b.stats}, true
}

// EpochCeiling: outside cluster mode a batch carries at most the group's
// epoch. In cluster mode a partition the group owns carries at most the
// group's epoch plus its base. One it does not own is being copied in,
// with the source group's epochs, or is a copy handed over, still shipped
// to a lagging follower: neither is bounded by this group's epochs.
func (s sink) EpochCeiling(tp replication.TopicPartition, epoch int32) int32 {
	c := s.r.b.cl
	if c == nil {
		return epoch
	}
	mp, ok := c.current().partition(tp.Topic, tp.Partition)
	if !ok {
		return epoch
	}
	if mp.Owner != c.group {
		return math.MaxInt32
	}
	return epoch + mp.EpochBase
}

func (s sink) LeaderPosition(tp replication.TopicPartition, highWatermark, logStart int64) {
	p := s.r.b.replPartition(tp)
	if p == nil {
		return
	}
	if s.r.mayFollow() != nil {
		return
	}
	if s.r.unclean.Load() {
		s.r.noteCatchUp(p, highWatermark)
	}
	p.Follow(highWatermark)
	if logStart > p.Log().StartOffset() && logStart <= p.Log().EndOffset() {
		if _, err := p.Log().DeleteRecords(logStart); err != nil {
			s.r.b.log.Warn("following the leader's log start failed", "topic", p.Topic, "partition", p.Index, "err", err)
		}
	}
}

// replicaLog is a follower's partition log: appends and truncations go
// through the partition, which keeps the producer and transaction state in
// step (a truncation rebuilds it) and checks that this replica follows.
type replicaLog struct {
	*storage.Log
	p     *partition.Partition
	stats *Stats // a follower's syncs are timed as the leader's passes are
}

func (l replicaLog) Sync() (int64, error) {
	start := time.Now()
	durable, err := l.Log.Sync()
	l.stats.observeFsync(time.Since(start))
	return durable, err
}

func (l replicaLog) AppendReplica(batch []byte) error { return l.p.AppendReplica(batch) }

func (l replicaLog) Truncate(offset int64) error { return l.p.Truncate(offset) }

func (l replicaLog) TruncateFullyAndStartAt(offset int64) error {
	return l.p.TruncateFullyAndStartAt(offset)
}

// SyncLogs makes the logs one fetch answer appended to durable with one
// sync of the data directory's volume, as the flusher does for the
// leader's own appends from two dirty partitions up; without a volume
// each log syncs on its own.
func (s sink) SyncLogs(logs []shipping.ReplicaLog) []error {
	errs := make([]error, len(logs))
	vol := s.r.b.volume
	var on []*storage.Log
	var at []int
	for i, l := range logs {
		rl, ok := l.(replicaLog)
		if vol == nil || !ok {
			_, errs[i] = l.Sync()
			continue
		}
		on = append(on, rl.Log)
		at = append(at, i)
	}
	if len(on) > 0 {
		start := time.Now()
		res := vol.Sync(on)
		s.r.b.stats.observeFsync(time.Since(start))
		for j, r := range res {
			errs[at[j]] = r.Err
		}
	}
	return errs
}

// StartEpochs persists the epoch starts one fetch answer begins, all at
// once (Broker.persistEpochStarts).
func (s sink) StartEpochs(starts []shipping.EpochStart) []error {
	errs := make([]error, len(starts))
	var on []storage.EpochStart
	var at []int
	for i, st := range starts {
		rl, ok := st.Log.(replicaLog)
		if !ok {
			errs[i] = st.Log.StartEpoch(st.Epoch, st.At)
			continue
		}
		on = append(on, storage.EpochStart{Log: rl.Log, Epoch: st.Epoch, At: st.At})
		at = append(at, i)
	}
	for j, err := range s.r.b.persistEpochStarts(on) {
		errs[at[j]] = err
	}
	return errs
}

// ReadLog returns every stored byte of a partition, from its log start to
// its log end, and the log end; tests compare replicas with it.
func (b *Broker) ReadLog(topic string, partition int32) ([]byte, int64, error) {
	p := b.replPartition(replication.TopicPartition{Topic: topic, Partition: partition})
	if p == nil {
		return nil, 0, fmt.Errorf("no partition %s/%d", topic, partition)
	}
	end := p.Log().EndOffset()
	var out []byte
	for off := p.Log().StartOffset(); off < end; {
		data, err := p.Log().Read(off, 4<<20, end)
		if err != nil {
			return nil, 0, err
		}
		if len(data) == 0 {
			break
		}
		out = append(out, data...)
		off = lastOffsetIn(data) + 1
	}
	return out, end, nil
}
