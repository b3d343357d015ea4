package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
)

func txnClient(t *testing.T, addr, id string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return client(t, addr, append([]kgo.Opt{kgo.TransactionalID(id), kgo.DefaultProduceTopic("tx"),
		kgo.TransactionTimeout(10 * time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

func runTxn(t *testing.T, cl *kgo.Client, prefix string, n int, commit bool) {
	t.Helper()
	ctx := ctxT(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// readAllValues reads both partitions up to their end with the isolation
// level given. Each partition must end with a plain record (a control
// record is never delivered, so the read could not tell it reached the
// end).
func readAllValues(t *testing.T, addr string, committed bool) map[string]int {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	adm := kadm.NewClient(client(t, addr))
	ends, err := adm.ListEndOffsets(ctxT(t), "tx")
	if err != nil {
		t.Fatal(err)
	}
	cl := client(t, addr, kgo.ConsumeTopics("tx"), kgo.FetchIsolationLevel(iso), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	pos := map[int32]int64{}
	// Generous: the race detector with other packages beside it on two
	// cores makes a client's start and first fetches slow. Reaching the
	// deadline fails the test rather than returning a partial read.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := func() bool {
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if pos[o.Partition] < o.Offset-1 {
				ok = false
			}
		})
		return ok
	}
	for !done() {
		if ctx.Err() != nil {
			t.Fatalf("read (committed only: %v) did not reach the end offsets %v in time: last offsets read %v", committed, ends, pos)
		}
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			pos[r.Partition] = r.Offset
		})
	}
	return seen
}

func TestTransactionsCommitAbortIsolation(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "tx", 2, nil)
	cl := txnClient(t, in.Addr(), "t1")
	runTxn(t, cl, "c1", 20, true)
	runTxn(t, cl, "a1", 20, false)
	runTxn(t, cl, "c2", 20, true)
	// A plain record after everything, so every partition's end is
	// readable by both consumers.
	plain := client(t, in.Addr(), kgo.DefaultProduceTopic("tx"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 2; p++ {
		if err := plain.ProduceSync(ctxT(t), &kgo.Record{Partition: p, Value: []byte(fmt.Sprint("tail-", p))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	committed := readAllValues(t, in.Addr(), true)
	for i := 0; i < 20; i++ {
		for _, pre := range []string{"c1", "c2"} {
			if v := fmt.Sprintf("%s-%d", pre, i); committed[v] != 1 {
				t.Fatalf("read_committed saw committed %s %d times", v, committed[v])
			}
		}
		if v := fmt.Sprintf("a1-%d", i); committed[v] != 0 {
			t.Fatalf("read_committed saw aborted %s", v)
		}
	}
	uncommitted := readAllValues(t, in.Addr(), false)
	if uncommitted["a1-3"] != 1 {
		t.Fatal("read_uncommitted did not see an aborted record")
	}

	adm := kadm.NewClient(client(t, in.Addr()))
	dt, err := adm.DescribeTransactions(ctxT(t), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := dt["t1"]; !ok || d.State != "CompleteCommit" {
		t.Fatalf("describe transactions: %+v", dt)
	}
	// Transactions v2 (KIP-890): franz-go sees the transaction.version
	// feature and every EndTxn bumps the epoch (three transactions).
	if d := dt["t1"]; d.ProducerEpoch < 3 {
		t.Fatalf("producer epoch %d after three transactions: transactions v2 not in use", d.ProducerEpoch)
	}
	lt, err := adm.ListTransactions(ctxT(t), nil, nil)
	if err != nil || len(lt) != 1 {
		t.Fatalf("list transactions: %v %+v", err, lt)
	}
	dp, err := adm.DescribeProducers(ctxT(t), kadm.TopicsSet{"tx": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	dp.EachPartition(func(p kadm.DescribedProducersPartition) {
		found = found || len(p.ActiveProducers) > 0
	})
	if !found {
		t.Fatal("describe producers lists no producer")
	}
}

func TestTransactionFencing(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "tx", 2, nil)
	zombie := txnClient(t, in.Addr(), "fence")
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A new incarnation with the same id fences the zombie and aborts its
	// open transaction.
	fresh := txnClient(t, in.Addr(), "fence")
	runTxn(t, fresh, "fresh", 4, true)
	err := zombie.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("zombie-2")}).FirstErr()
	if err == nil {
		err = zombie.EndTransaction(ctxT(t), kgo.TryCommit)
	}
	if !errorsIs(err, kerr.InvalidProducerEpoch) && !errorsIs(err, kerr.ProducerFenced) && !errorsIs(err, kerr.InvalidTxnState) {
		t.Fatalf("zombie was not fenced: %v", err)
	}
	plain := client(t, in.Addr(), kgo.DefaultProduceTopic("tx"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 2; p++ {
		if err := plain.ProduceSync(ctxT(t), &kgo.Record{Partition: p, Value: []byte("tail")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	seen := readAllValues(t, in.Addr(), true)
	if seen["zombie"] != 0 || seen["zombie-2"] != 0 || seen["fresh-0"] != 1 {
		t.Fatalf("after fencing read_committed saw %v", seen)
	}
}

// TestOpenTransactionAbortedAfterRestart leaves a transaction open, restarts
// the broker, and checks that the timeout aborts it so the partition's last
// stable offset moves on.
func TestOpenTransactionAbortedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "tx", 2, nil)
	cl := txnClient(t, in.Addr(), "stuck", kgo.TransactionTimeout(2*time.Second))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctxT(t), &kgo.Record{Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	in.Close()

	in = startBroker(t, dir)
	defer in.Close()
	adm := kadm.NewClient(client(t, in.Addr()))
	deadline := time.Now().Add(15 * time.Second)
	for {
		lso, err := adm.ListCommittedOffsets(ctxT(t), "tx")
		if err != nil {
			t.Fatal(err)
		}
		ends, _ := adm.ListEndOffsets(ctxT(t), "tx")
		l, _ := lso.Lookup("tx", 0)
		e, _ := ends.Lookup("tx", 0)
		if l.Offset == e.Offset && e.Offset >= 2 {
			break // the abort marker was written and the LSO caught up
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition stuck behind an open transaction: LSO %d, end %d", l.Offset, e.Offset)
		}
		time.Sleep(200 * time.Millisecond)
	}
	dt, _ := adm.DescribeTransactions(ctxT(t), "stuck")
	if d := dt["stuck"]; d.State != "CompleteAbort" {
		t.Fatalf("state after timeout: %+v", d)
	}
}

// TestTransactionalProduceToInvalidPartition sends a transactional Produce
// (v12: implicit partition add) to partition -1 and then commits: the
// broker must refuse the partition, survive, and restart cleanly.
func TestTransactionalProduceToInvalidPartition(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "tx", 1, nil)
	cl := client(t, in.Addr())
	init := kmsg.NewPtrInitProducerIDRequest()
	id := "bad-partition"
	init.TransactionalID = &id
	init.TransactionTimeoutMillis = 10000
	ir, err := init.RequestWith(ctxT(t), cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %+v", err, ir)
	}
	batch, _ := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: ir.ProducerID, ProducerEpoch: ir.ProducerEpoch, Transactional: true},
		[]recordbatch.Record{{Value: []byte("x")}})
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID = &id
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "tx"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = -1
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	pr, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := pr.Topics[0].Partitions[0].ErrorCode; code == 0 {
		t.Fatal("a produce to partition -1 was accepted")
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, ir.ProducerID, ir.ProducerEpoch, true
	if _, err := end.RequestWith(ctxT(t), cl); err != nil {
		t.Fatal(err)
	}
	// Still serving, and restartable.
	createTopic(t, in.Addr(), "after", 1, nil)
	in.Close()
	in = startBroker(t, dir)
	createTopic(t, in.Addr(), "after-restart", 1, nil)
}

// TestDecisionRecoveredFromMarker covers the crash EndTxn's single durable
// round allows: a commit marker (at the producer's next epoch) reached the
// disk of one partition, but neither the decision record nor the other
// partition's marker did. The restarted coordinator must read the decision
// from the marker and commit the other partition too; aborting it (what a
// timeout would do) would split the transaction.
func TestDecisionRecoveredFromMarker(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "tx", 2, nil)
	cl := txnClient(t, in.Addr(), "half", kgo.TransactionTimeout(2*time.Second))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("half-%d", p))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(client(t, in.Addr()))
	dt, err := adm.DescribeTransactions(ctxT(t), "half")
	if err != nil {
		t.Fatal(err)
	}
	d := dt["half"]
	if d.State != "Ongoing" {
		t.Fatalf("state before the crash: %+v", d)
	}
	cl.Close()
	in.Close()

	// What the single round left on disk: partition 0's commit marker.
	log, err := storage.Open(filepath.Join(dir, "topics", "tx", "0"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	marker, err := recordbatch.Encode(recordbatch.BatchOptions{
		ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch + 1, BaseSequence: -1, Transactional: true, Control: true,
	}, []recordbatch.Record{{Key: txn.ControlKey(txn.ControlCommit), Value: txn.ControlValue(0), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(marker, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	in = startBroker(t, dir)
	defer in.Close()
	adm = kadm.NewClient(client(t, in.Addr()))
	deadline := time.Now().Add(15 * time.Second)
	for {
		dt, err := adm.DescribeTransactions(ctxT(t), "half")
		if err != nil {
			t.Fatal(err)
		}
		if s := dt["half"].State; s == "CompleteCommit" || s == "CompleteAbort" {
			if s != "CompleteCommit" {
				t.Fatalf("the coordinator ended the transaction with %s although partition 0 holds its commit marker", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction never completed: %+v", dt["half"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	plain := client(t, in.Addr(), kgo.DefaultProduceTopic("tx"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 2; p++ {
		if err := plain.ProduceSync(ctxT(t), &kgo.Record{Partition: p, Value: []byte("tail")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	got := readAllValues(t, in.Addr(), true)
	if got["half-0"] != 1 || got["half-1"] != 1 {
		t.Fatalf("read_committed after recovery: %v (want both records of the committed transaction)", got)
	}
}
