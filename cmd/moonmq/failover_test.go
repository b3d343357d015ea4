package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// replicaProc is one failover-mode replica process started by hand
// (status_test.go); new process tests use internal/testcluster.
type replicaProc struct {
	id                     int
	port, mport, replicate int
	dataDir, config        string
	p                      *proc
}

func (r *replicaProc) status(t *testing.T) map[string]any {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/replication/status", r.replicate), nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out map[string]any
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return nil
	}
	return out
}

// TestFailoverKill9 runs three replica processes in failover mode, kills the
// serving leader with SIGKILL while a client produces with acks=all, and
// checks that a new leader takes over, that every acknowledged record is on
// it exactly once, in order, and that the old leader rejoins as a follower
// and comes back into the ISR. test/cluster has the longer scenarios.
func TestFailoverKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("three broker processes and a kill -9")
	}
	// The binary TestMain built: one build per package.
	c := testcluster.Start(t, testcluster.WithBinary(binary), testcluster.WithAckTimeout(2))
	first := c.Leader(60 * time.Second)

	const topic = "kill9"
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(30*time.Second))
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[int64]string{}
	var dupErr string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			v := fmt.Sprintf("v%d", i)
			r, err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).First()
			cancel()
			if err != nil {
				continue
			}
			mu.Lock()
			if old, ok := acked[r.Offset]; ok {
				dupErr = fmt.Sprintf("offset %d acknowledged for %q and %q", r.Offset, old, v)
			}
			acked[r.Offset] = v
			mu.Unlock()
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitCount := func(n int) {
		t.Helper()
		c.WaitFor(60*time.Second, fmt.Sprintf("%d acknowledged records", n), func() (bool, string) {
			return count() >= n, fmt.Sprintf("%d acknowledged", count())
		})
	}
	waitCount(100)
	killedAt := time.Now()
	first.Kill()
	second := c.Leader(60*time.Second, first)
	t.Logf("%v serves %v after the kill", second, time.Since(killedAt))
	waitCount(count() + 100)
	close(stop)
	<-done
	if dupErr != "" {
		t.Fatal(dupErr)
	}

	var maxAcked int64 = -1
	for off := range acked {
		maxAcked = max(maxAcked, off)
	}
	// Seeded with every replica: it reads from whichever leads.
	cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[int64]string{}
	seen := map[string]int{}
	last := int64(-1)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for last < maxAcked {
		fs := cons.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("consumed up to %d; want %d", last, maxAcked)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Fatalf("offset %d after %d", r.Offset, last)
			}
			last = r.Offset
			got[r.Offset] = string(r.Value)
			seen[string(r.Value)]++
		})
	}
	for off, v := range acked {
		if got[off] != v || seen[v] != 1 {
			t.Fatalf("offset %d: read %q (%d times), acknowledged %q", off, got[off], seen[v], v)
		}
	}

	// The killed leader restarts with its data and follows the new one.
	first.Start()
	c.WaitFor(60*time.Second, "the old leader following the new one", func() (bool, string) {
		l, _ := c.ServingLeader()
		st, err := first.Status()
		if l == nil || err != nil {
			return false, fmt.Sprintf("leader %v, old leader's status error %v", l, err)
		}
		return st.Role == "follower" && st.Leader == int32(l.ID) && st.Follower != nil,
			fmt.Sprintf("old leader: role %s, following %d; serving leader %v", st.Role, st.Leader, l)
	})
	c.WaitISR(60*time.Second, 1, 2, 3)
}
