package raftgroup

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moonmq/moonmq/internal/replication"
	"github.com/moonmq/moonmq/internal/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestElectionThree(t *testing.T) {
	s := newSim(t, 3, 1, nil)
	l := s.waitServing(100)
	c := s.cores[l]
	if uint64(c.state.Epoch) != c.term || c.state.Leader != l {
		t.Fatalf("claim %+v, term %d", c.state, c.term)
	}
	s.tick(5)
	for _, id := range s.ids {
		if st := s.cores[id].state; st.Epoch != c.state.Epoch || st.Leader != l {
			t.Fatalf("replica %d state %+v, want leader %d epoch %d", id, st, l, c.state.Epoch)
		}
		if id != l && s.cores[id].serving() {
			t.Fatalf("follower %d serves", id)
		}
	}
}

func TestElectionFive(t *testing.T) {
	s := newSim(t, 5, 2, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	// Two failures are tolerated.
	s.crash(l)
	other := s.ids[0]
	if other == l {
		other = s.ids[1]
	}
	s.crash(other)
	l2 := s.waitServing(200)
	if l2 == l || l2 == other || s.cores[l2].state.Epoch <= s.servingEpochOf(l) {
		t.Fatalf("new leader %d epoch %d", l2, s.cores[l2].state.Epoch)
	}
}

func (s *sim) servingEpochOf(id int32) int32 {
	var e int32
	for ep, l := range s.servingByEpoch {
		if l == id && ep > e {
			e = ep
		}
	}
	return e
}

func TestKillLeader(t *testing.T) {
	s := newSim(t, 3, 3, nil)
	l := s.waitServing(100)
	e := s.cores[l].state.Epoch
	s.crash(l)
	l2 := s.waitServing(200)
	if l2 == l {
		t.Fatal("dead leader serves")
	}
	if e2 := s.cores[l2].state.Epoch; e2 <= e || uint64(e2) != s.cores[l2].term {
		t.Fatalf("epoch %d after %d (term %d)", e2, e, s.cores[l2].term)
	}
	// The old leader comes back as a follower of the new epoch.
	s.start(l)
	s.tick(30)
	if got := s.serving(); !slices.Equal(got, []int32{l2}) {
		t.Fatalf("serving %v, want [%d]", got, l2)
	}
	if st := s.cores[l].state; st.Leader != l2 {
		t.Fatalf("restarted replica sees %+v", st)
	}
}

func TestPartitionedLeaderStepsDown(t *testing.T) {
	s := newSim(t, 3, 4, nil)
	l := s.waitServing(100)
	e := s.cores[l].state.Epoch
	s.isolate(l)
	stepped := -1
	for i := range 3 * simElection {
		s.tick(1)
		if !s.cores[l].serving() {
			stepped = i + 1
			break
		}
	}
	if stepped < 0 || stepped > 2*simElection+1 {
		t.Fatalf("isolated leader still serving after %d ticks", stepped)
	}
	var l2 int32
	for range 200 {
		s.tick(1)
		if sv := s.serving(); len(sv) == 1 && sv[0] != l {
			l2 = sv[0]
			break
		}
	}
	if l2 == 0 || s.cores[l2].state.Epoch <= e {
		t.Fatalf("majority side did not elect: %+v", s.dump())
	}
	if s.cores[l].serving() {
		t.Fatal("isolated leader serves again")
	}
	s.heal()
	s.tick(30)
	if got := s.serving(); !slices.Equal(got, []int32{l2}) {
		t.Fatalf("after heal serving %v, want [%d] (pre-vote should keep the leader)", got, l2)
	}
	if st := s.cores[l].state; st.Leader != l2 || st.Epoch != s.cores[l2].state.Epoch {
		t.Fatalf("old leader did not catch up: %+v", st)
	}
}

// forceCampaign makes id campaign at once as if the leader had transferred
// leadership to it (MsgTimeoutNow bypasses pre-vote and leader leases).
func (s *sim) forceCampaign(id, from int32) {
	c := s.cores[id]
	c.step(&pb.Message{Type: pb.MsgTimeoutNow.Enum(), To: new(uint64(id)), From: new(uint64(from)), Term: new(c.term)})
	s.deliver()
}

func TestNonISRWinnerHandsOff(t *testing.T) {
	s := newSim(t, 3, 5, nil)
	l := s.waitServing(100)
	var out int32
	for _, id := range s.ids {
		if id != l {
			out = id
			break
		}
	}
	var isr []int32
	for _, id := range s.ids {
		if id != out {
			isr = append(isr, id)
		}
	}
	if err := s.proposeISR(l, isr...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	if st := s.cores[out].state; !st.HasISR || slices.Contains(st.ISR, out) {
		t.Fatalf("ISR not applied on %d: %+v", out, st)
	}
	s.claimed = map[int32]bool{}
	term := s.cores[out].term
	s.forceCampaign(out, l)
	if c := s.cores[out]; c.ledTerm <= term || c.handOffTries == 0 {
		t.Fatalf("replica %d did not win and hand off: led term %d (was %d), tries %d", out, c.ledTerm, term, c.handOffTries)
	}
	l2 := s.waitServing(200)
	s.tick(20)
	if l2 == out || s.claimed[out] || s.cores[out].serving() {
		t.Fatalf("non-ISR replica %d claimed or serves (leader %d): %+v", out, l2, s.dump())
	}
	if !slices.Contains(isr, l2) {
		t.Fatalf("leader %d not in ISR %v", l2, isr)
	}
}

func TestRoleBeforeISR(t *testing.T) {
	// Before any ISR only leader/both replicas may serve: 2 and 3 are
	// followers, so whoever wins hands off to 1.
	roles := map[int32]replication.Role{1: replication.RoleLeader, 2: replication.RoleFollower, 3: replication.RoleFollower}
	for seed := int64(0); seed < 3; seed++ {
		s := newSim(t, 3, seed, roles)
		if l := s.waitServing(300); l != 1 {
			t.Fatalf("seed %d: serving leader %d", seed, l)
		}
		if s.claimed[2] || s.claimed[3] {
			t.Fatalf("seed %d: a follower-role replica claimed", seed)
		}
	}
}

func TestRestartKeepsTermAndVote(t *testing.T) {
	s := newSim(t, 3, 6, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	for range 10 { // enough entries to compact
		if err := s.proposeISR(s.waitServing(10), s.ids...); err != nil {
			t.Fatal(err)
		}
		s.tick(1)
	}
	var f int32 = 1
	if f == l {
		f = 2
	}
	before := s.cores[f].rn.BasicStatus()
	b, err := vfs.ReadFile(s.fss[f], filepath.Join("/data", FileName))
	if err != nil {
		t.Fatal(err)
	}
	var d diskState
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Snapshot.Index <= 1 || len(d.Entries) > 8 {
		t.Fatalf("log not compacted: snapshot %d, %d entries", d.Snapshot.Index, len(d.Entries))
	}
	s.restart(f)
	after := s.cores[f].rn.BasicStatus()
	if after.HardState.GetTerm() != before.HardState.GetTerm() || after.HardState.GetVote() != before.HardState.GetVote() {
		t.Fatalf("hard state %v after restart, was %v", after.HardState, before.HardState)
	}
	if st := s.cores[f].state; st.Epoch == 0 || !st.HasISR {
		t.Fatalf("restarted from snapshot state %+v", st)
	}
	s.tick(20)
	if got := s.serving(); !slices.Equal(got, []int32{l}) {
		t.Fatalf("serving %v after follower restart, want [%d]", got, l)
	}
	if !s.cores[f].state.Equal(s.cores[l].state) {
		t.Fatalf("restarted %+v, leader %+v", s.cores[f].state, s.cores[l].state)
	}
	// The whole group restarting keeps its epoch history.
	e := s.cores[l].state.Epoch
	for _, id := range s.ids {
		s.restart(id)
	}
	l2 := s.waitServing(200)
	if s.cores[l2].state.Epoch <= e {
		t.Fatalf("epoch %d after full restart, was %d", s.cores[l2].state.Epoch, e)
	}
}

func TestOldEpochISRIgnored(t *testing.T) {
	st := initialState()
	claim := func(term uint64, id int32) *pb.Entry {
		return &pb.Entry{Term: new(term), Index: new(uint64(0)), Data: encodeClaim(LeadershipClaim{Epoch: int32(term), LeaderID: id})}
	}
	isr := func(term uint64, epoch int32, isr ...int32) *pb.Entry {
		return &pb.Entry{Term: new(term), Index: new(uint64(0)), Data: encodeISR(replication.ISRChange{Epoch: epoch, ISR: isr})}
	}
	st = st.apply(claim(2, 1))
	st = st.apply(isr(2, 2, 3, 1, 2))
	if !st.HasISR || !slices.Equal(st.ISR, []int32{1, 2, 3}) {
		t.Fatalf("ISR not applied: %+v", st)
	}
	st = st.apply(claim(4, 2))
	st = st.apply(isr(4, 2, 1))
	if !slices.Equal(st.ISR, []int32{1, 2, 3}) || st.Leader != 2 || st.Epoch != 4 {
		t.Fatalf("old-epoch ISR applied: %+v", st)
	}
	// A claim whose epoch is not its entry's term, or is older, is ignored.
	st = st.apply(&pb.Entry{Term: new(uint64(5)), Data: encodeClaim(LeadershipClaim{Epoch: 9, LeaderID: 3})})
	st = st.apply(claim(3, 3))
	if st.Leader != 2 || st.Epoch != 4 {
		t.Fatalf("bad claim applied: %+v", st)
	}

	// In a live group: a stale proposal is refused, and an old-epoch entry
	// that commits late is ignored on every replica.
	s := newSim(t, 3, 7, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	e := s.cores[l].state.Epoch
	err := s.cores[l].proposeISR(replication.ISRChange{Epoch: e - 1, ISR: []int32{l}})
	if !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale proposal: %v", err)
	}
	if f := s.ids[(slices.Index(s.ids, l)+1)%3]; !errors.Is(s.cores[f].proposeISR(replication.ISRChange{Epoch: e, ISR: []int32{f}}), ErrNotServing) {
		t.Fatal("follower proposal accepted")
	}
	if err := s.cores[l].rn.Propose(encodeISR(replication.ISRChange{Epoch: e - 1, ISR: []int32{l}})); err != nil {
		t.Fatal(err)
	}
	s.cores[l].process()
	s.tick(5)
	for _, id := range s.ids {
		if st := s.cores[id].state; len(st.ISR) != 3 {
			t.Fatalf("replica %d applied old-epoch ISR: %+v", id, st)
		}
	}
}

func TestRandomized(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		n := 3
		if seed%2 == 0 {
			n = 5
		}
		randomRun(t, seed, n, 800)
	}
}

func randomRun(t *testing.T, seed int64, n, ticks int) {
	s := newSim(t, n, seed, nil)
	s.dropRate = 0.05
	s.shuffle = true
	for range ticks {
		switch r := s.rng.Intn(100); {
		case r < 3:
			s.isolate(s.ids[s.rng.Intn(n)])
		case r < 5:
			a, b := s.ids[s.rng.Intn(n)], s.ids[s.rng.Intn(n)]
			s.blocked[[2]int32{a, b}] = true
		case r < 9:
			s.heal()
		case r < 11:
			id := s.ids[s.rng.Intn(n)]
			if s.cores[id] != nil {
				s.crash(id)
			}
		case r < 16:
			for _, id := range s.ids {
				if s.cores[id] == nil {
					s.start(id)
					break
				}
			}
		case r < 30:
			if l := s.serving(); len(l) > 0 {
				ld := l[s.rng.Intn(len(l))]
				isr := []int32{ld}
				for _, id := range s.ids {
					if id != ld && s.rng.Intn(3) > 0 {
						isr = append(isr, id)
					}
				}
				slices.Sort(isr)
				_ = s.proposeISR(ld, isr...)
			}
		}
		s.tick(1)
	}
	// Heal everything: the group must converge on one serving leader and
	// one state.
	s.heal()
	s.dropRate = 0
	for _, id := range s.ids {
		if s.cores[id] == nil {
			s.start(id)
		}
	}
	l := s.waitServing(500)
	s.tick(30)
	for _, id := range s.ids {
		if !s.cores[id].state.Equal(s.cores[l].state) || s.cores[id].applied != s.cores[l].applied {
			t.Fatalf("seed %d: replica %d at %d %+v, leader %d at %d %+v", seed, id, s.cores[id].applied, s.cores[id].state,
				l, s.cores[l].applied, s.cores[l].state)
		}
	}
	t.Logf("seed %d (%d replicas): final epoch %d, %d epochs served, applied %d", seed, n, s.cores[l].state.Epoch, len(s.servingByEpoch), s.cores[l].applied)
}

func TestStorageFailureStopsNode(t *testing.T) {
	s := newSim(t, 3, 8, nil)
	l := s.waitServing(100)
	var f int32 = 1
	if f == l {
		f = 2
	}
	s.fss[f].FailNext(vfs.OpRename, FileName, vfs.ErrInjected)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	c := s.cores[f]
	if c.failed == nil || c.status().Err == "" {
		t.Fatalf("write failure not reported: %+v", c.status())
	}
	// The failed replica sends nothing more; the others carry on.
	before := len(s.queue)
	c.tick()
	c.step(&pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(f)), From: new(uint64(l)), Term: new(c.term)})
	if len(s.queue) != before {
		t.Fatal("failed replica sent messages")
	}
	if !errors.Is(c.proposeISR(replication.ISRChange{}), vfs.ErrInjected) {
		t.Fatal("failed replica accepts proposals")
	}
	if got := s.waitServing(50); got != l {
		t.Fatalf("leader changed to %d", got)
	}
	s.restart(f)
	s.tick(10)
	if !s.cores[f].state.Equal(s.cores[l].state) {
		t.Fatalf("restarted replica %+v, leader %+v", s.cores[f].state, s.cores[l].state)
	}
}

func TestMembershipIsStatic(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{ID: 1, Members: []int32{1, 2, 3}, DataDir: "/d", FS: fs, Transport: nopTransport{}}
	if _, err := NewNode(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Members = []int32{1, 2, 3, 4, 5}
	if _, err := NewNode(cfg); err == nil {
		t.Fatal("state file of another membership accepted")
	}
	cfg.Members = []int32{3, 1, 2}
	if _, err := NewNode(cfg); err != nil {
		t.Fatalf("same membership in another order: %v", err)
	}
}

// TestHeardAfterKill: a new leader's status lists the peers it has heard
// from in its term, and never the dead previous leader (the broker's
// replication.Leader removes such a member from the ISR at once).
func TestHeardAfterKill(t *testing.T) {
	s := newSim(t, 3, 7, nil)
	l := s.waitServing(100)
	s.tick(3)
	var others []int32
	for _, id := range s.ids {
		if id != l {
			others = append(others, id)
		}
	}
	if got := s.cores[l].status().Heard; !slices.Equal(got, others) {
		t.Fatalf("leader %d heard %v, want %v", l, got, others)
	}
	s.crash(l)
	l2 := s.waitServing(200)
	var live int32
	for _, id := range others {
		if id != l2 {
			live = id
		}
	}
	if got := s.cores[l2].status().Heard; !slices.Equal(got, []int32{live}) {
		t.Fatalf("new leader %d heard %v, want only the live %d (not the dead %d)", l2, got, live, l)
	}
}

// TestUncleanRestartMayNotLead: a replica that restarted without its
// clean-shutdown marker never serves, even if it wins an election, until
// it is told it caught up (ClearUnclean); then it may lead again. If no
// catch-up comes, the restriction ends after UncleanWait.
func TestUncleanRestartMayNotLead(t *testing.T) {
	s := newSim(t, 3, 8, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	var u int32
	for _, id := range s.ids {
		if id != l {
			u = id
			break
		}
	}
	s.unclean = map[int32]bool{u: true}
	s.restart(u)
	s.tick(5)
	if st := s.cores[u].status(); !st.Unclean {
		t.Fatalf("restarted replica %d does not report the unclean restart: %+v", u, st)
	}
	s.claimed = map[int32]bool{}
	s.forceCampaign(u, l)
	s.tick(30)
	if s.claimed[u] || s.cores[u].serving() {
		t.Fatalf("replica %d claimed or serves right after an unclean restart: %+v", u, s.dump())
	}
	if got := s.serving(); len(got) != 1 || got[0] == u {
		t.Fatalf("serving %v, want one replica other than %d", got, u)
	}
	// Caught up: it may lead again.
	s.cores[u].clearUnclean()
	s.forceCampaign(u, s.serving()[0])
	if got := s.waitServing(200); got != u {
		t.Fatalf("serving %d after the catch-up and a forced campaign, want %d", got, u)
	}

	// Without a catch-up the restriction runs out.
	s.restart(u)
	c := s.cores[u]
	if !c.unclean {
		t.Fatal("restart without the marker not unclean")
	}
	for i := c.uncleanTicks; i > 0; i-- {
		c.tick()
	}
	if c.unclean {
		t.Fatal("unclean restriction did not run out")
	}
}

// TestPowerCutNoTermChurn: after every member restarted uncleanly (a power
// cut of the whole group), none may stand until its UncleanWait runs out.
// Meanwhile no one asks for votes, so the term stays where it was (the
// group used to race through dozens of terms a second, each ineligible
// winner handing leadership to another); then one of them leads.
func TestPowerCutNoTermChurn(t *testing.T) {
	s := newSim(t, 3, 11, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	s.unclean = map[int32]bool{1: true, 2: true, 3: true}
	for _, id := range s.ids {
		s.crash(id)
	}
	for _, id := range s.ids {
		s.restart(id)
	}
	term := s.cores[1].term
	wait := s.cores[1].uncleanTicks
	s.tick(wait - 2)
	for _, id := range s.ids {
		c := s.cores[id]
		if c.term != term || c.raftState == raft.StateLeader || c.serving() {
			t.Fatalf("replica %d before the unclean wait ran out: term %d (was %d), state %v, serving %v",
				id, c.term, term, c.raftState, c.serving())
		}
	}
	if got := s.waitServing(20 * simElection); got == NoLeader {
		t.Fatalf("no replica serves after the unclean wait: %+v", s.dump())
	}
	if d := s.cores[1].term - term; d > 3 {
		t.Fatalf("term rose by %d to elect one leader", d)
	}
}

// TestDamagedLogNeverStandsAlone: a replica whose log lost durable data
// (Config.LogDamaged) never stands on it, however long it waits; an
// undamaged unclean member leads once its own wait runs out, and the
// damaged one may stand again only after catching up.
func TestDamagedLogNeverStandsAlone(t *testing.T) {
	s := newSim(t, 3, 12, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	s.unclean = map[int32]bool{1: true, 2: true, 3: true}
	s.damaged = map[int32]bool{1: true}
	for _, id := range s.ids {
		s.crash(id)
	}
	// Only the damaged replica and one other run: the other one must lead
	// when its wait runs out, the damaged one never.
	s.restart(1)
	s.restart(2)
	wait := s.cores[1].uncleanTicks
	s.tick(3 * wait)
	if !s.cores[1].unclean || !s.cores[1].status().LogDamaged {
		t.Fatalf("damaged replica's restriction ran out: %+v", s.cores[1].status())
	}
	if got := s.serving(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("serving %v, want the undamaged replica 2 only", got)
	}
	// Alone with the damaged replica nobody may lead.
	s.crash(2)
	s.tick(3 * wait)
	if got := s.serving(); len(got) != 0 {
		t.Fatalf("serving %v with only the damaged replica up", got)
	}
	s.cores[1].clearUnclean()
	if s.cores[1].status().LogDamaged || s.cores[1].unclean {
		t.Fatal("catching up did not lift the restriction")
	}
}

// TestDegradedLeaderHandsOff: a serving leader whose disk is degraded
// hands leadership to an in-sync member that is not, and a degraded member
// turns leadership handed to it down, so two degraded members never pass
// it back and forth; with every member degraded the leader stays and
// serves.
func TestDegradedLeaderHandsOff(t *testing.T) {
	s := newSim(t, 3, 7, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	var others []int32
	for _, id := range s.ids {
		if id != l {
			others = append(others, id)
		}
	}
	// One of the others is degraded too: only the healthy one may take
	// over.
	healthy, sick := others[0], others[1]
	s.cores[sick].setDegraded("disk full")
	s.cores[l].setDegraded("disk full")
	var l2 int32
	for range 400 {
		s.tick(1)
		if sv := s.serving(); len(sv) == 1 && sv[0] != l {
			l2 = sv[0]
			break
		}
	}
	if l2 != healthy {
		t.Fatalf("leadership went from degraded %d to %d, want the healthy %d: %+v", l, l2, healthy, s.dump())
	}
	// Every member degraded: the leader hands off to nobody and serves on.
	s.cores[healthy].setDegraded("fsync stalled")
	s.tick(200)
	if sv := s.serving(); len(sv) != 1 || sv[0] != healthy {
		t.Fatalf("with every disk degraded, serving %v, want %d to stay: %+v", sv, healthy, s.dump())
	}
}

// TestFullDiskSilencesReplica: a leader that cannot save its Raft state
// for want of space does not fail: it sends nothing (no message may vouch
// for unsaved state; the simulator's check verifies that every message
// sent is persisted), the others elect a leader and commit without it, and
// once space returns it saves, rejoins and catches up.
func TestFullDiskSilencesReplica(t *testing.T) {
	s := newSim(t, 3, 9, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	full := true
	s.fss[l].SetHook(func(op vfs.Op, name string) error {
		if full && op == vfs.OpCreate && strings.Contains(name, FileName) {
			return fmt.Errorf("create %s: %w", name, syscall.ENOSPC)
		}
		return nil
	})
	// Something to save: a vote or heartbeat term change comes soon
	// enough; an ISR change at once.
	var others []int32
	for _, id := range s.ids {
		if id != l {
			others = append(others, id)
		}
	}
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	var l2 int32
	for range 500 {
		s.tick(1)
		if sv := s.serving(); len(sv) == 1 && sv[0] != l {
			l2 = sv[0]
			break
		}
	}
	if l2 == 0 {
		t.Fatalf("no other leader while %d's disk is full: %+v", l, s.dump())
	}
	if c := s.cores[l]; c.failed != nil || !c.unsaved || c.serving() {
		t.Fatalf("replica %d with a full disk: failed %v, unsaved %v, serving %v", l, c.failed, c.unsaved, c.serving())
	}
	if err := s.proposeISR(l2, others...); err != nil {
		t.Fatal(err)
	}
	s.tick(10)
	if st := s.cores[l2].state; !slices.Equal(st.ISR, others) {
		t.Fatalf("ISR change not committed without the silent replica: %+v", st)
	}
	full = false
	s.tick(50)
	if c := s.cores[l]; c.unsaved || c.failed != nil || !c.state.Equal(s.cores[l2].state) {
		t.Fatalf("after space returned: unsaved %v, failed %v, state %+v, leader's %+v", c.unsaved, c.failed, c.state, s.cores[l2].state)
	}
}

// TestBallastLetsAFullDiskSave: a leader whose disk is too full to save
// its Raft state gives back its ballast, saves, and goes on serving
// without an election; it takes the ballast again once its disk is no
// longer full.
func TestBallastLetsAFullDiskSave(t *testing.T) {
	s := newSim(t, 3, 11, nil)
	l := s.waitServing(100)
	if err := s.proposeISR(l, s.ids...); err != nil {
		t.Fatal(err)
	}
	s.tick(3)
	c := s.cores[l]
	if !c.ballastHeld {
		t.Fatalf("replica %d holds no ballast", l)
	}
	full, failed := true, 0
	s.fss[l].SetHook(func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpRemove && strings.HasSuffix(name, BallastFileName):
			full = false // its space is what the save needs
		case full && op == vfs.OpCreate && strings.Contains(name, FileName):
			failed++
			return fmt.Errorf("create %s: %w", name, syscall.ENOSPC)
		}
		return nil
	})
	other := s.ids[0]
	if other == l {
		other = s.ids[1]
	}
	if err := s.proposeISR(l, l, other); err != nil {
		t.Fatal(err)
	}
	s.tick(20)
	if failed == 0 {
		t.Fatal("no save of the Raft state met the full disk")
	}
	if c.unsaved || c.failed != nil || c.ballastHeld {
		t.Fatalf("after a save met the full disk: unsaved %v, failed %v, ballast held %v", c.unsaved, c.failed, c.ballastHeld)
	}
	if sv := s.serving(); len(sv) != 1 || sv[0] != l {
		t.Fatalf("serving %v, want %d to go on", sv, l)
	}
	if _, err := s.fss[l].Open("/data/" + BallastFileName); err == nil {
		t.Fatal("the ballast file is still there")
	}
	c.setDegraded("disk full")
	s.tick(c.ballastRetry + 1)
	if c.ballastHeld {
		t.Fatal("ballast taken again while the disk is full")
	}
	c.setDegraded("")
	s.tick(c.ballastRetry + 1)
	if !c.ballastHeld {
		t.Fatalf("ballast not taken again after %d ticks", c.ballastRetry+1)
	}
	f, err := s.fss[l].Open("/data/" + BallastFileName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, _ := f.Size(); n != simBallast {
		t.Fatalf("ballast of %d bytes, want %d", n, simBallast)
	}
}

// TestMoveFences: a fence proposed in the current epoch is set on every
// replica and survives a leader change (the next leader refuses appends
// to the partition from its first moment); a fence of an older epoch is
// ignored; a lift removes it.
func TestMoveFences(t *testing.T) {
	st := initialState()
	claim := func(term uint64, id int32) *pb.Entry {
		return &pb.Entry{Term: new(term), Index: new(uint64(0)), Data: encodeClaim(LeadershipClaim{Epoch: int32(term), LeaderID: id})}
	}
	fence := func(term uint64, c FenceChange) *pb.Entry {
		return &pb.Entry{Term: new(term), Index: new(uint64(0)), Data: encodeFence(c)}
	}
	st = st.apply(claim(2, 1))
	st = st.apply(fence(2, FenceChange{Epoch: 2, Key: "t/0", Mark: 7}))
	if st.Fences["t/0"] != 7 {
		t.Fatalf("fence not applied: %+v", st)
	}
	before := st.clone()
	st = st.apply(claim(3, 2))
	st = st.apply(fence(3, FenceChange{Epoch: 2, Key: "t/1", Mark: 8}))
	if _, ok := st.Fences["t/1"]; ok || st.Fences["t/0"] != 7 {
		t.Fatalf("old-epoch fence applied, or the fence lost at a leader change: %+v", st)
	}
	// A fence for an older move than the one already fenced is stale.
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Mark: 6}))
	if st.Fences["t/0"] != 7 {
		t.Fatalf("a fence went back to an older move: %+v", st)
	}
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Lift: true, Floor: 9}))
	if len(st.Fences) != 0 || before.Fences["t/0"] != 7 || st.Floors["t/0"] != 9 {
		t.Fatalf("lift: %+v; the state before it changed too: %+v", st, before)
	}
	// Below the floor a fence is stale too; at or above it, it applies;
	// a lower floor never lowers it.
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Mark: 8}))
	if len(st.Fences) != 0 {
		t.Fatalf("a fence below the floor applied: %+v", st)
	}
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Lift: true, Floor: 4}))
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Mark: 9}))
	if st.Fences["t/0"] != 9 || st.Floors["t/0"] != 9 {
		t.Fatalf("fence at the floor: %+v", st)
	}
	st = st.apply(fence(3, FenceChange{Epoch: 3, Key: "t/0", Lift: true, Floor: 10}))

	// In a live group: the fence reaches every replica, and only the
	// serving leader may propose one.
	s := newSim(t, 3, 11, nil)
	l := s.waitServing(100)
	e := s.cores[l].state.Epoch
	if f := s.ids[(slices.Index(s.ids, l)+1)%3]; !errors.Is(s.cores[f].proposeFence(FenceChange{Epoch: e, Key: "t/0"}), ErrNotServing) {
		t.Fatal("follower fence accepted")
	}
	if err := s.cores[l].proposeFence(FenceChange{Epoch: e, Key: "t/0", Mark: 3}); err != nil {
		t.Fatal(err)
	}
	s.tick(20)
	for _, id := range s.ids {
		if s.cores[id].state.Fences["t/0"] != 3 {
			t.Fatalf("replica %d: fences %v", id, s.cores[id].state.Fences)
		}
	}
}

// TestTransferLeadership: the serving leader hands its leadership to the
// member asked for, which serves at a higher epoch; a follower cannot
// start a transfer, and a non-member is no target.
func TestTransferLeadership(t *testing.T) {
	s := newSim(t, 3, 12, nil)
	l := s.waitServing(100)
	e := s.cores[l].state.Epoch
	to := s.ids[(slices.Index(s.ids, l)+1)%3]
	other := s.ids[(slices.Index(s.ids, l)+2)%3]
	if err := s.cores[other].transferTo(to); !errors.Is(err, ErrNotServing) {
		t.Fatalf("a follower's transfer: %v, want ErrNotServing", err)
	}
	if err := s.cores[l].transferTo(99); !errors.Is(err, ErrNotEligible) {
		t.Fatalf("a transfer to a non-member: %v, want ErrNotEligible", err)
	}
	if err := s.cores[l].transferTo(to); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		s.tick(1)
		if now := s.serving(); len(now) == 1 && now[0] == to {
			if got := s.cores[to].state.Epoch; got <= e {
				t.Fatalf("the new leader serves at epoch %d, not above %d", got, e)
			}
			return
		}
	}
	t.Fatalf("leadership not handed from %d to %d: %v", l, to, s.dump())
}
