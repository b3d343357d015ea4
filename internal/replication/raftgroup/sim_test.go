package raftgroup

import (
	"encoding/json"
	"log/slog"
	"math/rand"
	"slices"
	"testing"

	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const simElection = 10

// sim drives cores in one goroutine over a lossy in-memory network with
// manual ticking, and checks the safety invariants after every step:
// at most one serving leader per epoch, and every replica applies the same
// state at each index.
type sim struct {
	t        *testing.T
	rng      *rand.Rand
	ids      []int32
	roles    map[int32]replication.Role
	fss      map[int32]*vfs.MemFS
	cores    map[int32]*core
	queue    []*pb.Message
	blocked  map[[2]int32]bool // from, to
	dropRate float64
	shuffle  bool

	unclean map[int32]bool // started with Config.UncleanRestart
	damaged map[int32]bool // started with Config.LogDamaged

	servingByEpoch map[int32]int32
	appliedAt      map[uint64]GroupState
	claimed        map[int32]bool // replicas whose claim was ever applied
}

func newSim(t *testing.T, n int, seed int64, roles map[int32]replication.Role) *sim {
	t.Helper()
	s := &sim{
		t: t, rng: rand.New(rand.NewSource(seed)), roles: roles,
		fss: map[int32]*vfs.MemFS{}, cores: map[int32]*core{}, blocked: map[[2]int32]bool{},
		servingByEpoch: map[int32]int32{}, appliedAt: map[uint64]GroupState{}, claimed: map[int32]bool{},
	}
	for i := 1; i <= n; i++ {
		id := int32(i)
		s.ids = append(s.ids, id)
		s.fss[id] = vfs.NewMem()
	}
	for _, id := range s.ids {
		s.start(id)
	}
	return s
}

func (s *sim) role(id int32) replication.Role {
	if r, ok := s.roles[id]; ok {
		return r
	}
	return replication.RoleBoth
}

// simBallast keeps the simulated replicas' ballast files small.
const simBallast = 4 << 10

func (s *sim) start(id int32) {
	s.t.Helper()
	cfg := Config{ID: id, Members: s.ids, Role: s.role(id), Roles: s.roles, DataDir: "/data", FS: s.fss[id],
		ElectionTicks: simElection, HeartbeatTicks: 1, CompactEvery: 4, Transport: nopTransport{},
		Logger: slog.New(slog.DiscardHandler), UncleanRestart: s.unclean[id], LogDamaged: s.damaged[id],
		BallastBytes: simBallast}
	if err := cfg.setDefaults(); err != nil {
		s.t.Fatal(err)
	}
	c, err := newCore(&cfg)
	if err != nil {
		s.t.Fatalf("start %d: %v", id, err)
	}
	c.send = func(m *pb.Message) bool {
		s.checkPersisted(id, m)
		b, err := proto.Marshal(m)
		if err != nil {
			s.t.Fatalf("marshal: %v", err)
		}
		w := &pb.Message{}
		if err := proto.Unmarshal(b, w); err != nil {
			s.t.Fatalf("unmarshal: %v", err)
		}
		s.queue = append(s.queue, w)
		return true
	}
	c.onApply = func(index uint64, st GroupState) {
		if prev, ok := s.appliedAt[index]; ok && !prev.Equal(st) {
			s.t.Fatalf("replica %d applied %+v at index %d, another applied %+v", id, st, index, prev)
		}
		s.appliedAt[index] = st
		if st.Leader != NoLeader {
			s.claimed[st.Leader] = true
		}
	}
	s.cores[id] = c
	s.check()
}

type nopTransport struct{}

func (nopTransport) Send(*pb.Message) bool { return false }

// crash stops a replica as a power loss would: only synced bytes survive.
func (s *sim) crash(id int32) {
	delete(s.cores, id)
	s.fss[id] = s.fss[id].Crash()
}

func (s *sim) restart(id int32) {
	if s.cores[id] != nil {
		s.crash(id)
	}
	s.start(id)
}

// isolate cuts id off from every other replica, both ways.
func (s *sim) isolate(id int32) {
	for _, o := range s.ids {
		if o != id {
			s.blocked[[2]int32{id, o}] = true
			s.blocked[[2]int32{o, id}] = true
		}
	}
}

func (s *sim) heal() { s.blocked = map[[2]int32]bool{} }

func (s *sim) deliver() {
	for steps := 0; len(s.queue) > 0; steps++ {
		if steps > 100000 {
			s.t.Fatal("message storm")
		}
		i := 0
		if s.shuffle {
			i = s.rng.Intn(len(s.queue))
		}
		m := s.queue[i]
		s.queue = slices.Delete(s.queue, i, i+1)
		to, from := int32(m.GetTo()), int32(m.GetFrom())
		c := s.cores[to]
		if c == nil || s.blocked[[2]int32{from, to}] || (s.dropRate > 0 && s.rng.Float64() < s.dropRate) {
			continue
		}
		c.step(m)
		s.check()
	}
}

// tick advances every live replica by n ticks, delivering messages after
// each round.
func (s *sim) tick(n int) {
	for range n {
		for _, id := range s.ids {
			if c := s.cores[id]; c != nil {
				c.tick()
				s.check()
			}
		}
		s.deliver()
	}
}

func (s *sim) check() {
	s.t.Helper()
	for _, id := range s.ids {
		c := s.cores[id]
		if c == nil || !c.serving() {
			continue
		}
		e := c.state.Epoch
		if prev, ok := s.servingByEpoch[e]; ok && prev != id {
			s.t.Fatalf("epoch %d served by %d and %d", e, prev, id)
		}
		s.servingByEpoch[e] = id
	}
}

func (s *sim) serving() []int32 {
	var out []int32
	for _, id := range s.ids {
		if c := s.cores[id]; c != nil && c.serving() {
			out = append(out, id)
		}
	}
	return out
}

// waitServing ticks until exactly one live replica serves (and returns
// it), failing after max ticks.
func (s *sim) waitServing(max int) int32 {
	s.t.Helper()
	for range max {
		if l := s.serving(); len(l) == 1 {
			return l[0]
		}
		s.tick(1)
	}
	s.t.Fatalf("no single serving leader after %d ticks: %v", max, s.dump())
	return 0
}

func (s *sim) dump() []Status {
	var out []Status
	for _, id := range s.ids {
		if c := s.cores[id]; c != nil {
			out = append(out, c.status())
		}
	}
	return out
}

// proposeISR proposes isr from the serving leader l.
func (s *sim) proposeISR(l int32, isr ...int32) error {
	c := s.cores[l]
	err := c.proposeISR(replication.ISRChange{Epoch: c.state.Epoch, ISR: isr})
	s.deliver()
	return err
}

func (s *sim) isLeader(id int32) bool {
	c := s.cores[id]
	return c != nil && c.raftState == raft.StateLeader
}

// checkPersisted verifies Raft's Ready rule on the file: what a message
// promises (term, vote, appended entries) is durable before it is sent.
func (s *sim) checkPersisted(id int32, m *pb.Message) {
	s.t.Helper()
	b, err := vfs.ReadFile(s.fss[id].Crash(), "/data/"+FileName)
	if err != nil {
		s.t.Fatalf("replica %d sends %v before any state is durable: %v", id, m.GetType(), err)
	}
	var d diskState
	if err := json.Unmarshal(b, &d); err != nil {
		s.t.Fatal(err)
	}
	last := d.Snapshot.Index
	if n := len(d.Entries); n > 0 {
		last = d.Entries[n-1].Index
	}
	switch m.GetType() {
	case pb.MsgPreVote, pb.MsgPreVoteResp:
		return
	case pb.MsgVoteResp:
		if !m.GetReject() && (d.Vote != m.GetTo() || d.Term != m.GetTerm()) {
			s.t.Fatalf("replica %d grants vote to %d in term %d, durable vote %d term %d", id, m.GetTo(), m.GetTerm(), d.Vote, d.Term)
		}
	case pb.MsgApp:
		if n := len(m.GetEntries()); n > 0 && m.GetEntries()[n-1].GetIndex() > last {
			s.t.Fatalf("replica %d sends entries up to %d, durable up to %d", id, m.GetEntries()[n-1].GetIndex(), last)
		}
	case pb.MsgAppResp:
		if !m.GetReject() && m.GetIndex() > last {
			s.t.Fatalf("replica %d acks %d, durable up to %d", id, m.GetIndex(), last)
		}
	}
	if m.GetTerm() > d.Term {
		s.t.Fatalf("replica %d sends %v at term %d, durable term %d", id, m.GetType(), m.GetTerm(), d.Term)
	}
}
