package meta

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMoveProtocolSim is a deterministic simulation of moving a partition
// between replication groups (docs/CLUSTER.md, "Moves as built"), with
// the real metadata state machine deciding every step of the metadata log
// and a model of each group's leader: its term, its durable Raft fence,
// its copy of the partition, and its copy of the metadata, which lags and
// may be older after a failover than before it (another broker's
// observer). Each seed interleaves produces, admin moves and cancels, the
// copier's reads, fence requests and answers (delayed, or lost with the
// leader they were sent to), cut-overs, finishes, the old owner's fence
// lifts and drops, failovers and metadata catch-ups. It checks after every
// step that no two groups acknowledged appends at one leader epoch and
// that a copy is a prefix of its source, and at the end, once every move
// is over and every copy of the metadata current, that the owner's log
// holds every acknowledged record at its offset with its epoch, epochs
// never falling. The group-internal replication (a deposed leader's
// appends are never acknowledged) is raftgroup's, simulated on its own.
func TestMoveProtocolSim(t *testing.T) {
	seeds, steps := 400, 600
	if testing.Short() {
		seeds = 60
	}
	if n, err := strconv.Atoi(os.Getenv("MOONMQ_MOVESIM_SEEDS")); err == nil && n > 0 {
		seeds = n // a longer search: MOONMQ_MOVESIM_SEEDS=20000
	}
	var moves, cuts, acks int
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		s, err := runMoveSim(seed, steps)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		moves, cuts, acks = moves+s.moves, cuts+s.cuts, acks+len(s.acks)
	}
	t.Logf("%d seeds: %d moves started, %d cut over, %d records acknowledged", seeds, moves, cuts, acks)
	if cuts < seeds {
		t.Fatalf("only %d cut-overs in %d seeds: the simulation hardly moves anything", cuts, seeds)
	}
}

// TestMoveProtocolSimCatchesHoles: with any one of the protocol's rules
// against a stale copy of the metadata left out, some seed fails. (The
// fence handler's own guard is defense in depth: with the copier's guard
// no stale fence request is sent, and a deposed leader refuses one sent
// before its group failed over.)
func TestMoveProtocolSimCatchesHoles(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 1000
	}
	for _, rule := range []string{"floor", "take-in", "copier-guard"} {
		found := 0
		for seed := uint64(1); seed <= uint64(seeds) && found == 0; seed++ {
			if _, err := runMoveSimWithout(seed, 600, rule); err != nil {
				found = int(seed)
			}
		}
		if found == 0 {
			t.Errorf("without the %s rule, seeds 1-%d all pass", rule, seeds)
			continue
		}
		t.Logf("without the %s rule, seed %d fails", rule, found)
	}
}

const simTopic = "t"

// simTraceLines is how much of a failing seed's trace is printed.
var simTraceLines = 40

type simEntry struct {
	epoch int32
	id    int
}

// simGroup is one replication group's current leader, as the move
// protocol sees it.
type simGroup struct {
	name  string
	id    int32 // its leader's broker id (one per group in the model)
	term  int32
	view  int // index into moveSim.hist: the leader's copy of the metadata
	fence int64
	// fenced: the group's Raft log fences the partition, for move fence.
	fenced bool
	// floor is the move number the lift of the last fence was based on
	// (in the group's Raft log too): a leader whose copy of the metadata
	// is older does not serve the partition.
	floor int64
	log   []simEntry
	// fenceAns is the target copier's answer from the source's fence
	// (in the copier's memory: lost when this group fails over).
	fenceAns *simFenceAnswer
}

type simFenceAnswer struct {
	moveSeq int64
	epoch   int32
	offset  int
}

// simFenceRequest is a fence request in flight to the source's leader of
// term term.
type simFenceRequest struct {
	from, to string
	term     int32
	moveSeq  int64
}

type simAck struct {
	offset int
	entry  simEntry
	group  string
}

type moveSim struct {
	// without names one rule of the protocol the run leaves out, to
	// show the simulation finds the hole it closes ("" for none).
	without string
	rng     *rand.Rand
	st      *State
	hist    []*State // the state after each applied entry
	groups  map[string]*simGroup
	names   []string
	now     int64

	inflight    []simFenceRequest
	acks        []simAck
	epochOwner  map[int32]string
	nextID      int
	trace       []string
	moves, cuts int
}

func runMoveSim(seed uint64, steps int) (*moveSim, error) { return runMoveSimWithout(seed, steps, "") }

func runMoveSimWithout(seed uint64, steps int, without string) (_ *moveSim, err error) {
	s := &moveSim{without: without, rng: rand.New(rand.NewPCG(seed, 77)), st: New(), groups: map[string]*simGroup{},
		names: []string{"g1", "g2", "g3"}, epochOwner: map[int32]string{}}
	defer func() {
		if err != nil {
			tail := s.trace[max(0, len(s.trace)-simTraceLines):]
			err = fmt.Errorf("%w\nlast steps:\n  %s", err, strings.Join(tail, "\n  "))
		}
	}()
	s.now = 1
	for i, g := range s.names {
		s.groups[g] = &simGroup{name: g, id: int32(i + 1), term: 1}
		s.mustApply(RegisterBrokerRecord{BrokerID: int32(i + 1), GroupID: g, IncarnationID: UUID{byte(i + 1)},
			ClientAddress: "c", ReplicationAddress: "r", LeaseExpiryMs: 1 << 60})
		s.mustApply(GroupStateRecord{GroupID: g, Leader: int32(i + 1), Term: 1, ISR: []int32{int32(i + 1)}})
	}
	recs, err := s.st.CreateTopic(UUID{9}, simTopic, 1, nil, Placement{Groups: []string{"g1"}}, s.now)
	if err != nil {
		return s, err
	}
	s.mustApplyBatch(recs)
	for _, g := range s.groups {
		g.view = len(s.hist) - 1
	}
	for range steps {
		if err := s.step(true); err != nil {
			return s, err
		}
	}
	// Heal: no more admin steps or failovers; views catch up; the moves
	// under way finish or are cancelled.
	for i := 0; ; i++ {
		if i > 5000 {
			return s, fmt.Errorf("the moves did not settle: %+v", s.partition())
		}
		if s.partition().Move == MoveNone && len(s.inflight) == 0 && i > 200 {
			break
		}
		if err := s.step(false); err != nil {
			return s, err
		}
	}
	for _, g := range s.groups {
		g.view = len(s.hist) - 1
		s.tendFences(g)
	}
	return s, s.checkFinal()
}

func (s *moveSim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf(format, args...))
}

func (s *moveSim) mustApply(r Record) { s.mustApplyBatch([]Record{r}) }

func (s *moveSim) mustApplyBatch(recs []Record) {
	if err := s.st.ApplyBatch(recs); err != nil {
		panic(err)
	}
	s.hist = append(s.hist, s.st.clone())
}

// propose applies a command's records as the metadata log's leader does,
// refused when they no longer apply.
func (s *moveSim) propose(r Record, err error) bool {
	if err != nil {
		return false
	}
	if err := s.st.ApplyBatch([]Record{r}); err != nil {
		return false
	}
	s.hist = append(s.hist, s.st.clone())
	return true
}

func (s *moveSim) partition() Partition {
	t, _ := s.st.Topic(simTopic)
	return t.Partitions[0]
}

// viewOf is the partition as g's copy of the metadata has it: an empty
// Partition (no owner, no move) while that copy predates the topic.
func (g *simGroup) viewOf(s *moveSim) Partition {
	t, ok := s.hist[g.view].Topic(simTopic)
	if !ok {
		return Partition{}
	}
	return t.Partitions[0]
}

func (s *moveSim) pick() *simGroup { return s.groups[s.names[s.rng.IntN(len(s.names))]] }

func (s *moveSim) step(faults bool) error {
	switch x := s.rng.IntN(100); {
	case x < 25:
		return s.produce(s.pick())
	case x < 45:
		return s.copier(s.pick())
	case x < 55:
		s.deliver()
	case x < 65:
		s.tendFences(s.pick())
	case x < 78:
		g := s.pick()
		if g.view < len(s.hist)-1 {
			g.view += 1 + s.rng.IntN(len(s.hist)-1-g.view)
		}
	case x < 84:
		p := s.partition()
		if p.Move == MoveCutOver {
			if s.propose(s.st.FinishMove(simTopic, 0)) {
				s.logf("finish: %s owns it", p.Owner)
			}
		}
	case !faults:
	case x < 91:
		p := s.partition()
		switch {
		case p.Move == MoveNone:
			to := s.pick().name
			if to != p.Owner && s.propose(s.st.StartMove(simTopic, 0, to)) {
				s.moves++
				s.logf("start move %d: %s -> %s", s.partition().MoveSeq, p.Owner, to)
			}
		case p.Move == MoveCopying && s.rng.IntN(10) == 0:
			if s.propose(s.st.CancelMove(simTopic, 0)) {
				s.logf("cancel move %d", p.MoveSeq)
			}
		}
	case x < 95:
		// A failover: the next leader's copy of the metadata may be
		// older than its predecessor's; the copier's memory is lost.
		g := s.pick()
		g.term++
		g.fenceAns = nil
		if s.rng.IntN(3) == 0 {
			g.view = s.rng.IntN(g.view + 1)
		}
		s.mustApply(GroupStateRecord{GroupID: g.name, Leader: g.id, Term: g.term, ISR: []int32{g.id}})
		s.logf("failover of %s: term %d, view %d of %d", g.name, g.term, g.view, len(s.hist)-1)
	default:
		if len(s.inflight) > 0 && s.rng.IntN(2) == 0 {
			i := s.rng.IntN(len(s.inflight))
			s.logf("lost a fence request %+v", s.inflight[i])
			s.inflight = slices.Delete(s.inflight, i, i+1)
		}
	}
	return nil
}

// produce is a client's append at group g's leader, which takes it if its
// copy of the metadata says g owns the partition and its Raft log does not
// fence it, stamped with its term plus the partition's epoch base.
func (s *moveSim) produce(g *simGroup) error {
	p := g.viewOf(s)
	if p.Owner != g.name || g.fenced || p.MoveSeq < g.floor && s.without != "floor" {
		return nil
	}
	e := simEntry{epoch: g.term + p.EpochBase, id: s.nextID}
	s.nextID++
	g.log = append(g.log, e)
	s.acks = append(s.acks, simAck{offset: len(g.log) - 1, entry: e, group: g.name})
	s.logf("%s acks record %d at offset %d epoch %d", g.name, e.id, len(g.log)-1, e.epoch)
	if o, ok := s.epochOwner[e.epoch]; ok && o != g.name {
		return fmt.Errorf("two owners at epoch %d: %s and %s acknowledged appends", e.epoch, o, g.name)
	}
	s.epochOwner[e.epoch] = g.name
	return nil
}

// copier is the target leader's copier: read on, ask for the fence once
// caught up, cut over once the copy reaches the fenced end.
func (s *moveSim) copier(t *simGroup) error {
	p := t.viewOf(s)
	if p.Move != MoveCopying || p.Target != t.name {
		if p.Move == MoveCutOver && p.Target == t.name && s.partition().Move == MoveCutOver {
			s.propose(s.st.FinishMove(simTopic, 0))
		}
		return nil
	}
	if t.fenceAns != nil && t.fenceAns.moveSeq != p.MoveSeq {
		t.fenceAns = nil
	}
	if (t.fenced && p.MoveSeq < t.fence || p.MoveSeq < t.floor) && s.without != "copier-guard" {
		// This copy of the metadata predates what the group's Raft
		// log has seen of the partition: an old move, long over.
		return nil
	}
	if (t.fenced || t.floor < p.MoveSeq) && s.without != "take-in" {
		// Before the first copied batch: the group's own fence from
		// handing the partition over earlier goes, and the floor says
		// from which move on a copy of the metadata may make this
		// group serve it. A stale copy (a failover's) could otherwise
		// drop what this copy brings in, or serve it at an old base.
		t.fenced, t.floor = false, max(t.floor, p.MoveSeq)
		s.logf("%s takes move %d in: fence lifted, floor %d", t.name, p.MoveSeq, t.floor)
	}
	src := s.groups[p.Source]
	if len(t.log) > len(src.log) {
		return nil // the source refuses the read: out of range
	}
	for i := range t.log {
		if t.log[i] != src.log[i] {
			return fmt.Errorf("%s's copy differs from %s's log at offset %d: %+v vs %+v", t.name, src.name, i, t.log[i], src.log[i])
		}
	}
	if n := len(src.log) - len(t.log); n > 0 {
		n = 1 + s.rng.IntN(n)
		t.log = append(t.log, src.log[len(t.log):len(t.log)+n]...)
		return nil
	}
	if t.fenceAns == nil {
		s.inflight = append(s.inflight, simFenceRequest{from: t.name, to: src.name, term: src.term, moveSeq: p.MoveSeq})
		return nil
	}
	if len(t.log) < t.fenceAns.offset {
		return nil
	}
	a := t.fenceAns
	if s.propose(s.st.CutOver(simTopic, 0, a.moveSeq, a.epoch, int64(a.offset))) {
		s.cuts++
		s.logf("cut over move %d to %s at offset %d (fence epoch %d, base %d)", a.moveSeq, t.name, a.offset, a.epoch, s.partition().EpochBase)
	}
	return nil
}

// deliver hands the oldest fence request to its source leader, if that
// leader still leads (the source fences and answers), and the answer back.
func (s *moveSim) deliver() {
	if len(s.inflight) == 0 {
		return
	}
	i := s.rng.IntN(len(s.inflight))
	req := s.inflight[i]
	s.inflight = slices.Delete(s.inflight, i, i+1)
	src := s.groups[req.to]
	if src.term != req.term {
		return // a deposed leader refuses it
	}
	p := src.viewOf(s)
	if p.Move != MoveCopying || p.Source != src.name || p.Target != req.from || p.MoveSeq != req.moveSeq {
		return
	}
	if (src.fenced && p.MoveSeq < src.fence || p.MoveSeq < src.floor) && s.without != "fence-guard" {
		// Both copies of the metadata are stale: the group's Raft log
		// has seen a later move of the partition.
		return
	}
	if !src.fenced || src.fence != p.MoveSeq {
		src.fenced, src.fence = true, p.MoveSeq
		s.logf("%s fences for move %d at offset %d epoch %d", src.name, p.MoveSeq, len(src.log), src.term+p.EpochBase)
	}
	s.groups[req.from].fenceAns = &simFenceAnswer{moveSeq: p.MoveSeq, epoch: src.term + p.EpochBase, offset: len(src.log)}
}

// tendFences is the leader pass over the group's fence: lift it when the
// group owns the partition again, drop the copy when another owns it and
// is not copying it back here.
func (s *moveSim) tendFences(g *simGroup) {
	if !g.fenced {
		return
	}
	p := g.viewOf(s)
	switch {
	case p.Owner == "" || p.MoveSeq < g.fence:
		// The topic, or the fenced move, is unknown to this copy.
	case p.Owner == g.name && (p.Move != MoveCopying || p.MoveSeq != g.fence):
		g.fenced, g.floor = false, max(g.floor, p.MoveSeq)
		s.logf("%s lifts its fence of move %d (view %d: move %d %s)", g.name, g.fence, g.view, p.MoveSeq, p.Move)
	case p.Owner != g.name && (p.Move == MoveNone || p.Target != g.name):
		if len(g.log) > 0 {
			g.log = nil
			s.logf("%s drops its copy", g.name)
		}
	}
}

func (s *moveSim) checkFinal() error {
	owner := s.groups[s.partition().Owner]
	for _, a := range s.acks {
		if a.offset >= len(owner.log) || owner.log[a.offset] != a.entry {
			var got any = "nothing"
			if a.offset < len(owner.log) {
				got = owner.log[a.offset]
			}
			return fmt.Errorf("record %d acknowledged by %s at offset %d epoch %d: the owner %s holds %v there", a.entry.id, a.group, a.offset, a.entry.epoch, owner.name, got)
		}
	}
	for i := 1; i < len(owner.log); i++ {
		if owner.log[i].epoch < owner.log[i-1].epoch {
			return fmt.Errorf("epochs fall in %s's log at offset %d: %d after %d", owner.name, i, owner.log[i].epoch, owner.log[i-1].epoch)
		}
	}
	return nil
}
