package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// divergentTail leaves the serving leader with records no follower has:
// both followers are paused and the leader acknowledges a burst of acks=1
// records alone. It returns that leader (still running, its followers
// paused) and what it acknowledged alone.
func divergentTail(t *testing.T, c *testcluster.Cluster, topic string, prefix string, n int) (*testcluster.Replica, []ack) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		old := c.WaitISR(isrWithin, 1, 2, 3)
		// acks=1 straight to the leader; a warm client, so the burst is
		// one quick request before the leader notices it lost its
		// majority.
		one := c.Client(kgo.SeedBrokers(old.ClientAddr()), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
		produceN(t, one, topic, 0, "warmup-"+prefix, 1)
		for _, f := range c.Others(old) {
			f.Pause()
		}
		// Answer the followers' fetches still in flight with one record,
		// so the burst is less likely to reach them that way.
		produceSync(t, one, 5*time.Second, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("flush-" + prefix)})
		time.Sleep(50 * time.Millisecond)
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("%s-%06d", prefix, i))}
		}
		res := produceSync(t, one, 10*time.Second, recs...)
		one.Close()
		var tail []ack
		for i, r := range res {
			if r.Err == nil {
				tail = append(tail, ack{seq: i, offset: r.Record.Offset, value: string(r.Record.Value)})
			}
		}
		if len(tail) > 0 {
			return old, tail
		}
		// The leader stepped down first (a loaded machine): again.
		if attempt == 3 {
			t.Fatalf("the leader acknowledged none of the acks=1 burst while its followers were paused, %d times: %v", attempt, res.FirstErr())
		}
		t.Logf("attempt %d: the leader stepped down before the burst (%v); again", attempt, res.FirstErr())
		for _, f := range c.Others(old) {
			f.Resume()
		}
	}
}

// TestOldLeaderTruncatesUnreplicatedTailAndRejoinsISR gives the leader an
// unreplicated tail (acks=1 records written while both followers were
// paused), kills it with SIGKILL, lets a new leader write other records at
// the same offsets, and restarts the old leader: it must truncate the
// tail, copy the new leader's records, rejoin the ISR, and end with a log
// byte-identical to the others'.
func TestOldLeaderTruncatesUnreplicatedTailAndRejoinsISR(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "tail"
	c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	before := produceN(t, all, topic, 0, "before", 40)

	// A follower's fetch already in flight when it was paused may still
	// carry part of the burst to it (the answer waits in its socket): then
	// the new leader has the tail and nothing diverged. Try again.
	var old, leader *testcluster.Replica
	var tail, after []ack
	var lost string
	for attempt := 1; ; attempt++ {
		lost = fmt.Sprintf("tail%d-", attempt)
		old, tail = divergentTail(t, c, topic, strings.TrimSuffix(lost, "-"), 20)
		old.Kill()
		for _, f := range c.Others(old) {
			f.Resume()
		}
		leader = c.Leader(electWithin, old)
		batch := produceN(t, all, topic, 0, fmt.Sprintf("after%d", attempt), 40)
		after = append(after, batch...)
		if batch[0].offset <= tail[len(tail)-1].offset {
			break
		}
		if attempt == 3 {
			t.Fatalf("the followers received the old leader's acks=1 burst %d times; no divergent tail to truncate", attempt)
		}
		t.Logf("attempt %d: the followers had received the burst (first new offset %d, burst up to %d); again", attempt, batch[0].offset, tail[len(tail)-1].offset)
		old.Start()
	}
	others := c.Others(old)
	c.WaitISR(isrWithin, others[0].ID, others[1].ID)
	t.Logf("replica %d leads; offsets %d..%d held the old leader's tail and now hold other records", leader.ID, tail[0].offset, tail[len(tail)-1].offset)

	old.Start()
	c.WaitISR(isrWithin, 1, 2, 3)
	end := endOffset(after)
	waitCaughtUp(t, c, topic, 1, end)
	recs := readPartition(t, c, topic, 0, end)
	checkAcked(t, recs, before, after)
	if got := values(recs, lost); len(got) != 0 {
		t.Fatalf("the group serves records of the lost tail: %v", got)
	}

	// Stopped, every replica's stored log is the same, byte for byte.
	for _, f := range c.Replicas {
		f.Stop(30 * time.Second)
	}
	want, _, wantEnd, err := leader.ReadLog(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Others(leader) {
		got, _, gotEnd, err := r.ReadLog(topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		if gotEnd != wantEnd || !bytes.Equal(got, want) {
			t.Fatalf("%v's log ends at %d (%d bytes), the leader's at %d (%d bytes)", r, gotEnd, len(got), wantEnd, len(want))
		}
	}
	stored, err := testcluster.DecodeLog(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stored {
		if strings.HasPrefix(string(r.Value), lost) {
			t.Fatalf("offset %d still holds %s", r.Offset, r.Value)
		}
	}
}

// waitCaughtUp waits until the serving leader reports every other running
// replica at end on each of the topic's partitions.
func waitCaughtUp(t *testing.T, c *testcluster.Cluster, topic string, partitions int32, end ...int64) {
	t.Helper()
	c.WaitFor(readWithin, "followers at the log end", func() (bool, string) {
		l, st := c.ServingLeader()
		if l == nil {
			return false, "no serving leader"
		}
		for _, r := range c.Others(l) {
			if !r.Running() {
				continue
			}
			for p := range partitions {
				want := end[0]
				if len(end) > 1 {
					want = end[p]
				}
				if pos, ok := position(st, r.ID, topic, p); !ok || pos != want {
					return false, fmt.Sprintf("leader %d: %v at %d on %s-%d (known %v), want %d", l.ID, r, pos, topic, p, ok, want)
				}
			}
		}
		return true, ""
	})
}

// seen is a record a consumer read, with the high watermark of the fetch
// that returned it.
type seen struct {
	offset int64
	value  string
	hw     int64
}

// watcher consumes one partition continuously and keeps every record read.
type watcher struct {
	mu      sync.Mutex
	read    []seen
	fetches atomic.Int64
	stop    chan struct{}
	done    chan struct{}
}

type fetchCounter struct{ n *atomic.Int64 }

// OnBrokerRead counts answered fetch requests.
func (f fetchCounter) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.n.Add(1)
	}
}

func startWatcher(t *testing.T, c *testcluster.Cluster, topic string) *watcher {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{})}
	cl := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.WithHooks(fetchCounter{&w.fetches}))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-w.stop
		cancel()
	}()
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				w.mu.Lock()
				for _, r := range p.Records {
					w.read = append(w.read, seen{offset: r.Offset, value: string(r.Value), hw: p.HighWatermark})
				}
				w.mu.Unlock()
			})
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *watcher) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *watcher) last() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.read) == 0 {
		return -1
	}
	return w.read[len(w.read)-1].offset
}

// TestConsumersNeverReadAboveHighWatermark keeps consumers polling the
// leader while it holds records no follower has (acks=1, both followers
// paused), then kills it: no consumer may have read a record at or above
// the high watermark of its fetch, and every record read must be in the
// new leader's log at the same offset.
func TestConsumersNeverReadAboveHighWatermark(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	const topic = "hw"
	c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()))
	ws := []*watcher{startWatcher(t, c, topic), startWatcher(t, c, topic)}
	before := produceN(t, all, topic, 0, "before", 30)
	for _, w := range ws {
		c.WaitFor(readWithin, "a consumer at the high watermark", func() (bool, string) {
			return w.last() >= before[len(before)-1].offset, fmt.Sprintf("consumer at %d", w.last())
		})
	}

	old, tail := divergentTail(t, c, topic, "tail", 20)
	// Every consumer asks the leader a few more times while the tail sits
	// above the high watermark.
	for _, w := range ws {
		n := w.fetches.Load()
		c.WaitFor(readWithin, "more fetches", func() (bool, string) {
			return w.fetches.Load() >= n+3, fmt.Sprintf("%d fetches answered", w.fetches.Load()-n)
		})
	}
	old.Kill()
	for _, f := range c.Others(old) {
		f.Resume()
	}
	c.Leader(electWithin, old)
	after := produceN(t, all, topic, 0, "after", 30)
	end := endOffset(after)
	for _, w := range ws {
		c.WaitFor(readWithin, "consumers at the new log end", func() (bool, string) {
			return w.last() >= end-1, fmt.Sprintf("consumer at %d, want %d", w.last(), end-1)
		})
		w.halt()
	}
	final := readPartition(t, c, topic, 0, end)
	checkAcked(t, final, before, after)
	at := map[int64]string{}
	for _, r := range final {
		at[r.Offset] = string(r.Value)
	}
	for i, w := range ws {
		for _, s := range w.read {
			if s.offset >= s.hw {
				t.Errorf("consumer %d read offset %d (%s) from a fetch whose high watermark was %d", i, s.offset, s.value, s.hw)
			}
			if at[s.offset] != s.value {
				t.Errorf("consumer %d read %s at offset %d; the log now holds %q there", i, s.value, s.offset, at[s.offset])
			}
		}
		t.Logf("consumer %d read %d records; the old leader had acknowledged %d tail records alone", i, len(w.read), len(tail))
	}
}
