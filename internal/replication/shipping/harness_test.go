package shipping

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/vfs"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openLog(t testing.TB, fs vfs.FS, dir string) *storage.Log {
	t.Helper()
	l, err := storage.Open(dir, storage.Options{FS: fs, RetentionMs: -1, RetentionBytes: -1, SegmentBytes: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// batch encodes n records at base in epoch.
func batch(t testing.TB, base int64, epoch int32, n int, tag string) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1000 + int64(i), Key: []byte(tag), Value: []byte(fmt.Sprintf("%s-%d-%d", tag, base, i))}
	}
	b, err := recordbatch.Encode(recordbatch.BatchOptions{BaseOffset: base, LeaderEpoch: epoch, ProducerID: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type leaderTopic struct {
	info TopicInfo
	logs []*storage.Log
}

// testLeader is a Source over real logs on a MemFS.
type testLeader struct {
	t  testing.TB
	fs *vfs.MemFS

	mu      sync.Mutex
	epoch   int32
	leader  bool
	version int
	incarn  int
	topics  map[string]*leaderTopic
	changed chan struct{}

	// onFetch observes each partition OnFollowerFetch reports.
	onFetch func(replica int32, tp replication.TopicPartition, end int64)
	fetches atomic.Int64
}

func newTestLeader(t testing.TB, epoch int32) *testLeader {
	return &testLeader{t: t, fs: vfs.NewMem(), epoch: epoch, leader: true, topics: map[string]*leaderTopic{}, changed: make(chan struct{})}
}

func (l *testLeader) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *testLeader) createTopic(name string, partitions int32, configs map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.incarn++
	id := fmt.Sprintf("%s-id%d", name, l.incarn)
	lt := &leaderTopic{info: TopicInfo{Name: name, ID: id, Partitions: partitions, Configs: configs}}
	for p := range partitions {
		lt.logs = append(lt.logs, openLog(l.t, l.fs, fmt.Sprintf("leader/%s/%d", id, p)))
	}
	l.topics[name] = lt
	l.version++
	l.notifyLocked()
}

func (l *testLeader) deleteTopic(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lg := range l.topics[name].logs {
		_ = lg.Delete()
	}
	delete(l.topics, name)
	l.version++
	l.notifyLocked()
}

func (l *testLeader) growTopic(name string, partitions int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lt := l.topics[name]
	for p := lt.info.Partitions; p < partitions; p++ {
		lt.logs = append(lt.logs, openLog(l.t, l.fs, fmt.Sprintf("leader/%s/%d", lt.info.ID, p)))
	}
	lt.info.Partitions = partitions
	l.version++
	l.notifyLocked()
}

func (l *testLeader) setEpoch(epoch int32, leader bool) {
	l.mu.Lock()
	l.epoch, l.leader = epoch, leader
	l.mu.Unlock()
}

func (l *testLeader) log(topic string, p int32) *storage.Log {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.topics[topic].logs[p]
}

// produce appends n batches of 3 records to topic/p in the leader's epoch.
func (l *testLeader) produce(topic string, p int32, n int) {
	l.t.Helper()
	lg := l.log(topic, p)
	l.mu.Lock()
	epoch := l.epoch
	l.mu.Unlock()
	for range n {
		if _, err := lg.Append(batch(l.t, 0, -1, 3, topic), epoch); err != nil {
			l.t.Fatal(err)
		}
	}
	l.mu.Lock()
	l.notifyLocked()
	l.mu.Unlock()
}

// appendReplica appends a crafted batch keeping its offset and epoch.
func (l *testLeader) appendReplica(topic string, p int32, b []byte) {
	l.t.Helper()
	if err := l.log(topic, p).AppendReplica(b); err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.notifyLocked()
	l.mu.Unlock()
}

func (l *testLeader) LeaderEpoch() (int32, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.leader
}

func (l *testLeader) Digest() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return "v" + strconv.Itoa(l.version)
}

func (l *testLeader) Manifest() (string, []TopicInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ts []TopicInfo
	for _, lt := range l.topics {
		ts = append(ts, lt.info)
	}
	return "v" + strconv.Itoa(l.version), ts
}

func (l *testLeader) Partition(tp replication.TopicPartition) (PartitionLog, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lt, ok := l.topics[tp.Topic]
	if !ok || tp.Partition < 0 || int(tp.Partition) >= len(lt.logs) {
		return nil, false
	}
	return lt.logs[tp.Partition], true
}

func (l *testLeader) HighWatermark(tp replication.TopicPartition) int64 {
	if lg, ok := l.Partition(tp); ok {
		return lg.EndOffset()
	}
	return 0
}

func (l *testLeader) OnFollowerFetch(replica int32, reports []FetchPosition) {
	for _, r := range reports {
		l.fetches.Add(1)
		if l.onFetch != nil {
			l.onFetch(replica, replication.TopicPartition{Topic: r.Topic, Partition: r.Partition}, r.Offset)
		}
	}
}

func (l *testLeader) WaitForData(ctx context.Context, parts []FetchPosition, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		for _, p := range parts {
			lg, ok := l.Partition(replication.TopicPartition{Topic: p.Topic, Partition: p.Partition})
			if ok && lg.EndOffset() > p.Offset {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

type sinkTopic struct {
	info TopicInfo
	logs []*storage.Log
}

// testSink is a Sink over real logs on a MemFS.
type testSink struct {
	t  testing.TB
	fs *vfs.MemFS

	mu      sync.Mutex
	topics  map[string]*sinkTopic
	creates int
	deletes int
	grows   int
	configs int
	hw      map[replication.TopicPartition]int64
}

func newTestSink(t testing.TB) *testSink {
	return &testSink{t: t, fs: vfs.NewMem(), topics: map[string]*sinkTopic{}, hw: map[replication.TopicPartition]int64{}}
}

func (s *testSink) Topics() []TopicInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ts []TopicInfo
	for _, st := range s.topics {
		ts = append(ts, st.info)
	}
	return ts
}

func (s *testSink) CreateTopic(t TopicInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &sinkTopic{info: t}
	for p := range t.Partitions {
		st.logs = append(st.logs, openLog(s.t, s.fs, fmt.Sprintf("follower/%s/%d", t.ID, p)))
	}
	s.topics[t.Name] = st
	s.creates++
	return nil
}

func (s *testSink) DeleteTopic(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, lg := range s.topics[name].logs {
		if err := lg.Delete(); err != nil {
			return err
		}
	}
	delete(s.topics, name)
	s.deletes++
	return nil
}

func (s *testSink) CreatePartitions(name string, count int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.topics[name]
	for p := st.info.Partitions; p < count; p++ {
		st.logs = append(st.logs, openLog(s.t, s.fs, fmt.Sprintf("follower/%s/%d", st.info.ID, p)))
	}
	st.info.Partitions = count
	s.grows++
	return nil
}

func (s *testSink) SetConfigs(name string, configs map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[name].info.Configs = configs
	s.configs++
	return nil
}

func (s *testSink) SetMetaIndex(name string, index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[name].info.MetaIndex = index
	return nil
}

func (s *testSink) Partition(tp replication.TopicPartition) (ReplicaLog, bool) {
	lg := s.log(tp.Topic, tp.Partition)
	return lg, lg != nil
}

func (s *testSink) log(topic string, p int32) *storage.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.topics[topic]
	if !ok || p < 0 || int(p) >= len(st.logs) {
		return nil
	}
	return st.logs[p]
}

func (s *testSink) EpochCeiling(_ replication.TopicPartition, epoch int32) int32 { return epoch }

func (s *testSink) LeaderPosition(tp replication.TopicPartition, hw, _ int64) {
	s.mu.Lock()
	s.hw[tp] = hw
	s.mu.Unlock()
}

// readAll returns every stored batch of l.
func readAll(t testing.TB, l *storage.Log) []byte {
	t.Helper()
	return readFrom(t, l, l.StartOffset())
}

// readFrom returns every stored batch of l from the one holding off.
func readFrom(t testing.TB, l *storage.Log, off int64) []byte {
	t.Helper()
	var out []byte
	for {
		b, err := l.Read(off, 1<<20, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return out
		}
		out = append(out, b...)
		for len(b) > 0 {
			h, err := recordbatch.ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
}

// inSync reports whether the follower holds exactly the leader's topics
// and bytes.
func inSync(t testing.TB, l *testLeader, s *testSink) error {
	_, topics := l.Manifest()
	local := s.Topics()
	if len(local) != len(topics) {
		return fmt.Errorf("%d local topics, leader has %d", len(local), len(topics))
	}
	for _, ti := range topics {
		s.mu.Lock()
		st, ok := s.topics[ti.Name]
		var info TopicInfo
		if ok {
			info = st.info
		}
		s.mu.Unlock()
		if !ok || info.ID != ti.ID || info.Partitions != ti.Partitions {
			return fmt.Errorf("topic %s differs", ti.Name)
		}
		for p := range ti.Partitions {
			ll, fl := l.log(ti.Name, p), s.log(ti.Name, p)
			// A follower restarted at the leader's log start keeps the
			// whole batch holding it, so its start may be lower.
			if ll.StartOffset() < fl.StartOffset() || ll.EndOffset() != fl.EndOffset() {
				return fmt.Errorf("%s-%d: leader [%d,%d), follower [%d,%d)", ti.Name, p, ll.StartOffset(), ll.EndOffset(), fl.StartOffset(), fl.EndOffset())
			}
			if !bytes.Equal(readFrom(t, ll, ll.StartOffset()), readFrom(t, fl, ll.StartOffset())) {
				return fmt.Errorf("%s-%d: bytes differ", ti.Name, p)
			}
		}
	}
	return nil
}

func eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type cluster struct {
	leader   *testLeader
	sink     *testSink
	srv      *httptest.Server
	follower *Follower
	// violations counts reports above the follower's durable end.
	violations atomic.Int64
}

// newCluster starts a leader server (handler wrapped by mw, if any) and a
// follower on it; the follower is started but has no leader yet.
func newCluster(t *testing.T, leader *testLeader, sink *testSink, token, followerToken string, mw func(h *testHandlerWrap), opts ...func(*FollowerConfig)) *cluster {
	t.Helper()
	c := &cluster{leader: leader, sink: sink}
	leader.onFetch = func(_ int32, tp replication.TopicPartition, end int64) {
		if fl := sink.log(tp.Topic, tp.Partition); fl != nil && end > fl.DurableEnd() {
			c.violations.Add(1)
		}
	}
	w := &testHandlerWrap{h: Handler(leader, token, WithLogger(quiet))}
	if mw != nil {
		mw(w)
	}
	c.srv = httptest.NewServer(w)
	t.Cleanup(c.srv.Close)
	fc := FollowerConfig{ReplicaID: 2, Token: followerToken, MaxWait: 200 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxBytes: 2048, Logger: quiet}
	for _, o := range opts {
		o(&fc)
	}
	c.follower = NewFollower(fc, sink)
	if err := c.follower.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.follower.Stop()
		if v := c.violations.Load(); v != 0 {
			t.Errorf("%d fetches reported an offset above the follower's durable end", v)
		}
	})
	return c
}

func (c *cluster) follow(epoch int32) {
	c.follower.SetLeader(1, c.srv.URL, epoch)
}

func (c *cluster) waitInSync(t *testing.T) {
	t.Helper()
	eventually(t, 10*time.Second, "follower in sync", func() error { return inSync(t, c.leader, c.sink) })
}
