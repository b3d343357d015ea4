package metanode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/vfs"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The tests run real nodes on loopback HTTP with their files in
// t.TempDir(). Every wait polls against a generous deadline: the machine
// may be loaded, and nothing here asserts how fast anything happens.

const waitLong = 30 * time.Second

// testClock is the broker time every node of a test cluster reads; a
// test moves it forward to run leases out.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func (c *testClock) ms() int64               { return c.now().UnixMilli() }

// host is one broker's replication port: the listener outlives the node
// behind it, so that a restarted node keeps its address, and a stopped
// one answers 503 as a port whose broker is gone refuses.
type host struct {
	id      int32
	addr    string
	dir     string
	handler atomic.Pointer[http.Handler]
	node    *Node
	cancel  context.CancelFunc
}

type cluster struct {
	t      *testing.T
	clock  *testClock
	voters map[int32]string
	hosts  map[int32]*host
	tweak  func(*Config)
}

func testLogger() *slog.Logger {
	if os.Getenv("METANODE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newCluster starts voters and observers with the test defaults, changed
// by tweak.
func newCluster(t *testing.T, voters, observers []int32, tweak func(*Config)) *cluster {
	c := &cluster{t: t, clock: &testClock{}, voters: map[int32]string{}, hosts: map[int32]*host{}, tweak: tweak}
	for _, id := range append(slices.Clone(voters), observers...) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h := &host{id: id, addr: ln.Addr().String(), dir: t.TempDir()}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := h.handler.Load(); p != nil {
				(*p).ServeHTTP(w, r)
				return
			}
			http.Error(w, "broker down", http.StatusServiceUnavailable)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		c.hosts[id] = h
		if slices.Contains(voters, id) {
			c.voters[id] = h.addr
		}
	}
	// Stop every node before the servers close (cleanups run last first).
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, h := range c.hosts {
			if h.node != nil {
				wg.Go(h.node.Stop)
			}
		}
		wg.Wait()
	})
	for _, id := range append(slices.Clone(voters), observers...) {
		c.start(id)
	}
	return c
}

func (c *cluster) config(id int32) Config {
	h := c.hosts[id]
	cfg := Config{
		ID:                 id,
		GroupID:            fmt.Sprintf("g%d", (id+1)/2),
		Voters:             c.voters,
		ClientAddress:      fmt.Sprintf("client-%d:9092", id),
		ReplicationAddress: h.addr,
		DataDir:            h.dir,
		Token:              "secret",
		Now:                c.clock.now,
		LeaseInterval:      300 * time.Millisecond,
		LeaseDuration:      10 * time.Second,
		ShutdownTimeout:    10 * time.Second,
		PullWait:           300 * time.Millisecond,
		SaveInterval:       50 * time.Millisecond,
		Logger:             testLogger().With("test", c.t.Name()),
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	return cfg
}

// load builds a stopped node for id from its directory.
func (c *cluster) load(id int32) *Node {
	c.t.Helper()
	n, err := New(c.config(id))
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	return n
}

// start builds node id from its directory and runs it.
func (c *cluster) start(id int32) *Node {
	c.t.Helper()
	return c.run(id, c.load(id))
}

// run serves and starts n as broker id.
func (c *cluster) run(id int32, n *Node) *Node {
	c.t.Helper()
	h := c.hosts[id]
	ctx, cancel := context.WithCancel(context.Background())
	if err := n.Start(ctx); err != nil {
		c.t.Fatal(err)
	}
	hd := n.Handler()
	h.handler.Store(&hd)
	h.node, h.cancel = n, cancel
	return n
}

// stop stops node id cleanly.
func (c *cluster) stop(id int32) {
	h := c.hosts[id]
	h.node.Stop()
	h.handler.Store(nil)
	h.cancel()
	h.node = nil
}

// kill stops node id without the clean shutdown's lease proposal.
func (c *cluster) kill(id int32) {
	h := c.hosts[id]
	h.cancel()
	h.node.Stop()
	h.handler.Store(nil)
	h.node = nil
}

func (c *cluster) node(id int32) *Node { return c.hosts[id].node }

// running returns the ids of the running nodes.
func (c *cluster) running() []int32 {
	var ids []int32
	for id, h := range c.hosts {
		if h.node != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// eventually polls cond until it holds or waitLong passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader waits until the running voters agree on one leader among them.
func (c *cluster) leader() int32 {
	c.t.Helper()
	var l int32
	eventually(c.t, "a leader", func() bool {
		l = NoLeader
		for _, id := range c.running() {
			if _, voter := c.voters[id]; !voter {
				continue
			}
			st := c.node(id).Status()
			if st.Role == "leader" {
				l = id
			}
		}
		if l == NoLeader {
			return false
		}
		for _, id := range c.running() {
			if _, voter := c.voters[id]; voter && c.node(id).Status().Leader != l {
				return false
			}
		}
		return true
	})
	return l
}

// follower returns a running voter that is not l.
func (c *cluster) follower(l int32) int32 {
	for _, id := range c.running() {
		if _, voter := c.voters[id]; voter && id != l {
			return id
		}
	}
	c.t.Fatal("no follower")
	return 0
}

// registered waits until every running node's copy lists ids as live.
func (c *cluster) registered(ids ...int32) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("brokers %v registered everywhere", ids), func() bool {
		for _, id := range c.running() {
			if !slices.Equal(liveIDs(c.node(id), c.clock.ms()), ids) {
				return false
			}
		}
		return true
	})
}

func liveIDs(n *Node, nowMs int64) []int32 {
	var ids []int32
	n.Read(func(s *meta.State, _ uint64) {
		for _, b := range s.LiveBrokers(nowMs) {
			ids = append(ids, b.ID)
		}
	})
	return ids
}

// converged waits until every running node has applied what node from
// has, and checks that their states are then byte-equal.
func (c *cluster) converged(from int32) {
	c.t.Helper()
	want, idx := c.node(from).Snapshot()
	wantJSON, _ := json.Marshal(want)
	for _, id := range c.running() {
		n := c.node(id)
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		err := n.WaitApplied(ctx, idx)
		cancel()
		if err != nil {
			c.t.Fatalf("node %d did not apply %d: at %d", id, idx, n.Applied())
		}
	}
	// A renewal may have applied since: compare at one index by waiting
	// until every node stands at the same one.
	eventually(c.t, "equal states", func() bool {
		var first []byte
		var at uint64
		for i, id := range c.running() {
			s, a := c.node(id).Snapshot()
			b, _ := json.Marshal(s)
			if i == 0 {
				first, at = b, a
				continue
			}
			if a != at || string(b) != string(first) {
				return false
			}
		}
		return at >= idx && (at != idx || string(first) == string(wantJSON))
	})
}

func hasTopic(n *Node, name string) bool {
	var ok bool
	n.Read(func(s *meta.State, _ uint64) { _, ok = s.Topic(name) })
	return ok
}

func createTopic(name string, partitions int32) Command {
	return Command{CreateTopic: &CreateTopic{Name: name, Partitions: partitions}}
}

func propose(t *testing.T, n *Node, cmd Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("propose on %d: %v", n.cfg.ID, err)
	}
	return res
}

// quiet keeps leases from renewing during a test that compares states: a
// renewal is an entry, and states are compared at one index.
func quiet(cfg *Config) {
	cfg.LeaseInterval = time.Hour
	cfg.LeaseDuration = 2 * time.Hour
}

func TestConvergeForwardAndRefuse(t *testing.T) {
	c := newCluster(t, []int32{1, 2, 3}, []int32{4, 5}, quiet)
	l := c.leader()
	c.registered(1, 2, 3, 4, 5)

	// On a follower voter, forwarded; the follower's copy has it on return.
	f := c.follower(l)
	res := propose(t, c.node(f), createTopic("orders", 6))
	if !hasTopic(c.node(f), "orders") || c.node(f).Applied() < res.Index {
		t.Fatalf("follower %d applied %d without the topic it created at %d", f, c.node(f).Applied(), res.Index)
	}
	if tr, ok := res.Records[0].(meta.TopicRecord); !ok || tr.Name != "orders" || len(res.Records) != 7 {
		t.Fatalf("records %+v", res.Records)
	}
	// On an observer, forwarded too.
	propose(t, c.node(4), createTopic("payments", 2))
	if !hasTopic(c.node(4), "payments") {
		t.Fatal("observer 4 does not see the topic it created")
	}
	c.converged(l)
	var parts []meta.Partition
	c.node(5).Read(func(s *meta.State, _ uint64) {
		tp, _ := s.Topic("orders")
		parts = tp.Partitions
	})
	if len(parts) != 6 {
		t.Fatalf("observer 5 sees %d partitions of orders", len(parts))
	}

	// Refused by the leader's check, from an observer and from the
	// leader: the Kafka code comes back and nothing is appended.
	before := c.node(l).Applied()
	for _, id := range []int32{5, l} {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		_, err := c.node(id).Propose(ctx, createTopic("orders", 1))
		cancel()
		var me *meta.Error
		if !errors.As(err, &me) || !errors.Is(err, kerr.TopicAlreadyExists) || ErrorCode(err) != kerr.TopicAlreadyExists.Code {
			t.Fatalf("second create on %d: %v", id, err)
		}
	}
	if got := c.node(l).Applied(); got != before {
		t.Fatalf("a refused command moved the log from %d to %d", before, got)
	}

	// Refused by Apply: producer-id blocks asked for at once are checked
	// against one state, so all but the first to commit may be refused
	// when they apply. Every node skips the same ones, and each proposer
	// hears its own outcome.
	var wg sync.WaitGroup
	var granted, refused atomic.Int64
	for _, id := range []int32{1, 2, 3, 4, 5, l, l, l} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			_, err := c.node(id).Propose(ctx, Command{AllocateProducerIDs: &AllocateProducerIDs{BrokerID: id}})
			switch {
			case err == nil:
				granted.Add(1)
			case ErrorCode(err) == kerr.InvalidRequest.Code:
				refused.Add(1)
			default:
				t.Errorf("producer ids on %d: %v", id, err)
			}
		})
	}
	wg.Wait()
	t.Logf("producer-id blocks: %d granted, %d refused", granted.Load(), refused.Load())
	c.converged(l)
	c.node(3).Read(func(s *meta.State, _ uint64) {
		if s.NextProducerID() != granted.Load()*meta.ProducerIdBlockSize {
			t.Fatalf("next producer id %d after %d blocks granted", s.NextProducerID(), granted.Load())
		}
	})
}

func TestFailoverNoQuorumAndRestart(t *testing.T) {
	c := newCluster(t, []int32{1, 2, 3}, []int32{4, 5}, quiet)
	l := c.leader()
	c.registered(1, 2, 3, 4, 5)
	propose(t, c.node(4), createTopic("before", 3))

	c.stop(l)
	l2 := c.leader()
	if l2 == l {
		t.Fatalf("leader %d again", l)
	}
	propose(t, c.node(5), createTopic("after", 1))

	// No quorum: proposals fail retriably, reads go on.
	f := c.follower(l2)
	c.stop(f)
	last := l2
	eventually(t, "the last voter to see it has no leader", func() bool { return c.node(last).Status().Leader == NoLeader })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := c.node(4).Propose(ctx, createTopic("nope", 1))
	cancel()
	if !errors.Is(err, ErrNoLeader) || ErrorCode(err) != kerr.NotController.Code {
		t.Fatalf("propose without quorum: %v", err)
	}
	for _, id := range []int32{last, 4, 5} {
		if !hasTopic(c.node(id), "before") || !hasTopic(c.node(id), "after") || hasTopic(c.node(id), "nope") {
			t.Fatalf("node %d's copy changed without a leader", id)
		}
	}

	// The stopped voters, and an observer, recover their copies from
	// disk before they reach anyone.
	for _, id := range []int32{l, f, 5} {
		if id == 5 {
			c.stop(5)
		}
		n := c.load(id)
		if !hasTopic(n, "before") || (id != l && !hasTopic(n, "after")) {
			t.Fatalf("node %d restarted without its topics (applied %d)", id, n.Applied())
		}
		c.run(id, n)
	}
	l3 := c.leader()
	propose(t, c.node(5), createTopic("again", 1))
	c.converged(l3)
	for _, id := range c.running() {
		if !hasTopic(c.node(id), "again") || !hasTopic(c.node(id), "after") {
			t.Fatalf("node %d missed a topic", id)
		}
	}
}

func TestCatchUpFromSnapshot(t *testing.T) {
	c := newCluster(t, []int32{1, 2, 3}, []int32{4}, func(cfg *Config) {
		quiet(cfg)
		cfg.CompactEvery = 8
	})
	l := c.leader()
	c.registered(1, 2, 3, 4)
	lag := c.follower(l)
	c.stop(lag)
	lagApplied := c.load(lag).Applied()
	for i := range 30 {
		propose(t, c.node(l), Command{SetConfig: &SetConfig{ResourceType: meta.ResourceBroker, ResourceName: "", Key: fmt.Sprintf("k%d", i), Value: "v"}})
	}
	if si := c.node(l).Status().SnapshotIndex; si <= lagApplied+1 {
		t.Fatalf("leader's snapshot at %d, lagging voter at %d: no compaction past it", si, lagApplied)
	}
	c.start(lag)
	// A broker that was never there joins as an observer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	c.hosts[6] = &host{id: 6, addr: ln.Addr().String(), dir: t.TempDir()}
	c.start(6)
	c.converged(l)
	for _, id := range []int32{lag, 6} {
		st := c.node(id).Status()
		if st.SnapshotsInstalled == 0 {
			t.Fatalf("node %d caught up without a snapshot: %+v", id, st)
		}
		var v string
		c.node(id).Read(func(s *meta.State, _ uint64) { v = s.Configs(meta.ResourceBroker, "")["k29"] })
		if v != "v" {
			t.Fatalf("node %d lacks the last config", id)
		}
	}
	// The lagging voter restarts from the snapshot it was sent.
	c.stop(lag)
	if n := c.load(lag); n.Status().Applied <= lagApplied || n.raft.snapIndex <= lagApplied {
		t.Fatalf("voter %d restarted at %d, snapshot %d", lag, n.Applied(), n.raft.snapIndex)
	}
}

func TestLeases(t *testing.T) {
	c := newCluster(t, []int32{1, 2, 3}, []int32{4, 5}, nil)
	l := c.leader()
	c.registered(1, 2, 3, 4, 5)

	expiry := func(id int32) (e int64, inc meta.UUID) {
		c.node(l).Read(func(s *meta.State, _ uint64) {
			b, _ := s.Broker(id)
			e, inc = b.LeaseExpiryMs, b.Incarnation
		})
		return e, inc
	}
	e1, inc := expiry(4)
	if inc != c.node(4).Incarnation() {
		t.Fatal("broker 4 registered another incarnation")
	}
	eventually(t, "a renewal of broker 4's lease", func() bool { e, _ := expiry(4); return e > e1 })

	// A clean stop ends the lease at once. Broker 5 must know it holds
	// one first: the state can show it registered before its own
	// registration call has returned, and a stop in between has no lease
	// to shorten (it would run out instead). The clock stands still, so
	// only the stop can end it; waiting covers a leader that changed.
	eventually(t, "broker 5 knowing its lease", func() bool { return c.node(5).Status().LeaseExpiryMs != 0 })
	c.stop(5)
	eventually(t, "broker 5's lease ended by its clean stop", func() bool {
		return !slices.Contains(liveIDs(c.node(l), c.clock.ms()), 5)
	})
	// A renewal that broker 5 sent before it stopped and that reaches
	// the log after the end is refused: it would list a stopped broker
	// for a whole lease.
	var b5 meta.Broker
	c.node(l).Read(func(s *meta.State, _ uint64) { b5, _ = s.Broker(5) })
	if b5.LeaseExpiryMs != 0 {
		t.Fatalf("broker 5's ended lease has expiry %d, want 0", b5.LeaseExpiryMs)
	}
	late := Command{RegisterBroker: &RegisterBroker{LeaseMs: 10_000, Record: meta.RegisterBrokerRecord{
		BrokerID: 5, GroupID: b5.Group, IncarnationID: b5.Incarnation,
		ClientAddress: b5.ClientAddress, ReplicationAddress: b5.ReplicationAddress, Machine: b5.Machine,
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.node(l).Propose(ctx, late)
	cancel()
	var me *meta.Error
	if !errors.As(err, &me) || me.Code != kerr.StaleBrokerEpoch {
		t.Fatalf("a renewal after the clean stop: %v, want STALE_BROKER_EPOCH", err)
	}
	if slices.Contains(liveIDs(c.node(l), c.clock.ms()), 5) {
		t.Fatal("a late renewal listed the stopped broker 5 again")
	}

	// A killed broker keeps its lease until it runs out, and a new
	// incarnation of it is refused until then.
	c.kill(4)
	if !slices.Contains(liveIDs(c.node(l), c.clock.ms()), 4) {
		t.Fatal("a killed broker's lease ended before its time")
	}
	n4 := c.start(4)
	time.Sleep(time.Second)
	if _, inc := expiry(4); inc == n4.Incarnation() || n4.Status().LeaseExpiryMs != 0 {
		t.Fatal("a new incarnation registered while the old one's lease ran")
	}
	c.clock.advance(11 * time.Second)
	eventually(t, "the new incarnation of broker 4 registered", func() bool {
		_, inc := expiry(4)
		return inc == n4.Incarnation() && n4.Status().LeaseExpiryMs > c.clock.ms()
	})
	c.registered(1, 2, 3, 4)
}

// TestFullDiskSilencesVoter: a voter that cannot save its Raft state for
// want of space goes quiet instead of stopping: the others elect and
// commit without it, and once space returns it saves, hears from the
// leader again and catches up. (It used to stop its node for good: the
// broker ran on with a voter that never came back and a copy that never
// moved, and its group's state was never published again.)
func TestFullDiskSilencesVoter(t *testing.T) {
	fss := map[int32]*vfs.MemFS{}
	var full atomic.Bool
	var fullID atomic.Int32
	c := newCluster(t, []int32{1, 2, 3}, []int32{4}, func(cfg *Config) {
		quiet(cfg)
		if fss[cfg.ID] == nil {
			fs := vfs.NewMem()
			id := cfg.ID
			fs.SetHook(func(op vfs.Op, name string) error {
				if full.Load() && fullID.Load() == id && op == vfs.OpCreate && strings.Contains(name, FileName) {
					return fmt.Errorf("create %s: %w", name, syscall.ENOSPC)
				}
				return nil
			})
			fss[cfg.ID] = fs
		}
		cfg.FS = fss[cfg.ID]
	})
	l := c.leader()
	c.registered(1, 2, 3, 4)
	propose(t, c.node(4), createTopic("before", 1))

	fullID.Store(l)
	full.Store(true)
	// The first proposal gives the full voter something to save; it can
	// save nothing more, so it sends nothing and may not lead: another
	// voter is elected and commits without it.
	eventually(t, "a commit without the voter whose disk is full", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.node(4).Propose(ctx, createTopic("during", 1))
		if err != nil && ErrorCode(err) != kerr.TopicAlreadyExists.Code {
			return false
		}
		return hasTopic(c.node(4), "during")
	})
	if st := c.node(l).Status(); st.Error != "" || hasTopic(c.node(l), "during") {
		t.Fatalf("voter %d with a full disk: error %q, has the topic committed without it: %v", l, st.Error, hasTopic(c.node(l), "during"))
	}

	full.Store(false)
	eventually(t, "the voter takes part again once it can save", func() bool {
		st := c.node(l).Status()
		return st.Error == "" && st.Leader != NoLeader && hasTopic(c.node(l), "during")
	})
	propose(t, c.node(l), createTopic("after", 1))
	c.converged(c.leader())
}
