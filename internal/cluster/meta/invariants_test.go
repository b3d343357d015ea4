package meta

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

type tpKey struct {
	id UUID
	p  int32
}

// invariants follows one State through a log and checks, after every
// step, what must hold whatever the records were:
//
//   - every partition's owner, and a move's groups, are known groups, and
//     the move fields are a state the move state machine can reach;
//   - the topic-name index and the topics agree;
//   - a partition's exposed epoch never decreases while its topic lives;
//   - at most one move per partition, and Moves lists exactly them;
//   - the next producer id never decreases, stays on a block boundary,
//     and moves by whole blocks, so no block is handed out twice;
//   - Restore(Snapshot) gives an equal State, also through JSON.
type invariants struct {
	epochs  map[tpKey]int32
	nextPID int64
	blocks  map[int64]bool
	// jsonEvery > 1 takes the snapshot through JSON on every jsonEvery-th
	// check only (it is the slow part of a long random log).
	jsonEvery, checks int
}

func newInvariants() *invariants {
	return &invariants{epochs: map[tpKey]int32{}, blocks: map[int64]bool{}}
}

func (inv *invariants) check(t testing.TB, s *State) {
	t.Helper()
	if len(s.names) != len(s.topics) {
		t.Fatalf("%d names for %d topics", len(s.names), len(s.topics))
	}
	moves := 0
	seen := map[tpKey]bool{}
	for id, tp := range s.topics {
		if tp.id != id || s.names[tp.name] != id {
			t.Fatalf("topic %q: id %s, indexed as %s", tp.name, id, s.names[tp.name])
		}
		for i, p := range tp.parts {
			if err := s.checkPartitionState(p); err != nil {
				t.Fatalf("%s/%d: %v", tp.name, i, err)
			}
			if p.Move != MoveNone {
				moves++
			}
			k := tpKey{id, int32(i)}
			seen[k] = true
			e := s.leaderEpoch(p)
			if prev, ok := inv.epochs[k]; ok && e < prev {
				t.Fatalf("%s/%d: epoch went from %d to %d", tp.name, i, prev, e)
			}
			inv.epochs[k] = e
		}
	}
	for k := range inv.epochs {
		if !seen[k] {
			delete(inv.epochs, k) // the topic was deleted
		}
	}
	got := s.Moves()
	if len(got) != moves {
		t.Fatalf("Moves lists %d moves, the partitions hold %d", len(got), moves)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].TopicID == got[i].TopicID && got[i-1].Partition == got[i].Partition {
			t.Fatalf("two moves of %s/%d", got[i].Topic, got[i].Partition)
		}
	}

	next := s.NextProducerID()
	if next < inv.nextPID || next%ProducerIdBlockSize != 0 || (next-inv.nextPID)%ProducerIdBlockSize != 0 {
		t.Fatalf("next producer id went from %d to %d", inv.nextPID, next)
	}
	for start := inv.nextPID; start < next; start += ProducerIdBlockSize {
		if inv.blocks[start] {
			t.Fatalf("producer id block %d handed out twice", start)
		}
		inv.blocks[start] = true
	}
	inv.nextPID = next

	snap := s.Snapshot()
	r, err := Restore(snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !reflect.DeepEqual(r, s) {
		t.Fatalf("restored state differs:\n%+v\n%+v", r, s)
	}
	inv.checks++
	if inv.jsonEvery > 1 && inv.checks%inv.jsonEvery != 0 {
		return
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	r, err = Restore(back)
	if err != nil {
		t.Fatalf("restore from JSON: %v", err)
	}
	if !reflect.DeepEqual(r, s) {
		t.Fatalf("state restored from JSON differs:\n%s", b)
	}
	if b2, _ := json.Marshal(r.Snapshot()); !slices.Equal(b, b2) {
		t.Fatalf("snapshot JSON not stable:\n%s\n%s", b, b2)
	}
}
