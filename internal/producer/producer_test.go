package producer

import (
	"math/rand"
	"testing"
)

func TestSequenceRules(t *testing.T) {
	s := New()
	b := func(seq, n int32) BatchInfo {
		return BatchInfo{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq, Count: n}
	}
	if v := s.Check(b(5, 1)); v.Code != 0 || v.Duplicate {
		t.Fatalf("unknown producer at seq 5 (accepted since KIP-360): %+v", v)
	}
	if v := s.Check(b(0, 3)); v.Code != 0 || v.Duplicate {
		t.Fatalf("first batch: %+v", v)
	}
	s.Record(b(0, 3), 100)
	if v := s.Check(b(0, 3)); !v.Duplicate || v.BaseOffset != 100 {
		t.Fatalf("retry of first batch: %+v", v)
	}
	if v := s.Check(b(4, 1)); v.Code != ErrOutOfOrderSequence {
		t.Fatalf("gap: %+v", v)
	}
	if v := s.Check(b(3, 2)); v.Code != 0 || v.Duplicate {
		t.Fatalf("next batch: %+v", v)
	}
	s.Record(b(3, 2), 103)
	// A newer epoch restarts at 0; the old epoch is fenced.
	nb := BatchInfo{ProducerID: 7, ProducerEpoch: 1, BaseSequence: 0, Count: 1}
	if v := s.Check(nb); v.Code != 0 {
		t.Fatalf("bumped epoch: %+v", v)
	}
	s.Record(nb, 105)
	if v := s.Check(b(5, 1)); v.Code != ErrInvalidProducerEpoch {
		t.Fatalf("old epoch after bump: %+v", v)
	}
	if v := s.Check(BatchInfo{ProducerID: 7, ProducerEpoch: 2, BaseSequence: 4, Count: 1}); v.Code != ErrOutOfOrderSequence {
		t.Fatalf("new epoch not at 0: %+v", v)
	}
}

func TestMarkerEpochFencesOlderBatches(t *testing.T) {
	s := New()
	s.Record(BatchInfo{ProducerID: 4, ProducerEpoch: 1, BaseSequence: 0, Count: 2}, 10)
	s.ObserveEpoch(4, 2, 0) // an abort marker written with a bumped epoch
	if v := s.Check(BatchInfo{ProducerID: 4, ProducerEpoch: 1, BaseSequence: 2, Count: 1}); v.Code != ErrInvalidProducerEpoch {
		t.Fatalf("a delayed batch of the fenced epoch: %+v", v)
	}
	if v := s.Check(BatchInfo{ProducerID: 4, ProducerEpoch: 2, BaseSequence: 0, Count: 1}); v.Code != 0 {
		t.Fatalf("the new epoch starting at 0: %+v", v)
	}
	s.ObserveEpoch(4, 2, 0) // a repeated marker changes nothing
	s.ObserveEpoch(9, 0, 0) // a marker for an unknown producer
	if v := s.Check(BatchInfo{ProducerID: 9, ProducerEpoch: 0, BaseSequence: 0, Count: 1}); v.Code != 0 {
		t.Fatalf("after a marker for an unknown producer: %+v", v)
	}
}

func TestSequenceWraps(t *testing.T) {
	s := New()
	s.Record(BatchInfo{ProducerID: 1, BaseSequence: 0, Count: 1}, 0)
	s.producers[1].Batches[0].LastSeq = 1<<31 - 2
	b := BatchInfo{ProducerID: 1, BaseSequence: 1<<31 - 1, Count: 3}
	if v := s.Check(b); v.Code != 0 {
		t.Fatalf("batch across the wrap: %+v", v)
	}
	s.Record(b, 10)
	if v := s.Check(BatchInfo{ProducerID: 1, BaseSequence: 2, Count: 1}); v.Code != 0 {
		t.Fatalf("after the wrap: %+v", v)
	}
}

// TestRandomRetries replays a random stream of sends and retries (the five
// in-flight window of a real client) and checks that every batch is
// appended exactly once and each retry finds its original offset.
func TestRandomRetries(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		rng := rand.New(rand.NewSource(seed))
		s := New()
		var sent []BatchInfo
		offsets := map[int32]int64{}
		next, seq := int64(0), int32(0)
		for step := 0; step < 500; step++ {
			if len(sent) > 0 && rng.Intn(3) == 0 {
				// Retry one of the last five.
				i := len(sent) - 1 - rng.Intn(min(5, len(sent)))
				v := s.Check(sent[i])
				if !v.Duplicate || v.BaseOffset != offsets[sent[i].BaseSequence] {
					t.Fatalf("seed %d: retry of seq %d: %+v want offset %d", seed, sent[i].BaseSequence, v, offsets[sent[i].BaseSequence])
				}
				continue
			}
			b := BatchInfo{ProducerID: 3, BaseSequence: seq, Count: int32(1 + rng.Intn(4))}
			v := s.Check(b)
			if v.Code != 0 || v.Duplicate {
				t.Fatalf("seed %d: fresh batch refused: %+v", seed, v)
			}
			s.Record(b, next)
			offsets[b.BaseSequence] = next
			next += int64(b.Count)
			seq += b.Count
			sent = append(sent, b)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := New()
	s.Record(BatchInfo{ProducerID: 9, ProducerEpoch: 2, BaseSequence: 0, Count: 2}, 40)
	s.Record(BatchInfo{ProducerID: 10, ProducerEpoch: 0, BaseSequence: 0, Count: 1}, 42)
	got, off, err := Load(s.Snapshot(43), 0)
	if err != nil || off != 43 || got.Len() != 2 {
		t.Fatalf("load: %v %d %d", err, off, got.Len())
	}
	if v := got.Check(BatchInfo{ProducerID: 9, ProducerEpoch: 2, BaseSequence: 0, Count: 2}); !v.Duplicate || v.BaseOffset != 40 {
		t.Fatalf("duplicate after snapshot: %+v", v)
	}
	if _, _, err := Load([]byte("{"), 0); err == nil {
		t.Fatal("damaged snapshot accepted")
	}
}

// TestExpireIdle checks producer.id.expiration.ms: a producer is forgotten
// once neither a batch nor a marker came from it for the expiration time,
// unless the caller says it is busy (an open transaction); the time
// survives a snapshot, and a snapshot without times counts as "now".
func TestExpireIdle(t *testing.T) {
	const day = 24 * 3600 * 1000
	s := New()
	at := func(id int64, epoch int16, seq, n int32, ms int64) BatchInfo {
		return BatchInfo{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, Count: n, AppendMs: ms}
	}
	s.Record(at(1, 0, 0, 1, 1000), 0)     // idle since 1000
	s.Record(at(2, 0, 0, 1, 1000), 1)     // writes again later
	s.Record(at(2, 0, 1, 1, 5000), 2)     //
	s.Record(at(3, 0, 0, 1, 1000), 3)     // a marker later
	s.ObserveEpoch(3, 1, 6000)            //
	s.Record(at(4, 0, 0, 1, 1000), 4)     // busy: an open transaction
	s.Record(at(5, 0, 0, 1, 1000+day), 5) // recent

	if got := s.ExpireIdle(1000+day-1, day, nil); len(got) != 0 {
		t.Fatalf("a millisecond early: expired %v", got)
	}
	snap := s.Snapshot(6)
	busy := func(id int64) bool { return id == 4 }
	got := s.ExpireIdle(1000+day, day, busy)
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("at 1 day: expired %v, want [1]", got)
	}
	if got := s.ExpireIdle(6000+day, day, busy); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("later: expired %v, want [2 3]", got)
	}
	if s.Len() != 2 {
		t.Fatalf("%d producers left, want 2 (the busy one and the recent one)", s.Len())
	}
	// A forgotten producer goes on at its sequence (KIP-360); a retry of
	// its last batch is no longer recognised.
	if v := s.Check(at(1, 0, 1, 1, 0)); v.Code != 0 || v.Duplicate {
		t.Fatalf("expired producer continuing its sequence: %+v", v)
	}
	if v := s.Check(at(1, 0, 0, 1, 0)); v.Code != 0 || v.Duplicate {
		t.Fatalf("expired producer retrying its last batch: %+v", v)
	}

	// The snapshot taken before keeps the times.
	loaded, _, err := Load(snap, 9*day)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.ExpireIdle(1000+day, day, busy); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after a snapshot: expired %v, want [1]", got)
	}
	// A snapshot without times (older format) counts every producer as
	// having written when it is loaded.
	old := []byte(`{"Offset":6,"Producers":[{"ID":7,"Epoch":0,"Batches":[{"FirstSeq":0,"LastSeq":0,"BaseOffset":0}]}]}`)
	loaded, _, err = Load(old, 9*day)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.ExpireIdle(10*day-1, day, nil); len(got) != 0 {
		t.Fatalf("old snapshot, before a day since loading: expired %v", got)
	}
	if got := loaded.ExpireIdle(10*day, day, nil); len(got) != 1 {
		t.Fatalf("old snapshot, a day after loading: expired %v", got)
	}
}
