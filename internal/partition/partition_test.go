package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moonmq/moonmq/internal/producer"
	"github.com/moonmq/moonmq/internal/recordbatch"
	"github.com/moonmq/moonmq/internal/storage"
	"github.com/moonmq/moonmq/internal/txn"
	"github.com/moonmq/moonmq/internal/vfs"
)

// testFence is a fence the test flips.
type testFence struct {
	epoch     atomic.Int32
	notLead   atomic.Bool
	notFollow atomic.Bool
	notCopy   atomic.Bool
}

var (
	errTestNotLeading   = errors.New("test: not leading")
	errTestNotFollowing = errors.New("test: not following")
	errTestNotCopying   = errors.New("test: not copying")
)

func (f *testFence) Leading() (int32, error) {
	if f.notLead.Load() {
		return 0, errTestNotLeading
	}
	return f.epoch.Load(), nil
}

func (f *testFence) Following() error {
	if f.notFollow.Load() {
		return errTestNotFollowing
	}
	return nil
}

func (f *testFence) Copying() error {
	if f.notCopy.Load() {
		return errTestNotCopying
	}
	return nil
}

// capPolicy commits at most up to limit, and holds the high watermark
// while held is set; acked answers for Acker.
type capPolicy struct {
	limit atomic.Int64
	held  atomic.Bool
	acked atomic.Bool
}

func (c *capPolicy) Committed(_ *Partition, durable int64) (int64, bool) {
	return min(durable, c.limit.Load()), true
}
func (c *capPolicy) Held(*Partition) bool             { return c.held.Load() }
func (c *capPolicy) Acked(_ *Partition, _ int64) bool { return c.acked.Load() }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func plainBatch(t *testing.T, n int) []byte {
	return encode(t, recordbatch.BatchOptions{ProducerID: -1}, n)
}

func idemBatch(t *testing.T, pid int64, seq int32) []byte {
	return encode(t, recordbatch.BatchOptions{ProducerID: pid, BaseSequence: seq}, 1)
}

func mustLog(t *testing.T, dir string) *storage.Log {
	t.Helper()
	l, err := storage.Open(dir, storage.Options{RetentionMs: -1, RetentionBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func encode(t *testing.T, o recordbatch.BatchOptions, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	for i := range recs {
		recs[i].Value = []byte("v")
	}
	b, err := recordbatch.Encode(o, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func header(t *testing.T, batch []byte) []recordbatch.Header {
	t.Helper()
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		t.Fatal(err)
	}
	return []recordbatch.Header{h}
}

type fixture struct {
	p      *Partition
	flush  *Flusher
	fence  *testFence
	policy Policy
	dir    string
}

func newFixture(t *testing.T, policy Policy, tail bool) *fixture {
	t.Helper()
	fatal := func(err error) { t.Errorf("fatal: %v", err) }
	f := &fixture{flush: NewFlusher(FlusherConfig{Fatal: fatal}), fence: &testFence{}, policy: policy, dir: t.TempDir()}
	f.open(t, tail)
	return f
}

func (f *fixture) open(t *testing.T, tail bool) {
	t.Helper()
	p, err := New(Config{Topic: "t", Index: 0, Log: mustLog(t, f.dir), Policy: f.policy, Fence: f.fence,
		Flusher: f.flush, UncommittedTail: tail, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	t.Cleanup(func() { _ = p.Close() })
}

func (f *fixture) client(t *testing.T, batch []byte) (Appended, error) {
	t.Helper()
	return f.p.AppendClient([][]byte{batch}, header(t, batch), nil, FlushNow)
}

// TestAppendPathsShareOffsetsAndState: the three append flavours write
// one log, in order; the producer state they keep is one state (a retry
// of an own-written idempotent batch is a duplicate for a client).
func TestAppendPathsShareOffsetsAndState(t *testing.T) {
	f := newFixture(t, nil, false)
	f.fence.epoch.Store(3)
	a, err := f.client(t, plainBatch(t, 2))
	if err != nil || a.Base != 0 || a.Last != 1 || a.Duplicate {
		t.Fatalf("client append: %+v, %v", a, err)
	}
	end, err := f.p.AppendOwn(idemBatch(t, 7, 0), FlushNow)
	if err != nil || end != 3 {
		t.Fatalf("own append: end %d, %v; want 3", end, err)
	}
	// A retry of the same producer's batch by a client is a duplicate.
	a, err = f.client(t, idemBatch(t, 7, 0))
	if err != nil || !a.Duplicate || a.Base != 2 || a.Last != 2 {
		t.Fatalf("retry: %+v, %v; want a duplicate at 2", a, err)
	}
	// Out of order: refused with the producer state's code.
	_, err = f.client(t, idemBatch(t, 7, 5))
	var r *Refusal
	if !errors.As(err, &r) || r.Code != producer.ErrOutOfOrderSequence {
		t.Fatalf("out-of-order batch: %v, want OUT_OF_ORDER_SEQUENCE", err)
	}
	// A replica append lands at the offset its batch names.
	rb := encode(t, recordbatch.BatchOptions{ProducerID: -1, BaseOffset: 3, LeaderEpoch: 3}, 1)
	if err := f.p.AppendReplica(rb); err != nil {
		t.Fatal(err)
	}
	if end := f.p.Log().EndOffset(); end != 4 {
		t.Fatalf("log end %d, want 4", end)
	}
	if e := f.p.Log().LatestEpoch(); e != 3 {
		t.Fatalf("epoch stamped %d, want the fence's 3", e)
	}
}

// TestCopyFromAnotherGroup: a move's copy lands at the offsets and with
// the epochs its batches carry, even above the leader epoch the fence
// would stamp, and brings the producer state along (a client's retry of a
// copied idempotent batch is a duplicate); it is synced as the leader's
// own appends, so it becomes durable and committed. Only the fence's
// Copying decides whether it may be written, and a reset empties the log
// and starts it where the source's begins.
func TestCopyFromAnotherGroup(t *testing.T) {
	f := newFixture(t, nil, false)
	f.fence.epoch.Store(2)
	f.fence.notLead.Store(true) // a partition fenced for a move is being copied back in
	cb := encode(t, recordbatch.BatchOptions{ProducerID: 7, BaseSequence: 0, BaseOffset: 0, LeaderEpoch: 9}, 2)
	if err := f.p.AppendCopy(cb); err != nil {
		t.Fatal(err)
	}
	if end, e := f.p.Log().EndOffset(), f.p.Log().LatestEpoch(); end != 2 || e != 9 {
		t.Fatalf("copy: log end %d epoch %d, want 2 and the batch's 9", end, e)
	}
	select {
	case <-f.flush.kick: // a pass was started for it, as for a produce
	default:
		t.Fatal("the copy started no sync")
	}
	f.flush.SyncAll()
	if hw := f.p.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d after the copy's sync, want 2", hw)
	}
	f.fence.notLead.Store(false)
	if a, err := f.client(t, encode(t, recordbatch.BatchOptions{ProducerID: 7, BaseSequence: 0}, 2)); err != nil || !a.Duplicate || a.Base != 0 {
		t.Fatalf("a client's retry of a copied batch: %+v, %v; want a duplicate at 0", a, err)
	}
	f.fence.notCopy.Store(true)
	if err := f.p.AppendCopy(encode(t, recordbatch.BatchOptions{ProducerID: -1, BaseOffset: 2, LeaderEpoch: 9}, 1)); !errors.Is(err, errTestNotCopying) {
		t.Fatalf("copy while the fence refuses it: %v", err)
	}
	if err := f.p.ResetCopy(40); !errors.Is(err, errTestNotCopying) {
		t.Fatalf("reset while the fence refuses it: %v", err)
	}
	f.fence.notCopy.Store(false)
	if err := f.p.ResetCopy(40); err != nil {
		t.Fatal(err)
	}
	if start, end, hw := f.p.Log().StartOffset(), f.p.Log().EndOffset(), f.p.HighWatermark(); start != 40 || end != 40 || hw > 40 {
		t.Fatalf("after the reset: start %d end %d high watermark %d, want 40, 40, at most 40", start, end, hw)
	}
}

// TestAppendRefusals: nothing is written when the fence, the transaction
// check or a deletion refuses.
func TestAppendRefusals(t *testing.T) {
	f := newFixture(t, nil, false)
	f.fence.notLead.Store(true)
	if _, err := f.client(t, plainBatch(t, 1)); !errors.Is(err, errTestNotLeading) {
		t.Fatalf("client append while not leading: %v", err)
	}
	if _, err := f.p.AppendOwn(plainBatch(t, 1), FlushNow); !errors.Is(err, errTestNotLeading) {
		t.Fatalf("own append while not leading: %v", err)
	}
	f.fence.notLead.Store(false)
	f.fence.notFollow.Store(true)
	if err := f.p.AppendReplica(plainBatch(t, 1)); !errors.Is(err, errTestNotFollowing) {
		t.Fatalf("replica append while not following: %v", err)
	}
	if err := f.p.Truncate(0); !errors.Is(err, errTestNotFollowing) {
		t.Fatalf("truncation while not following: %v", err)
	}
	tb := encode(t, recordbatch.BatchOptions{ProducerID: 9, BaseSequence: 0, Transactional: true}, 1)
	_, err := f.p.AppendClient([][]byte{tb}, header(t, tb), func(h recordbatch.Header) int16 {
		if h.ProducerID != 9 {
			t.Errorf("transaction check saw producer %d", h.ProducerID)
		}
		return 48
	}, FlushNow)
	var r *Refusal
	if !errors.As(err, &r) || r.Code != 48 || !r.Transaction {
		t.Fatalf("transactional batch outside a transaction: %v, want refusal 48", err)
	}
	if end := f.p.Log().EndOffset(); end != 0 {
		t.Fatalf("refused appends wrote: log end %d", end)
	}
	f.p.Delete()
	if _, err := f.client(t, plainBatch(t, 1)); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append to a deleted partition: %v", err)
	}
	f.flush.SyncAll() // a deleted partition's closed log is not a failed fsync
}

// TestZombieCoordinatorMarkerRefused: once a coordinator at epoch 6 has
// written a producer's marker, a marker from the coordinator at epoch 5
// (a zombie retrying an old decision) is refused before it is appended,
// also after the state is rebuilt from the log, and it cannot close the
// producer's next transaction.
func TestZombieCoordinatorMarkerRefused(t *testing.T) {
	f := newFixture(t, nil, false)
	txnData := func(seq int32) {
		t.Helper()
		tb := encode(t, recordbatch.BatchOptions{ProducerID: 9, BaseSequence: seq, Transactional: true}, 1)
		if _, err := f.p.AppendClient([][]byte{tb}, header(t, tb), nil, FlushNow); err != nil {
			t.Fatal(err)
		}
	}
	txnData(0)
	for _, e := range []int32{5, 6} { // the old coordinator, then the new one
		if _, err := f.p.AppendOwn(encodeMarkerAt(t, 9, txn.ControlCommit, e), FlushNow); err != nil {
			t.Fatalf("marker at coordinator epoch %d: %v", e, err)
		}
	}
	txnData(1) // the next transaction, same producer epoch
	for _, rebuilt := range []bool{false, true} {
		if rebuilt {
			if err := f.p.Truncate(f.p.Log().EndOffset()); err != nil {
				t.Fatal(err)
			}
		}
		end := f.p.Log().EndOffset()
		_, err := f.p.AppendOwn(encodeMarkerAt(t, 9, txn.ControlCommit, 5), FlushNow)
		var r *Refusal
		if !errors.As(err, &r) || r.Code != errTransactionCoordinatorFenced {
			t.Fatalf("rebuilt=%v: zombie marker: %v, want TRANSACTION_COORDINATOR_FENCED", rebuilt, err)
		}
		if f.p.Log().EndOffset() != end || len(f.p.OpenTransactions()) != 1 {
			t.Fatalf("rebuilt=%v: the refused marker wrote or closed: end %d->%d, open %v", rebuilt, end, f.p.Log().EndOffset(), f.p.OpenTransactions())
		}
	}
	if _, err := f.p.AppendOwn(encodeMarkerAt(t, 9, txn.ControlAbort, 6), FlushNow); err != nil {
		t.Fatalf("the current coordinator's marker: %v", err)
	}
	if open := f.p.OpenTransactions(); len(open) != 0 {
		t.Fatalf("open after the current coordinator's abort: %v", open)
	}
}

// TestRepeatedMarkerLeftOut: under transactions v2 a transaction's
// markers carry the epoch its EndTxn bumped to, and the producer's next
// transaction writes at that epoch. A repeat of the earlier decision's
// marker (a coordinator completing it again after a restart) must not
// close the next transaction: it is left out, as is any marker older
// than the producer's epoch here, also after the state is rebuilt from
// the log; the next transaction's own marker still closes it.
func TestRepeatedMarkerLeftOut(t *testing.T) {
	f := newFixture(t, nil, false)
	marker := func(epoch int16, typ int16) []byte {
		t.Helper()
		b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: 9, ProducerEpoch: epoch, BaseSequence: -1, Transactional: true, Control: true},
			[]recordbatch.Record{{Key: txn.ControlKey(typ), Value: txn.ControlValue(0)}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := func(epoch int16) int64 {
		t.Helper()
		tb := encode(t, recordbatch.BatchOptions{ProducerID: 9, ProducerEpoch: epoch, BaseSequence: 0, Transactional: true}, 2)
		a, err := f.p.AppendClient([][]byte{tb}, header(t, tb), nil, FlushNow)
		if err != nil {
			t.Fatal(err)
		}
		return a.Base
	}
	data(0)
	if _, err := f.p.AppendMarker(marker(1, txn.ControlCommit), true, FlushNow); err != nil {
		t.Fatal(err)
	}
	next := data(1)
	for _, rebuilt := range []bool{false, true} {
		if rebuilt {
			if err := f.p.Truncate(f.p.Log().EndOffset()); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range []struct {
			name   string
			batch  []byte
			strict bool
		}{
			{"the decision's marker again", marker(1, txn.ControlCommit), true},
			{"an older epoch's marker", marker(0, txn.ControlAbort), false},
		} {
			end := f.p.Log().EndOffset()
			got, err := f.p.AppendMarker(m.batch, m.strict, FlushNow)
			if err != nil || got != end || f.p.Log().EndOffset() != end {
				t.Fatalf("rebuilt=%v: %s: end %d, %v; log end %d -> %d: want it left out", rebuilt, m.name, got, err, end, f.p.Log().EndOffset())
			}
			if first, open := f.p.OpenTransactions()[9]; !open || first != next {
				t.Fatalf("rebuilt=%v: %s closed the next transaction: open %v", rebuilt, m.name, f.p.OpenTransactions())
			}
		}
	}
	if _, err := f.p.AppendMarker(marker(2, txn.ControlAbort), true, FlushNow); err != nil {
		t.Fatal(err)
	}
	if len(f.p.OpenTransactions()) != 0 {
		t.Fatalf("open after its own marker: %v", f.p.OpenTransactions())
	}
	if ab := f.p.AbortedIn(0, f.p.Log().EndOffset()); len(ab) != 1 || ab[0].FirstOffset != next {
		t.Fatalf("aborted %+v, want the transaction from offset %d", ab, next)
	}
}

// TestHighWatermarkFollowsDurableEnd: single node, the high watermark is
// the durable end: an append is invisible until the flusher synced it, a
// lazily flushed one rides with the next pass, and a failover partition
// opens at its log start.
func TestHighWatermarkFollowsDurableEnd(t *testing.T) {
	f := newFixture(t, nil, false)
	if _, err := f.client(t, plainBatch(t, 3)); err != nil {
		t.Fatal(err)
	}
	if hw := f.p.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before the sync, want 0", hw)
	}
	f.flush.SyncAll()
	if hw := f.p.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d after the sync, want 3", hw)
	}
	<-f.flush.kick // the client append's, which no Run loop took
	if _, err := f.p.AppendOwn(plainBatch(t, 1), FlushLazily); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.flush.kick:
		t.Fatal("a lazy append started a pass")
	default:
	}
	f.flush.SyncAll()
	if hw := f.p.HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d after the lazy write's pass, want 4", hw)
	}
	_ = f.p.Close()
	f.open(t, true)
	if hw := f.p.HighWatermark(); hw != 0 {
		t.Fatalf("a partition with an uncommitted tail opened at %d, want its log start 0", hw)
	}
	f.p.Recommit() // the durable policy commits what is durable
	if hw := f.p.HighWatermark(); hw != 4 {
		t.Fatalf("after Recommit %d, want 4", hw)
	}
}

// TestPolicyCapsAndNeverLowers: the policy's value is taken, capped by the
// durable end; the high watermark never goes down except by truncation.
func TestPolicyCapsAndNeverLowers(t *testing.T) {
	pol := &capPolicy{}
	pol.limit.Store(2)
	f := newFixture(t, pol, false)
	for i := 0; i < 5; i++ {
		if _, err := f.client(t, plainBatch(t, 1)); err != nil {
			t.Fatal(err)
		}
	}
	f.flush.SyncAll()
	if hw := f.p.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d, want the policy's 2", hw)
	}
	pol.limit.Store(100)
	f.p.Recommit()
	if hw := f.p.HighWatermark(); hw != 5 {
		t.Fatalf("high watermark %d, want the durable end 5 (policy allows 100)", hw)
	}
	pol.limit.Store(1)
	f.p.Recommit()
	f.p.Follow(0)
	if hw := f.p.HighWatermark(); hw != 5 {
		t.Fatalf("high watermark went down to %d", hw)
	}
	if err := f.p.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if hw := f.p.HighWatermark(); hw != 3 {
		t.Fatalf("after truncating to 3 the high watermark is %d", hw)
	}
}

// TestFollowerHighWatermark: a replica's copies are not flushed by the
// flusher; its high watermark is its leader's, capped by its durable end.
func TestFollowerHighWatermark(t *testing.T) {
	f := newFixture(t, nil, true)
	for off := int64(0); off < 4; off++ {
		if err := f.p.AppendReplica(encode(t, recordbatch.BatchOptions{ProducerID: -1, BaseOffset: off}, 1)); err != nil {
			t.Fatal(err)
		}
	}
	f.flush.SyncAll()
	if got := f.p.Log().DurableEnd(); got != 0 {
		t.Fatalf("the flusher synced a replica's copy (durable end %d)", got)
	}
	f.p.Follow(3)
	if hw := f.p.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d above the durable end 0", hw)
	}
	if _, err := f.p.Log().Sync(); err != nil {
		t.Fatal(err)
	}
	f.p.Follow(3)
	if hw := f.p.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d, want the leader's 3", hw)
	}
}

// TestTruncateRebuildsProducerState: after a truncation the producer state
// is the log's: a sequence cut off is accepted again.
func TestTruncateRebuildsProducerState(t *testing.T) {
	f := newFixture(t, nil, false)
	for seq := int32(0); seq < 3; seq++ {
		if _, err := f.client(t, idemBatch(t, 4, seq)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.p.Truncate(1); err != nil {
		t.Fatal(err)
	}
	a, err := f.client(t, idemBatch(t, 4, 1))
	if err != nil || a.Duplicate || a.Base != 1 {
		t.Fatalf("sequence 1 after truncating it away: %+v, %v", a, err)
	}
}

// TestStateSurvivesReopen: the snapshot written at a clean stop and the
// log scanned at open give the same producer and transaction state.
func TestStateSurvivesReopen(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		f := newFixture(t, nil, false)
		if _, err := f.client(t, idemBatch(t, 4, 0)); err != nil {
			t.Fatal(err)
		}
		tb := encode(t, recordbatch.BatchOptions{ProducerID: 5, BaseSequence: 0, Transactional: true}, 1)
		if _, err := f.p.AppendClient([][]byte{tb}, header(t, tb), nil, FlushNow); err != nil {
			t.Fatal(err)
		}
		if snapshot {
			f.p.SaveState()
		}
		_ = f.p.Close()
		f.open(t, false)
		a, err := f.client(t, idemBatch(t, 4, 0))
		if err != nil || !a.Duplicate || a.Base != 0 {
			t.Fatalf("snapshot=%v: retry after reopening: %+v, %v", snapshot, a, err)
		}
		if open := f.p.OpenTransactions(); open[5] != 1 {
			t.Fatalf("snapshot=%v: open transactions %v, want producer 5 from offset 1", snapshot, open)
		}
		if lso := f.p.LSO(f.p.HighWatermark()); lso != 1 {
			t.Fatalf("snapshot=%v: LSO %d, want 1", snapshot, lso)
		}
		marker := encodeMarker(t, 5, txn.ControlCommit)
		if _, err := f.p.AppendOwn(marker, FlushNow); err != nil {
			t.Fatal(err)
		}
		if open := f.p.OpenTransactions(); len(open) != 0 {
			t.Fatalf("snapshot=%v: open after the commit marker: %v", snapshot, open)
		}
	}
}

func encodeMarker(t *testing.T, pid int64, typ int16) []byte {
	return encodeMarkerAt(t, pid, typ, 0)
}

func encodeMarkerAt(t *testing.T, pid int64, typ int16, coordinatorEpoch int32) []byte {
	t.Helper()
	b, err := recordbatch.Encode(recordbatch.BatchOptions{ProducerID: pid, BaseSequence: -1, Transactional: true, Control: true},
		[]recordbatch.Record{{Key: txn.ControlKey(typ), Value: txn.ControlValue(coordinatorEpoch)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWaitCommitted: a wait returns once the flusher's pass covers it,
// ends at its context with ErrNotCommitted, at once with ErrHeld while the
// policy holds the high watermark, and with ErrStoppedLeading as soon as
// a wake-up finds the replica no longer leading.
func TestWaitCommitted(t *testing.T) {
	pol := &capPolicy{}
	pol.limit.Store(1 << 40)
	f := newFixture(t, pol, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.flush.Run(ctx)

	end, err := f.p.AppendOwn(plainBatch(t, 2), FlushNow)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := f.p.WaitCommitted(wctx, end); err != nil {
		t.Fatalf("wait for a flushed append: %v", err)
	}
	wcancel()

	// Nothing commits past 2: the deadline ends the wait.
	pol.limit.Store(2)
	end, err = f.p.AppendOwn(plainBatch(t, 1), FlushNow)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel = context.WithTimeout(ctx, 50*time.Millisecond)
	if err := f.p.WaitCommitted(wctx, end); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("wait past its deadline: %v, want ErrNotCommitted", err)
	}
	wcancel()

	pol.held.Store(true)
	start := time.Now()
	if err := f.p.WaitCommitted(ctx, end); !errors.Is(err, ErrHeld) {
		t.Fatalf("wait while held: %v, want ErrHeld", err)
	}
	pol.held.Store(false)

	done := make(chan error, 1)
	go func() { done <- f.p.WaitCommitted(ctx, end) }()
	time.Sleep(20 * time.Millisecond)
	f.fence.notLead.Store(true)
	f.p.Wake() // what a step-down does
	select {
	case err := <-done:
		if !errors.Is(err, ErrStoppedLeading) {
			t.Fatalf("wait after stepping down: %v, want ErrStoppedLeading", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a wait did not end when the replica stopped leading")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("held and stopped-leading waits took their time")
	}
	f.fence.notLead.Store(false)

	// Covered, also with an ended context: success.
	ended, endedCancel := context.WithCancel(ctx)
	endedCancel()
	if err := f.p.WaitCommitted(ended, 2); err != nil {
		t.Fatalf("a covered offset with an ended context: %v", err)
	}
	// An ended context below the high watermark never answers success.
	if err := f.p.WaitCommitted(ended, end); err == nil {
		t.Fatal("an uncovered offset answered success")
	}
}

// TestWaitAllAcks: an acks=all wait under an Acker policy also waits for
// the Acker, woken by Wake; a plain wait does not.
func TestWaitAllAcks(t *testing.T) {
	pol := &capPolicy{}
	pol.limit.Store(1 << 40)
	f := newFixture(t, pol, false)
	end, err := f.p.AppendOwn(plainBatch(t, 1), FlushNow)
	if err != nil {
		t.Fatal(err)
	}
	f.flush.SyncAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := WaitAll(ctx, []Wait{{P: f.p, Offset: end}})
	if errs[0] != nil {
		t.Fatalf("plain wait: %v", errs[0])
	}
	done := make(chan error, 1)
	go func() { done <- WaitAll(ctx, []Wait{{P: f.p, Offset: end, Acks: true}})[0] }()
	select {
	case err := <-done:
		t.Fatalf("acks=all wait ended before the followers acknowledged: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	pol.acked.Store(true)
	f.p.Wake()
	if err := <-done; err != nil {
		t.Fatalf("acks=all wait: %v", err)
	}
}

// TestWaitersWokenOnHighWatermark: a long poll registered with WaitUntil
// is woken when a sync raises the high watermark, not before.
func TestWaitersWokenOnHighWatermark(t *testing.T) {
	f := newFixture(t, nil, false)
	if _, err := f.client(t, plainBatch(t, 1)); err != nil {
		t.Fatal(err)
	}
	got := make(chan bool, 1)
	go func() {
		got <- WaitUntil(context.Background(), []*Partition{f.p}, 10*time.Second, func() bool { return f.p.HighWatermark() >= 1 })
	}()
	time.Sleep(20 * time.Millisecond)
	f.flush.SyncAll()
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("long poll ended without its condition")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll not woken by the high watermark")
	}
	if WaitUntil(context.Background(), []*Partition{f.p}, 20*time.Millisecond, func() bool { return false }) {
		t.Fatal("WaitUntil reported success at its timeout")
	}
}

// TestManyDirtyPartitionsShareAVolumeSync: a pass over more dirty
// partitions than volumeSyncAt syncs the volume once for all of them and
// publishes each one's high watermark; a failed volume sync is fatal.
func TestManyDirtyPartitionsShareAVolumeSync(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("data"); err != nil {
		t.Fatal(err)
	}
	vol, err := storage.OpenVolume(m, "data")
	if err != nil {
		t.Fatal(err)
	}
	var fatal error
	flush := NewFlusher(FlusherConfig{Fatal: func(err error) { fatal = err }, Volume: vol})
	var parts []*Partition
	for i := range volumeSyncAt + 2 {
		l, err := storage.Open(fmt.Sprintf("data/t-%d", i), storage.Options{FS: m, RetentionMs: -1, RetentionBytes: -1, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(Config{Topic: "t", Index: int32(i), Log: l, Fence: &testFence{}, Flusher: flush, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		parts = append(parts, p)
	}
	syncs, logSyncs := 0, 0
	m.SetHook(func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpSync && name == "data":
			syncs++
		case op == vfs.OpSync && strings.HasSuffix(name, ".log"):
			logSyncs++
		}
		return nil
	})
	for _, p := range parts {
		if _, err := p.AppendClient([][]byte{plainBatch(t, 3)}, header(t, plainBatch(t, 3)), nil, FlushNow); err != nil {
			t.Fatal(err)
		}
	}
	flush.SyncAll()
	if fatal != nil || syncs != 1 || logSyncs != 0 {
		t.Fatalf("the pass: %d volume syncs, %d fsyncs of segments, fatal %v; want one volume sync", syncs, logSyncs, fatal)
	}
	for _, p := range parts {
		if hw := p.HighWatermark(); hw != 3 {
			t.Fatalf("partition %d: high watermark %d, want 3", p.Index, hw)
		}
	}
	m.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == "data" {
			return vfs.ErrInjected
		}
		return nil
	})
	for _, p := range parts {
		if _, err := p.AppendClient([][]byte{plainBatch(t, 1)}, header(t, plainBatch(t, 1)), nil, FlushNow); err != nil {
			t.Fatal(err)
		}
	}
	flush.SyncAll()
	if !errors.Is(fatal, vfs.ErrInjected) {
		t.Fatalf("a failed volume sync reached Fatal as %v", fatal)
	}
	for _, p := range parts {
		if hw := p.HighWatermark(); hw != 3 {
			t.Fatalf("partition %d: high watermark %d after a failed sync, want 3", p.Index, hw)
		}
	}
}

// TestRequestAppendsStartOnePass: appends marked FlushWithRequest start no
// pass; the caller's Kick starts one, and that pass covers every
// partition the request wrote. (FlushNow starts a pass at each append.)
func TestRequestAppendsStartOnePass(t *testing.T) {
	fatal := func(err error) { t.Errorf("fatal: %v", err) }
	flush := NewFlusher(FlusherConfig{Fatal: fatal})
	var parts []*Partition
	for i := range 3 {
		p, err := New(Config{Topic: "t", Index: int32(i), Log: mustLog(t, t.TempDir()), Fence: &testFence{},
			Flusher: flush, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		parts = append(parts, p)
	}
	for _, p := range parts {
		if _, err := p.AppendClient([][]byte{plainBatch(t, 2)}, header(t, plainBatch(t, 2)), nil, FlushWithRequest); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(flush.kick); n != 0 {
		t.Fatalf("appends of one request started a pass (%d kicks pending)", n)
	}
	flush.Kick()
	if n := len(flush.kick); n != 1 {
		t.Fatalf("Kick left %d kicks pending, want 1", n)
	}
	<-flush.kick // the pass Run would start:
	flush.SyncAll()
	for _, p := range parts {
		if hw := p.HighWatermark(); hw != 2 {
			t.Fatalf("partition %d: high watermark %d after the request's pass, want 2", p.Index, hw)
		}
	}
	if _, err := parts[0].AppendClient([][]byte{plainBatch(t, 1)}, header(t, plainBatch(t, 1)), nil, FlushNow); err != nil {
		t.Fatal(err)
	}
	if n := len(flush.kick); n != 1 {
		t.Fatalf("a FlushNow append left %d kicks pending, want 1", n)
	}
}
