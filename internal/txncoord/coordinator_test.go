package txncoord

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/partition"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/txn"
)

func initTxn(t *testing.T, c *Coordinator, id string) (int64, int16) {
	t.Helper()
	r := kmsg.NewPtrInitProducerIDRequest()
	r.Version, r.TransactionalID, r.TransactionTimeoutMillis = 4, &id, 60000
	resp := c.InitProducerID(context.Background(), r)
	if resp.ErrorCode != 0 {
		t.Fatalf("InitProducerId: code %d", resp.ErrorCode)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

// produceTxn appends a transactional batch of the producer to p, as a
// client's produce would once the coordinator allowed it.
func produceTxn(t *testing.T, c *Coordinator, p *partition.Partition, pid int64, epoch int16) {
	t.Helper()
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: pid, ProducerEpoch: epoch, Transactional: true},
		[]recordbatch.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		t.Fatal(err)
	}
	check := func(h recordbatch.Header) int16 {
		return c.CheckProduce(h.ProducerID, h.ProducerEpoch, p.Topic, p.Index)
	}
	if _, err := p.AppendClient([][]byte{batch}, []recordbatch.Header{h}, check, partition.FlushNow); err != nil {
		t.Fatalf("transactional produce: %v", err)
	}
}

// TestCommitWritesMarkersAndReloads: a transaction's offset commits are
// written as its producer; committed, it leaves a commit marker on each of
// its partitions, the offsets topic's included (whose pending commits the
// group coordinator then applies), and a coordinator reloaded from the
// state topic knows it as committed.
func TestCommitWritesMarkersAndReloads(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	data := h.topic("orders", 2)
	c := h.coordinator(ctx)
	pid, epoch := initTxn(t, c, "tx")

	if code := c.CheckProduce(pid, epoch, "orders", 1); code != txn.ErrInvalidTxnState {
		t.Fatalf("produce before the partition joined: code %d, want INVALID_TXN_STATE", code)
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, "tx", pid, epoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "orders", Partitions: []int32{1}}}
	if code := c.AddPartitions(ctx, add).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("AddPartitionsToTxn: code %d", code)
	}
	produceTxn(t, c, data[1], pid, epoch)
	offs := kmsg.NewPtrAddOffsetsToTxnRequest()
	offs.Version, offs.TransactionalID, offs.ProducerID, offs.ProducerEpoch, offs.Group = 3, "tx", pid, epoch, "g"
	if code := c.AddOffsets(ctx, offs).ErrorCode; code != 0 {
		t.Fatalf("AddOffsetsToTxn: code %d", code)
	}

	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.Version, commit.TransactionalID, commit.ProducerID, commit.ProducerEpoch, commit.Group = 3, "tx", pid, epoch, "g"
	commit.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 1, Offset: 1}}}}
	if code := c.TxnOffsetCommit(ctx, commit).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("TxnOffsetCommit: code %d", code)
	}
	if got := h.wroteAs.Load(); got == nil || *got != [2]int64{pid, int64(epoch)} {
		t.Fatalf("offset commits written as %v, want producer %d epoch %d", got, pid, epoch)
	}

	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 4, "tx", pid, epoch, true
	if code := c.EndTxn(ctx, end).ErrorCode; code != 0 {
		t.Fatalf("EndTxn: code %d", code)
	}
	// The offsets topic's marker goes to group g's partition of it only.
	groupPart := coordinator.PartitionFor("g", testCoordinatorPartitions)
	for _, p := range []*partition.Partition{data[1], h.Partition(testOffsetsTopic, groupPart)} {
		if mk, ok := p.LastMarker(pid); !ok || !mk.Commit {
			t.Fatalf("%s/%d: marker %+v (%v), want a commit marker", p.Topic, p.Index, mk, ok)
		}
	}
	for _, p := range h.Owned(testOffsetsTopic) {
		if _, ok := p.LastMarker(pid); ok && p.Index != groupPart {
			t.Fatalf("a marker on %s/%d, not group g's partition %d", p.Topic, p.Index, groupPart)
		}
	}
	if _, ok := data[0].LastMarker(pid); ok {
		t.Fatal("a marker on a partition the transaction never had")
	}
	if commit, ok := h.ended.Load(pid); !ok || commit != true {
		t.Fatalf("group coordinator told of the offsets' end: %v (%v), want commit", commit, ok)
	}

	// Synced yet or not (it is written lazily), the Complete* record is
	// what a reload ends with: a Prepare* state is completed again.
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	reloaded := h.coordinator(ctx)
	if err := reloaded.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Coordinator{c, reloaded} {
		d := kmsg.NewPtrDescribeTransactionsRequest()
		d.TransactionalIDs = []string{"tx"}
		st := c.DescribeTransactions(d).TransactionStates[0]
		if st.ErrorCode != 0 || st.ProducerID != pid || st.State != txn.StateName(kmsg.TransactionStateCompleteCommit) {
			t.Fatalf("after reload: %+v, want producer %d CompleteCommit", st, pid)
		}
	}
}

// TestReloadLeavesTheNextTransactionAlone: under transactions v2 a
// producer's next transaction writes its data at the epoch the previous
// commit's markers carry, and that data can be durable while the state
// topic's records after the commit decision (its Complete record, the next
// transaction's Ongoing record) are not. A coordinator reloaded from such
// a state topic completes the commit again: its marker, repeated on a
// partition that already has it, must not commit the next transaction's
// records there. That transaction, unknown to the reloaded coordinator,
// is aborted as an orphan instead.
func TestReloadLeavesTheNextTransactionAlone(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	data := h.topic("orders", 1)[0]
	tp := txn.TP{Topic: "orders", Partition: 0}
	c := h.coordinator(ctx)
	pid, epoch := initTxn(t, c, "tx")

	if code := c.AddImplicit(ctx, pid, epoch, tp); code != 0 {
		t.Fatalf("implicit add: code %d", code)
	}
	produceTxn(t, c, data, pid, epoch)
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 5, "tx", pid, epoch, true
	resp := c.EndTxn(ctx, end)
	if resp.ErrorCode != 0 || resp.ProducerEpoch != epoch+1 {
		t.Fatalf("EndTxn v5: code %d epoch %d, want epoch %d", resp.ErrorCode, resp.ProducerEpoch, epoch+1)
	}
	decided, err := c.statePartition("tx")
	if err != nil {
		t.Fatal(err)
	}
	// The decision as end wrote it: the completed state with its
	// partitions back.
	prepare := c.byProducer(pid).meta.Load().Clone()
	prepare.State = kmsg.TransactionStatePrepareCommit
	prepare.Partitions = map[txn.TP]struct{}{tp: {}}

	if code := c.AddImplicit(ctx, pid, epoch+1, tp); code != 0 {
		t.Fatalf("implicit add of the next transaction: code %d", code)
	}
	next := data.Log().EndOffset()
	produceTxn(t, c, data, pid, epoch+1)

	// The state topic as that crash leaves it: the commit decision is the
	// last record of "tx" (appended again here, after the records a
	// failover would have lost).
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: -1}, []recordbatch.Record{{
		Key: txn.EncodeKey("tx"), Value: txn.EncodeValue(prepare)}})
	if err != nil {
		t.Fatal(err)
	}
	if end, err := c.w.Append(decided, batch, partition.FlushNow); err != nil || c.w.Wait(ctx, decided, end) != nil {
		t.Fatalf("rewinding the state topic: %v", err)
	}
	reloaded := h.coordinator(ctx)
	if err := reloaded.Load(ctx); err != nil {
		t.Fatal(err)
	}
	aborted := data.AbortedIn(next, data.Log().EndOffset())
	if len(aborted) != 1 || aborted[0].ProducerID != pid || aborted[0].FirstOffset != next {
		t.Fatalf("aborted ranges %+v, want the next transaction's from offset %d: the repeated commit marker committed it", aborted, next)
	}
	if open := data.OpenTransactions(); len(open) != 0 {
		t.Fatalf("still open after the reload: %v", open)
	}
}

// TestLoadAbortsOrphans: a transaction a partition holds open but the
// state topic does not know (its record was lost) is aborted on load, with
// the producer's own epoch, so the partition's LSO moves again.
func TestLoadAbortsOrphans(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	p := h.topic("orders", 1)[0]
	allow := func(recordbatch.Header) int16 { return 0 }
	batch, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: 42, ProducerEpoch: 3, Transactional: true},
		[]recordbatch.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	hd, _ := recordbatch.ParseHeader(batch)
	if _, err := p.AppendClient([][]byte{batch}, []recordbatch.Header{hd}, allow, partition.FlushNow); err != nil {
		t.Fatal(err)
	}
	if _, open := p.OpenTransactions()[42]; !open {
		t.Fatal("the batch opened no transaction")
	}
	if err := h.coordinator(ctx).Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, open := p.OpenTransactions()[42]; open {
		t.Fatal("the orphaned transaction is still open")
	}
	if mk, ok := p.LastMarker(42); !ok || mk.Commit || mk.Epoch != 3 {
		t.Fatalf("marker %+v (%v), want an abort at the producer's epoch 3", mk, ok)
	}
}

// TestIDsSpreadOverStatePartitions: each transactional id's state goes to
// its own partition of the state topic (coordinator.PartitionFor), and a
// coordinator loaded from all of them knows every id.
func TestIDsSpreadOverStatePartitions(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	c := h.coordinator(ctx)
	ids := []string{"a", "b", "c", "d", "e", "f"}
	pids := map[string]int64{}
	used := map[int32]bool{}
	for _, id := range ids {
		pids[id], _ = initTxn(t, c, id)
		i := coordinator.PartitionFor(id, testCoordinatorPartitions)
		used[i] = true
		if h.Partition(StateTopic, i).Log().EndOffset() == 0 {
			t.Fatalf("%s's state is not in partition %d", id, i)
		}
	}
	if len(used) < 2 {
		t.Fatalf("the ids all hash to one partition: %v", used)
	}
	reloaded := h.coordinator(ctx)
	if err := reloaded.Load(ctx); err != nil {
		t.Fatal(err)
	}
	d := kmsg.NewPtrDescribeTransactionsRequest()
	d.TransactionalIDs = ids
	for i, st := range reloaded.DescribeTransactions(d).TransactionStates {
		if st.ErrorCode != 0 || st.ProducerID != pids[ids[i]] {
			t.Fatalf("%s after reload: %+v, want producer %d", ids[i], st, pids[ids[i]])
		}
	}
}
