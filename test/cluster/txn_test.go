package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// readCommittedUntil reads partition 0 of topic from the start with
// isolation read_committed until it has read the record whose value is
// last, and returns the values read.
func readCommittedUntil(t *testing.T, c *testcluster.Cluster, topic, last string) []string {
	t.Helper()
	cl := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readWithin)
	defer cancel()
	var out []string
	for found := false; !found; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed: %s not read within %v (read %d records, last %v)", last, readWithin, len(out), tailOf(out))
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			found = found || string(r.Value) == last
		})
	}
	return out
}

func tailOf(vs []string) []string {
	if len(vs) > 3 {
		return vs[len(vs)-3:]
	}
	return vs
}

func count(vs []string, prefix string) int {
	n := 0
	for _, v := range vs {
		if strings.HasPrefix(v, prefix) {
			n++
		}
	}
	return n
}

// TestCommittedOffsetsAndOpenTransactionSurviveFailover commits a consumer
// group's offsets, commits one transaction and leaves a second one open,
// then kills the leader: on the new leader the group's committed offsets
// are intact and a new member resumes from them, the open transaction is
// aborted or completed (a read_committed consumer gets past it, seeing all
// or none of it), and the transactional id commits a new transaction.
func TestCommittedOffsetsAndOpenTransactionSurviveFailover(t *testing.T) {
	skipShort(t)
	c := testcluster.Start(t)
	l := c.WaitISR(isrWithin, 1, 2, 3)
	const topic, group, txnID = "orders", "billing", "tx-orders"
	createTopic(t, c, topic, 1, nil)
	all := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()))
	produceN(t, all, topic, 0, "in", 20)
	ctx := testcluster.Context(t, 3*readWithin)

	member := c.Client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	var got []*kgo.Record
	for len(got) < 12 {
		fs := member.PollRecords(ctx, 12-len(got))
		if ctx.Err() != nil {
			t.Fatalf("the group member read %d records", len(got))
		}
		got = append(got, fs.Records()...)
	}
	if err := member.CommitRecords(ctx, got[:12]...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	committed := got[11].Offset + 1
	member.Close()

	tx := c.Client(kgo.TransactionalID(txnID), kgo.TransactionTimeout(5*time.Second))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceN(t, tx, topic, 0, "committed", 5)
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit the first transaction: %v", err)
	}
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open := produceN(t, tx, topic, 0, "open", 5)

	l.Kill()
	l2 := c.Leader(electWithin, l)
	t.Logf("%v serves; the transaction's records are at offsets %d..%d", l2, open[0].offset, open[len(open)-1].offset)

	adm := c.Admin()
	c.WaitFor(readWithin, "the group's committed offset on the new leader", func() (bool, string) {
		os, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false, err.Error()
		}
		o, ok := os.Lookup(topic, 0)
		if !ok || o.Err != nil || o.At != committed {
			return false, fmt.Sprintf("offset %+v (found %v), want %d", o, ok, committed)
		}
		return true, ""
	})

	after := produceN(t, all, topic, 0, "after", 1)
	vs := readCommittedUntil(t, c, topic, after[0].value)
	if n := count(vs, "in-"); n != 20 {
		t.Fatalf("read_committed read %d of the 20 plain records", n)
	}
	if n := count(vs, "committed-"); n != 5 {
		t.Fatalf("read_committed read %d of the committed transaction's 5 records", n)
	}
	outcome := "aborted"
	switch n := count(vs, "open-"); n {
	case 0:
	case 5:
		outcome = "completed"
	default:
		t.Fatalf("read_committed read %d of the open transaction's 5 records: torn", n)
	}
	t.Logf("the open transaction was %s by the new leader", outcome)

	again := c.Client(kgo.TransactionalID(txnID), kgo.TransactionTimeout(5*time.Second))
	if err := again.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceN(t, again, topic, 0, "again", 3)
	if err := again.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit a new transaction with the same id after the failover: %v", err)
	}
	if vs := readCommittedUntil(t, c, topic, "again-000002"); count(vs, "again-") != 3 {
		t.Fatalf("read_committed read %d of the new transaction's 3 records", count(vs, "again-"))
	}

	resumed := c.Client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	for {
		fs := resumed.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			t.Fatal("a new group member read nothing")
		}
		if rs := fs.Records(); len(rs) > 0 {
			if rs[0].Offset != committed {
				t.Fatalf("a new group member started at offset %d, want the committed %d", rs[0].Offset, committed)
			}
			break
		}
	}
}
