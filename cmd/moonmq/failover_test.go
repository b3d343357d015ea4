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
)

// replicaProc is one failover-mode replica process.
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
// it exactly once, in order, and that the old leader rejoins as a follower.
func TestFailoverKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("three broker processes and a kill -9")
	}
	rs := make([]*replicaProc, 3)
	for i := range rs {
		rs[i] = &replicaProc{id: i + 1, port: freePort(t), mport: freePort(t), replicate: freePort(t), dataDir: t.TempDir()}
	}
	for _, r := range rs {
		peers := ""
		for _, o := range rs {
			if o != r {
				if peers != "" {
					peers += ","
				}
				peers += fmt.Sprintf(`{"Id": %d, "Address": "127.0.0.1:%d", "ClientAddress": "127.0.0.1:%d"}`, o.id, o.replicate, o.port)
			}
		}
		role := "follower"
		if r.id == 1 {
			role = "leader"
		}
		extra := fmt.Sprintf(`, "Replication": {"Enabled": true, "ReplicaId": %d, "Role": %q, "ReplicateHost": "127.0.0.1",
			"ReplicatePort": %d, "ClientAddress": "127.0.0.1:%d", "Token": "tok", "AckTimeout": 2, "IsrLagSeconds": 1,
			"Peers": [%s], "Failover": {"Enabled": true}}`, r.id, role, r.replicate, r.port, peers)
		r.config = writeConfig(t, r.dataDir, r.port, r.mport, extra)
	}
	for _, r := range rs {
		r.p = startProc(t, r.config, r.port, r.mport)
	}
	serving := func(not int, within time.Duration) *replicaProc {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			for _, r := range rs {
				if r.id == not {
					continue
				}
				st := r.status(t)
				raft, _ := st["raft"].(map[string]any)
				if st["role"] == "leader" && raft["serving"] == true && raft["has_isr"] == true {
					return r
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no serving leader within %v", within)
		return nil
	}
	first := serving(0, 60*time.Second)

	const topic = "kill9"
	cl := newClient(t, fmt.Sprintf("127.0.0.1:%d", rs[0].port),
		kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", rs[0].port), fmt.Sprintf("127.0.0.1:%d", rs[1].port), fmt.Sprintf("127.0.0.1:%d", rs[2].port)),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(30*time.Second))
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
		deadline := time.Now().Add(60 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d records acknowledged, want %d", count(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCount(100)
	killedAt := time.Now()
	first.p.kill9(t)
	second := serving(first.id, 60*time.Second)
	t.Logf("replica %d serves %v after the kill", second.id, time.Since(killedAt))
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
	var running []string
	for _, r := range rs {
		if r != first {
			running = append(running, fmt.Sprintf("127.0.0.1:%d", r.port))
		}
	}
	// Seeded with the running replicas: it reads from whichever leads.
	cons := newClient(t, running[0], kgo.SeedBrokers(running...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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
	first.p = startProc(t, first.config, first.port, first.mport)
	deadline := time.Now().Add(60 * time.Second)
	for {
		second = serving(first.id, 10*time.Second) // the current leader
		st := first.status(t)
		fol, _ := st["follower"].(map[string]any)
		if st["role"] == "follower" && st["leader"] == float64(second.id) && fol != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old leader did not rejoin as a follower: %v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
