package meta

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestRandomLog drives a State with a few thousand entries per seed: the
// output of the leader's commands (some applied at once, some held and
// committed later, after other entries, as racing proposals do) and raw
// records with fields drawn from small pools, most of them invalid. After
// every entry it checks that:
//
//   - a command's entry applies where it was computed;
//   - a refused entry is an *Error with a Kafka code and left the state
//     exactly as it was;
//   - the invariants of invariants_test hold (owners known, epochs never
//     decrease, one move per partition, producer-id blocks contiguous and
//     never reused, Snapshot/Restore round-trips);
//
// and at the end that replaying the encoded log on a fresh State gives the
// same refusals and the same state.
func TestRandomLog(t *testing.T) {
	seeds, steps := 8, 4000
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRandomLog(t, seed, steps) })
	}
}

var (
	randGroups = []string{"g1", "g2", "g3", "g4"}
	randTopics = []string{"t0", "t1", "t2", "t3"}
)

type randomLog struct {
	t   *testing.T
	rng *rand.Rand
	st  *State
	now int64

	held    [][]Record
	entries [][]byte // every entry given to ApplyBatch, encoded
	refused []bool
	kinds   map[string]int // applied records by type, and move steps
}

func runRandomLog(t *testing.T, seed uint64, steps int) {
	l := &randomLog{t: t, rng: rand.New(rand.NewPCG(seed, 516)), st: New(), kinds: map[string]int{}}
	inv := newInvariants()
	inv.jsonEvery = 10
	applied, refused := 0, 0
	for range steps {
		l.now += l.rng.Int64N(3000)
		switch x := l.rng.IntN(10); {
		case x < 5:
			recs, err := l.command()
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Code == nil {
					t.Fatalf("command refused without a Kafka code: %v", err)
				}
				continue
			}
			if l.rng.IntN(4) == 0 {
				l.held = append(l.held, recs)
				continue
			}
			if err := l.apply(recs); err != nil {
				t.Fatalf("a command's entry refused where it was computed: %v\n%v", err, recs)
			}
		case x < 7 && len(l.held) > 0:
			i := l.rng.IntN(len(l.held))
			recs := l.held[i]
			l.held = slices.Delete(l.held, i, i+1)
			l.apply(recs)
		default:
			recs := []Record{l.raw()}
			for l.rng.IntN(5) == 0 {
				recs = append(recs, l.raw())
			}
			l.apply(recs)
		}
		inv.check(t, l.st)
	}
	for _, r := range l.refused {
		if r {
			refused++
		} else {
			applied++
		}
	}
	// A log that applies nothing, or refuses nothing, tests little.
	if applied < steps/10 || refused < steps/10 {
		t.Fatalf("%d entries applied, %d refused", applied, refused)
	}
	// Every kind of record, and every move step, must have applied.
	for _, k := range []string{"RegisterBrokerRecord", "TopicRecord", "RemoveTopicRecord", "PartitionRecord", "ConfigRecord", "ProducerIdsRecord", "GroupStateRecord", "move:copying", "move:cut-over", "move:none"} {
		if l.kinds[k] == 0 {
			t.Fatalf("no %s applied: %v", k, l.kinds)
		}
	}

	t.Logf("%d applied, %d refused: %v", applied, refused, l.kinds)

	replay := New()
	for i, b := range l.entries {
		recs, err := DecodeBatch(b)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if err := replay.ApplyBatch(recs); (err != nil) != l.refused[i] {
			t.Fatalf("entry %d: refused %v on replay, %v the first time (%v)", i, err != nil, l.refused[i], err)
		}
	}
	if !reflect.DeepEqual(replay, l.st) {
		t.Fatal("replaying the log gave another state")
	}
}

// apply applies one entry through its encoding and checks that a refusal
// changed nothing.
func (l *randomLog) apply(recs []Record) error {
	t := l.t
	b, err := EncodeBatch(recs)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	before := l.st.clone()
	err = l.st.ApplyBatch(dec)
	l.entries = append(l.entries, b)
	l.refused = append(l.refused, err != nil)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Code == nil {
			t.Fatalf("refused without a Kafka code: %v", err)
		}
		if !reflect.DeepEqual(before, l.st) {
			t.Fatalf("refused entry changed the state: %v\n%v", err, recs)
		}
		return err
	}
	for _, r := range recs {
		l.kinds[string(r.Type())]++
		if c, ok := r.(PartitionChangeRecord); ok {
			l.kinds["move:"+string(c.Move)]++
		}
	}
	return nil
}

func (l *randomLog) pick(from []string) string { return from[l.rng.IntN(len(from))] }

func (l *randomLog) id() UUID {
	if l.rng.IntN(20) == 0 {
		return UUID{}
	}
	return testID(byte(1 + l.rng.IntN(8)))
}

// existing returns a topic's name, id and partition count, mostly of one
// that exists.
func (l *randomLog) existing() (string, UUID, int32) {
	if ts := l.st.Topics(); len(ts) > 0 && l.rng.IntN(5) > 0 {
		tp := ts[l.rng.IntN(len(ts))]
		return tp.Name, tp.ID, int32(len(tp.Partitions))
	}
	return l.pick(randTopics), l.id(), 0
}

func (l *randomLog) part(n int32) int32 {
	if n == 0 || l.rng.IntN(10) == 0 {
		return l.rng.Int32N(4) - 1
	}
	return l.rng.Int32N(n)
}

func (l *randomLog) isr() []int32 {
	var isr []int32
	for b := range int32(6) {
		if l.rng.IntN(2) == 0 {
			isr = append(isr, b)
		}
	}
	return isr
}

// term is near the group's current term, now and then near the int32
// limit to reach the overflow checks.
func (l *randomLog) term(group string) int32 {
	if l.rng.IntN(50) == 0 {
		return math.MaxInt32 - l.rng.Int32N(3)
	}
	g, _ := l.st.Group(group)
	return max(0, g.Term+l.rng.Int32N(4)-1)
}

// command runs one of the leader's commands with plausible arguments.
func (l *randomLog) command() ([]Record, error) {
	one := func(r Record, err error) ([]Record, error) { return []Record{r}, err }
	name, _, n := l.existing()
	switch l.rng.IntN(14) {
	case 0, 1:
		r := RegisterBrokerRecord{
			BrokerID:           l.rng.Int32N(6),
			GroupID:            l.pick(randGroups[:3]),
			IncarnationID:      testID(byte(1 + l.rng.IntN(3))),
			ClientAddress:      "c",
			ReplicationAddress: "r",
			LeaseExpiryMs:      l.now + l.rng.Int64N(20000),
		}
		return one(l.st.RegisterBroker(r, l.now))
	case 2:
		var cfg map[string]string
		if l.rng.IntN(2) == 0 {
			cfg = map[string]string{"retention.ms": "1000", "k": fmt.Sprint(l.rng.IntN(3))}
		}
		p := Placement{RoundRobin: l.rng.IntN(2) == 0}
		parts := 1 + l.rng.Int32N(4)
		if l.rng.IntN(4) == 0 {
			for range parts {
				p.Groups = append(p.Groups, l.pick(randGroups))
			}
		}
		return l.st.CreateTopic(l.id(), l.pick(randTopics), parts, cfg, p, l.now)
	case 3:
		return l.st.CreatePartitions(name, n+l.rng.Int32N(3), Placement{}, l.now)
	case 4:
		if l.rng.IntN(3) > 0 { // delete less often than create
			return one(l.st.StartMove(name, l.part(n), l.pick(randGroups)))
		}
		return one(l.st.DeleteTopic(name))
	case 5:
		typ, res := ResourceTopic, name
		if l.rng.IntN(3) == 0 {
			typ, res = ResourceBroker, l.pick([]string{"", "1", "2"})
		}
		return one(l.st.SetConfig(typ, res, l.pick([]string{"a", "b"}), l.pick([]string{"", "1", "2"})))
	case 6:
		return one(l.st.AllocateProducerIDs(l.rng.Int32N(6)))
	case 7, 8:
		return one(l.st.StartMove(name, l.part(n), l.pick(randGroups)))
	case 9, 12, 13:
		p := l.part(n)
		fence := int32(0)
		seq := int64(0)
		if id, ok := l.st.names[name]; ok {
			if pp, ok := l.st.Partition(id, p); ok {
				fence = max(0, pp.LeaderEpoch+l.rng.Int32N(4)-1)
				// Now and then a stale move's cut-over, which must be
				// refused.
				seq = pp.MoveSeq - int64(l.rng.IntN(4)/3)
			}
		}
		return one(l.st.CutOver(name, p, seq, fence, l.rng.Int64N(1000)))
	case 10:
		if l.rng.IntN(2) == 0 {
			return one(l.st.FinishMove(name, l.part(n)))
		}
		return one(l.st.CancelMove(name, l.part(n)))
	default:
		// A group leader publishing its state: a valid one, as far as
		// its own group's Raft goes.
		g := l.pick(randGroups)
		isr := append(l.isr(), l.rng.Int32N(6))
		slices.Sort(isr)
		isr = slices.Compact(isr)
		r := GroupStateRecord{GroupID: g, Leader: isr[l.rng.IntN(len(isr))], Term: l.term(g), ISR: isr}
		return one(r, l.st.Check(r))
	}
}

// raw returns a record with fields from small pools, valid or not.
func (l *randomLog) raw() Record {
	rng := l.rng
	name, id, n := l.existing()
	groups := append(slices.Clone(randGroups), "g9", "", "bad/name")
	opt := func(s string) string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return s
	}
	switch rng.IntN(8) {
	case 0:
		return RegisterBrokerRecord{
			BrokerID: rng.Int32N(8) - 1, GroupID: l.pick(groups), IncarnationID: testID(byte(rng.IntN(4))),
			ClientAddress: opt("c"), ReplicationAddress: "r", LeaseExpiryMs: l.now + rng.Int64N(20000) - 2000,
		}
	case 1:
		return TopicRecord{Name: l.pick(append(slices.Clone(randTopics), "", "bad name")), TopicID: l.id()}
	case 2:
		// Mostly a stale or mismatched delete: a live topic's lifetime
		// is what lets its moves get somewhere.
		if rng.IntN(4) > 0 {
			name, id = l.pick(randTopics), l.id()
		}
		return RemoveTopicRecord{Name: name, TopicID: id}
	case 3:
		base := rng.Int32N(10) - 2
		if rng.IntN(30) == 0 {
			base = math.MaxInt32 - rng.Int32N(3)
		}
		return PartitionRecord{TopicID: id, Partition: n + rng.Int32N(3) - 1, Owner: l.pick(groups), EpochBase: base}
	case 4:
		r := PartitionChangeRecord{
			TopicID: id, Partition: l.part(n),
			Owner: l.pick(groups), EpochBase: rng.Int32N(30) - 10,
			Move:   MoveState(l.pick([]string{"none", "copying", "cut-over", "", "bad"})),
			Source: opt(l.pick(groups)), Target: opt(l.pick(groups)),
			FenceEpoch: rng.Int32N(30) - 1, FenceOffset: rng.Int64N(100) - 1,
		}
		// Now and then, a step that fits the partition's move but with
		// a base drawn at random: the epoch rule decides.
		if p, ok := l.st.Partition(id, r.Partition); ok && rng.IntN(2) == 0 {
			r.Owner, r.EpochBase, r.Source, r.Target, r.FenceOffset = p.Owner, p.EpochBase, p.Source, p.Target, 0
			switch p.Move {
			case MoveNone:
				r.Move, r.Source, r.Target, r.FenceEpoch = MoveCopying, p.Owner, l.pick(randGroups), 0
			case MoveCopying:
				r.Move, r.Owner, r.EpochBase = MoveCutOver, p.Target, p.LeaderEpoch-l.term(p.Target)+rng.Int32N(5)-2
				r.FenceEpoch = max(0, p.LeaderEpoch+rng.Int32N(3)-1)
			case MoveCutOver:
				r.Move, r.Source, r.Target, r.FenceEpoch = MoveNone, "", "", 0
			}
		}
		return r
	case 5:
		return ConfigRecord{
			ResourceType: ResourceType(l.pick([]string{"topic", "broker", "user"})),
			ResourceName: l.pick([]string{name, "1", "", "x"}),
			Name:         l.pick([]string{"a", "b", ""}),
			Value:        l.pick([]string{"", "1", "2"}),
		}
	case 6:
		next := l.st.NextProducerID() + ProducerIdBlockSize*(rng.Int64N(4)-1)
		return ProducerIdsRecord{BrokerID: rng.Int32N(4) - 1, NextProducerID: next}
	default:
		g := l.pick(groups)
		isr := l.isr()
		leader := rng.Int32N(7) - 1
		if len(isr) > 0 && rng.IntN(2) == 0 {
			leader = isr[rng.IntN(len(isr))]
		}
		return GroupStateRecord{GroupID: g, Leader: leader, Term: l.term(g), ISR: isr}
	}
}
