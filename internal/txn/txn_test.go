package txn

import (
	"math"
	"math/rand"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestPartitionLSOAndAbortedIndex(t *testing.T) {
	p := NewPartition()
	p.OnData(1, 10)
	p.OnData(1, 12) // later batch of the same transaction
	p.OnData(2, 11)
	if lso := p.LSO(20); lso != 10 {
		t.Fatalf("LSO %d, want 10 (oldest open transaction)", lso)
	}
	p.OnMarker(1, 0, ControlAbort, 0, 13)
	if lso := p.LSO(20); lso != 11 {
		t.Fatalf("LSO %d, want 11", lso)
	}
	p.OnMarker(2, 0, ControlCommit, 0, 14)
	p.OnMarker(2, 0, ControlCommit, 0, 15) // a repeated marker changes nothing
	if lso := p.LSO(20); lso != 20 {
		t.Fatalf("LSO %d, want the high watermark", lso)
	}
	if a := p.AbortedIn(0, 100); len(a) != 1 || a[0] != (Aborted{1, 10, 13}) {
		t.Fatalf("aborted index %+v", a)
	}
	if a := p.AbortedIn(14, 100); len(a) != 0 {
		t.Fatalf("range after the abort marker: %+v", a)
	}
	q, err := LoadPartition(p.Snapshot())
	if err != nil || len(q.AbortedIn(0, 100)) != 1 || q.LSO(20) != 20 {
		t.Fatalf("snapshot round trip: %v", err)
	}
}

// TestLSOInvariant replays random transactional traffic and checks that
// the LSO is always the smallest first offset of an open transaction, and
// that every aborted range is reported for any overlapping fetch.
func TestLSOInvariant(t *testing.T) {
	for seed := int64(0); seed < 30; seed++ {
		rng := rand.New(rand.NewSource(seed))
		p := NewPartition()
		open := map[int64]int64{}
		var aborted []Aborted
		off := int64(0)
		for step := 0; step < 400; step++ {
			pid := int64(rng.Intn(5))
			if _, ok := open[pid]; ok && rng.Intn(3) == 0 {
				typ := int16(rng.Intn(2))
				p.OnMarker(pid, 0, typ, 0, off)
				if typ == ControlAbort {
					aborted = append(aborted, Aborted{pid, open[pid], off})
				}
				delete(open, pid)
			} else {
				p.OnData(pid, off)
				if _, ok := open[pid]; !ok {
					open[pid] = off
				}
			}
			off++
			want := off
			for _, first := range open {
				want = min(want, first)
			}
			if got := p.LSO(off); got != want {
				t.Fatalf("seed %d step %d: LSO %d want %d", seed, step, got, want)
			}
		}
		from := int64(rng.Intn(int(off)))
		n := 0
		for _, a := range aborted {
			if a.LastOffset >= from && a.FirstOffset < off {
				n++
			}
		}
		if got := len(p.AbortedIn(from, off)); got != n {
			t.Fatalf("seed %d: %d aborted ranges reported from %d, want %d", seed, got, from, n)
		}
	}
}

func TestCoordinatorTransitions(t *testing.T) {
	m := &Metadata{ID: "a", ProducerID: 5, Epoch: 2, TimeoutMs: 1000, State: kmsg.TransactionStateEmpty, Partitions: map[TP]struct{}{}}
	if code := m.CheckProducer(5, 1, true); code != ErrProducerFenced {
		t.Fatalf("old epoch: %d", code)
	}
	if code := m.CheckProducer(6, 2, true); code != ErrInvalidProducerIDMapping {
		t.Fatalf("wrong producer id: %d", code)
	}
	if a, _, code := m.End(true, 0); a != EndFail || code != ErrInvalidTxnState {
		t.Fatalf("commit with nothing open: %v %d", a, code)
	}
	next, code := m.AddPartitions([]TP{{"t", 0}}, 100)
	if code != 0 || next.State != kmsg.TransactionStateOngoing || next.StartMs != 100 {
		t.Fatalf("add partitions: %d %+v", code, next)
	}
	if next.Expired(1000) || !next.Expired(1101) {
		t.Fatal("timeout is measured from the transaction's start")
	}
	a, prepared, _ := next.End(true, 200)
	if a != EndWrite || prepared.State != kmsg.TransactionStatePrepareCommit {
		t.Fatalf("end: %v %+v", a, prepared)
	}
	if _, code := prepared.AddPartitions([]TP{{"t", 1}}, 0); code != ErrConcurrentTransactions {
		t.Fatalf("add during prepare: %d", code)
	}
	done := prepared.Complete(300)
	if done.State != kmsg.TransactionStateCompleteCommit || len(done.Partitions) != 0 {
		t.Fatalf("complete: %+v", done)
	}
	if a, _, _ := done.End(true, 0); a != EndDone {
		t.Fatal("a retried commit after completion must succeed")
	}
	if a, _, code := done.End(false, 0); a != EndFail || code != ErrInvalidTxnState {
		t.Fatal("an abort after a commit must fail")
	}
	id, back, err := Decode(EncodeKey("a"), EncodeValue(prepared))
	if err != nil || id != "a" || back.State != prepared.State || back.Epoch != 2 || len(back.Partitions) != 1 {
		t.Fatalf("encode/decode: %v %+v", err, back)
	}
	if back.ClientTransactionVersion != 0 || back.StrictMarkers() {
		t.Fatalf("a transactions-v1 state decoded as version %d", back.ClientTransactionVersion)
	}
	prepared.ClientTransactionVersion = 2
	if _, back, err = Decode(EncodeKey("a"), EncodeValue(prepared)); err != nil || back.ClientTransactionVersion != 2 || !back.StrictMarkers() {
		t.Fatalf("a transactions-v2 state: %v %+v", err, back)
	}
	back.Epoch = math.MaxInt16 - 2
	if back.StrictMarkers() {
		t.Fatal("markers at the last epochs (the producer id changes instead of the epoch) taken as bumped")
	}
}

// TestLastMarker checks what recovery relies on: the last marker of each
// producer, with its epoch and type, survives a snapshot and is forgotten
// when the log is truncated below it.
func TestLastMarker(t *testing.T) {
	p := NewPartition()
	if _, ok := p.LastMarker(7); ok {
		t.Fatal("a marker before any was written")
	}
	p.OnData(7, 0)
	p.OnMarker(7, 3, ControlCommit, 0, 1)
	p.OnMarker(7, 4, ControlAbort, 0, 2) // no open transaction: still the last marker
	if m, ok := p.LastMarker(7); !ok || m != (Marker{Epoch: 4, Commit: false, Offset: 2}) {
		t.Fatalf("last marker %+v %v", m, ok)
	}
	q, err := LoadPartition(p.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := q.LastMarker(7); !ok || m.Epoch != 4 || m.Commit {
		t.Fatalf("after a snapshot round trip: %+v %v", m, ok)
	}
	if _, err := LoadPartition([]byte(`{"Open":{},"Aborted":[]}`)); err == nil {
		t.Fatal("a snapshot without markers (older version) was accepted")
	}
}

func TestIdle(t *testing.T) {
	const week = 7 * 24 * 3600 * 1000
	for _, c := range []struct {
		state kmsg.TransactionState
		idle  bool
	}{
		{kmsg.TransactionStateEmpty, true},
		{kmsg.TransactionStateCompleteCommit, true},
		{kmsg.TransactionStateCompleteAbort, true},
		{kmsg.TransactionStateOngoing, false},
		{kmsg.TransactionStatePrepareCommit, false},
		{kmsg.TransactionStatePrepareAbort, false},
	} {
		m := &Metadata{State: c.state, UpdateMs: 1000}
		if got := m.Idle(1000+week, week); got != c.idle {
			t.Errorf("%v a week after its last change: idle %v, want %v", c.state, got, c.idle)
		}
		if m.Idle(1000+week-1, week) {
			t.Errorf("%v idle a millisecond early", c.state)
		}
	}
}
