package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExactlyOnceAcrossKill9 runs a consume-transform-produce loop with
// franz-go's GroupTransactSession, SIGKILLs the broker in the middle,
// restarts it, lets the loop finish, and checks that the output topic holds
// every input record exactly once under read_committed.
func TestExactlyOnceAcrossKill9(t *testing.T) {
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	cfgPath := writeConfig(t, dir, port, mport, "")
	p := startProc(t, cfgPath, port, mport)
	ctx := context.Background()

	adm := kadm.NewClient(newClient(t, p.addr))
	if _, err := adm.CreateTopics(ctx, 3, 1, nil, "eos-in", "eos-out"); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	prod := newClient(t, p.addr, kgo.DefaultProduceTopic("eos-in"))
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	prod.Close()

	var processed atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(p.addr), kgo.TransactionalID("eos-app"), kgo.ConsumerGroup("eos-group"),
			kgo.ConsumeTopics("eos-in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("eos-out"),
			kgo.TransactionTimeout(10*time.Second), kgo.RequestRetries(100), kgo.RetryTimeout(60*time.Second),
		)
		if err != nil {
			t.Error(err)
			return
		}
		defer sess.Close()
		for runCtx.Err() == nil {
			pctx, cancel := context.WithTimeout(runCtx, time.Second)
			fs := sess.PollRecords(pctx, 200)
			cancel()
			if fs.NumRecords() == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Logf("begin: %v", err)
				continue
			}
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(runCtx, &kgo.Record{Value: append([]byte("out-"), r.Value...)}, nil)
			})
			committed, err := sess.End(runCtx, kgo.TryCommit)
			if err != nil {
				t.Logf("end transaction: %v (the session retries)", err)
				continue
			}
			if committed {
				processed.Add(int64(fs.NumRecords()))
			}
		}
	}()

	// Kill the broker once the loop is well under way, then restart it.
	deadline := time.Now().Add(30 * time.Second)
	for processed.Load() < n/3 {
		if time.Now().After(deadline) {
			t.Fatalf("loop made no progress: %d processed", processed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill9(t)
	t.Logf("SIGKILL after %d records committed", processed.Load())
	time.Sleep(300 * time.Millisecond)
	p = startProc(t, cfgPath, port, mport)

	// Wait until the committed output covers all input.
	out := map[string]int{}
	deadline = time.Now().Add(90 * time.Second)
	for {
		out = readCommitted(t, p.addr, "eos-out")
		if len(out) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stop()
	<-loopDone
	out = readCommitted(t, p.addr, "eos-out")
	missing, dup := 0, 0
	for i := 0; i < n; i++ {
		switch c := out[fmt.Sprint("out-", i)]; {
		case c == 0:
			missing++
		case c > 1:
			dup++
		}
	}
	if missing > 0 || dup > 0 || len(out) != n {
		t.Fatalf("exactly-once violated: %d missing, %d duplicated, %d distinct outputs of %d", missing, dup, len(out), n)
	}
	t.Logf("all %d records transformed exactly once across a SIGKILL", n)
}

// readCommitted returns value -> count of a topic under read_committed,
// reading until two one-second polls in a row bring nothing. (Offsets of
// aborted batches and markers are never returned, so "reached the end
// offset" cannot be detected from the records alone.)
func readCommitted(t *testing.T, addr, topic string) map[string]int {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	counts := map[string]int{}
	for empty := 0; empty < 2; {
		pctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			empty++
			continue
		}
		empty = 0
		fs.EachRecord(func(r *kgo.Record) { counts[string(r.Value)]++ })
	}
	return counts
}
