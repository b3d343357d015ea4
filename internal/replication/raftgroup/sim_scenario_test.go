package raftgroup

// Scripted scenarios on the simulated system: the divergence cases of
// KIP-101 and KIP-279, KIP-966's last replica standing, and the minimal
// reproductions of the bugs the random runs found, now their regression
// tests. Each runs with every step invariant on (the regression tests also
// end to end) and ends with healing and the final check.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/moonmq/moonmq/internal/checker"
	"github.com/moonmq/moonmq/internal/replication"
)

type sysScenario struct {
	t sysT
	w *sysWorld
}

func newSysScenario(t sysT, seed int64, cfg sysConfig) *sysScenario {
	t.Helper()
	cryptotest.SetGlobalRandom(t.testingT(), uint64(seed))
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Trace == 0 {
		cfg.Trace = 300
		if *sysFlagShow {
			cfg.Trace = 5000
		}
	}
	return &sysScenario{t: t, w: newSysWorld(seed, cfg)}
}

// fatalf fails the scenario with the group's state and the trace.
func (s *sysScenario) fatalf(format string, args ...any) {
	s.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, format, args...)
	if s.w.failure != "" {
		fmt.Fprintf(&b, "\nviolation at step %d: %s", s.w.failAt, s.w.failure)
	}
	b.WriteString("\nstate:" + s.w.describe() + "\ntrace:\n")
	for _, l := range s.w.traceLines() {
		b.WriteString("  " + l + "\n")
	}
	s.t.Fatal(b.String())
}

// ok fails the scenario if an invariant was violated.
func (s *sysScenario) ok() {
	s.t.Helper()
	if s.w.failure != "" {
		s.fatalf("invariant violated")
	}
}

func (s *sysScenario) run(d time.Duration) {
	s.t.Helper()
	s.w.runFor(d)
	s.ok()
}

func (s *sysScenario) waitFor(what string, max time.Duration, cond func() bool) {
	s.t.Helper()
	if !s.w.runUntil(max, cond) {
		s.ok()
		s.fatalf("no %s within %v", what, max)
	}
	s.ok()
}

// leader waits for one replica to lead and serve, and returns it.
func (s *sysScenario) leader() *sysReplica {
	s.t.Helper()
	var l *sysReplica
	s.waitFor("serving leader", 20*time.Second, func() bool {
		l = nil
		for _, r := range s.w.reps {
			if r.up && !r.paused && r.ldr != nil && r.core.serving() {
				if l != nil {
					return false
				}
				l = r
			}
		}
		return l != nil
	})
	return l
}

// waitISR waits until the ISR committed in the Raft log is isr and the
// leader works from it.
func (s *sysScenario) waitISR(isr ...int32) {
	s.t.Helper()
	slices.Sort(isr)
	s.waitFor(fmt.Sprintf("ISR %v", isr), 20*time.Second, func() bool {
		st := s.w.ck.latest
		if !st.HasISR || !slices.Equal(st.ISR, isr) {
			return false
		}
		for _, r := range s.w.reps {
			if r.up && !r.paused && r.ldr != nil && r.core.serving() {
				_, pending := r.ldr.Pending()
				return slices.Equal(r.ldr.ISR(), isr) && !pending
			}
		}
		return false
	})
}

// produce sends one record to partition 0 and waits for its outcome; it
// returns the value and the pending produce (nil if refused at once).
func (s *sysScenario) produce() (int32, *sysPending) {
	s.t.Helper()
	pp := s.w.cl.produce(0, 1)
	v := s.w.cl.nextVal
	if pp == nil {
		return v, nil
	}
	s.waitFor("answer to a produce", 2*sysAckTimeout, func() bool { return pp.done })
	return v, pp
}

// acked produces n records, each of which must be acknowledged.
func (s *sysScenario) acked(n int) []int32 {
	s.t.Helper()
	var vals []int32
	for range n {
		v, pp := s.produce()
		if pp == nil || s.w.cl.sends[pp.sends[0]].Outcome != checker.Acked {
			s.fatalf("value %d was not acknowledged", v)
		}
		vals = append(vals, v)
	}
	return vals
}

// unacked appends one record through the leader and lets the leader fsync
// it, without waiting for an acknowledgement.
func (s *sysScenario) unacked(l *sysReplica) (int32, int64) {
	s.t.Helper()
	pp := s.w.cl.produce(0, 1)
	if pp == nil || pp.rep != l {
		s.fatalf("the produce did not reach r%d", l.id)
	}
	s.waitFor("leader fsync", time.Second, func() bool { return l.logs[0].DurableEnd() > pp.last })
	return pp.vals[0], pp.last
}

// finish heals everything and runs the final check.
func (s *sysScenario) finish() {
	s.t.Helper()
	s.w.finish()
	s.ok()
	if *sysFlagShow {
		for _, l := range s.w.traceLines() {
			s.t.Logf("%s", l)
		}
	}
}

func (s *sysScenario) others(l *sysReplica) []*sysReplica {
	var out []*sysReplica
	for _, r := range s.w.reps {
		if r != l {
			out = append(out, r)
		}
	}
	return out
}

// valueAt returns the value r holds at offset off of partition 0.
func (s *sysScenario) valueAt(r *sysReplica, off int64) (int32, bool) {
	rec, ok := r.shadow[0].at(off)
	return rec.val, ok
}

func (s *sysScenario) mustHold(r *sysReplica, off int64, v int32) {
	s.t.Helper()
	if got, ok := s.valueAt(r, off); !ok || got != v {
		s.fatalf("r%d holds value %d (present %v) at offset %d, want %d", r.id, got, ok, off, v)
	}
}

// TestSystemSimScenarios runs the scripted scenarios.
func TestSystemSimScenarios(t *testing.T) {
	for _, sc := range sysScenarios {
		t.Run(sc.name, func(t *testing.T) {
			seeds := []int64{1, 2, 3}
			if testing.Short() {
				seeds = seeds[:1]
			}
			for _, seed := range seeds {
				sc.run(sysRealT{t}, seed, sysConfig{})
			}
		})
	}
}

// TestSystemSimScenariosCatchBugs runs scenarios against deliberately
// broken rules: each must be caught.
func TestSystemSimScenariosCatchBugs(t *testing.T) {
	cases := []struct {
		scenario string
		mut      sysMutation
	}{
		{"KIP-101/high-watermark-one-fetch-late", mutTruncateToHW},
		{"KIP-101/divergent-tail-after-double-crash", mutNoTruncation},
		{"KIP-279/double-fast-failover", mutNoTruncation},
		{"KIP-966/last-replica-standing-minisr-1", mutUncleanLeader},
		{"KIP-966/last-replica-standing-minisr-2", mutUncleanLeader},
	}
	for _, c := range cases {
		t.Run(c.scenario+"/"+c.mut.String(), func(t *testing.T) {
			var sc *sysScenarioDef
			for i := range sysScenarios {
				if sysScenarios[i].name == c.scenario {
					sc = &sysScenarios[i]
				}
			}
			ft := &sysFailT{T: t}
			func() {
				defer func() {
					if r := recover(); r != nil && r != sysFailed {
						panic(r)
					}
				}()
				sc.run(ft, 1, sysConfig{Mut: c.mut})
			}()
			if ft.msg == "" {
				t.Fatalf("scenario %s passed with the injected bug %v", c.scenario, c.mut)
			}
			t.Logf("caught: %s", strings.SplitN(ft.msg, "\nstate:", 2)[0])
		})
	}
}

type sysScenarioDef struct {
	name string
	run  func(t sysT, seed int64, cfg sysConfig)
}

// sysT is the part of testing.T the scenarios use, so that a scenario
// expected to fail can run under sysFailT.
type sysT interface {
	Helper()
	Fatal(args ...any)
	Logf(format string, args ...any)
	testingT() *testing.T
}

type sysRealT struct{ *testing.T }

func (r sysRealT) testingT() *testing.T { return r.T }

// sysFailT records a failure instead of failing the test.
type sysFailT struct {
	*testing.T
	msg string
}

var sysFailed = new(int)

func (f *sysFailT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(sysFailed)
}

func (f *sysFailT) testingT() *testing.T { return f.T }

var sysScenarios = []sysScenarioDef{
	{"KIP-101/high-watermark-one-fetch-late", sysScenarioHWLate},
	{"KIP-101/divergent-tail-after-double-crash", sysScenarioDivergentTail},
	{"KIP-279/double-fast-failover", sysScenarioDoubleFailover},
	{"KIP-966/last-replica-standing-minisr-1", func(t sysT, seed int64, cfg sysConfig) { sysScenarioLastStanding(t, seed, cfg, 1) }},
	{"KIP-966/last-replica-standing-minisr-2", func(t sysT, seed int64, cfg sysConfig) { sysScenarioLastStanding(t, seed, cfg, 2) }},
	{"paused-leader-answers-after-failover", sysScenarioPausedLeader},
}

// KIP-101's first case: a follower learns the high watermark one fetch
// late. B holds an acknowledged record but not the high watermark that
// covers it; B restarts (its high watermark starts at the log start) and
// then becomes the leader. Truncating to the high watermark on restart,
// as Kafka did before KIP-101, would lose the record.
func sysScenarioHWLate(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent = 2, true
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(3)
	o := s.others(a)
	b, c := o[0], o[1]
	// The next record reaches B; then A's answers to B are lost. B's next
	// fetch still tells A it holds the record, so it is acknowledged, but
	// B never learns a high watermark that covers it.
	pp := w.cl.produce(0, 1)
	if pp == nil {
		s.fatalf("produce refused")
	}
	v, off := pp.vals[0], pp.last
	s.waitFor("B to copy the record", time.Second, func() bool { return b.logs[0].DurableEnd() > off })
	cut := w.block(a.id, b.id, classShip, false)
	s.waitFor("acknowledgement", 2*sysAckTimeout, func() bool { return pp.done })
	if w.cl.sends[pp.sends[0]].Outcome != checker.Acked {
		s.fatalf("value %d not acknowledged", v)
	}
	if b.hw[0] > off {
		s.fatalf("B already knows a high watermark (%d) covering offset %d", b.hw[0], off)
	}
	w.crash(b.id, crashPower)
	w.restart(b.id)
	w.unblock(cut)
	s.waitFor("B to reconcile with A", 5*time.Second, func() bool {
		id, _ := b.fetcher.Leader()
		return id == a.id && b.fetcher.State() == replication.StateFetching
	})
	s.mustHold(b, off, v)
	// A dies; C does not campaign, so B leads with the record.
	w.noCampaign[c.id] = true
	w.crash(a.id, crashKill)
	if l := s.leader(); l != b {
		s.fatalf("r%d leads, want r%d", l.id, b.id)
	}
	delete(w.noCampaign, c.id)
	s.mustHold(b, off, v)
	s.acked(2)
	s.finish()
}

// KIP-101's second case: the leader A has fsynced a record no follower
// copied, and crashes. The new leader writes a different record at the
// same offset. A returns as a follower and must replace its record with
// the new leader's.
func sysScenarioDivergentTail(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent = 2, true
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(2)
	cut := w.isolate(a.id, classShip)
	_, off := s.unacked(a)
	w.crash(a.id, crashPower)
	l := s.leader()
	v := s.acked(1)[0]
	s.mustHold(l, off, v)
	w.unblock(cut)
	w.restart(a.id)
	s.waitFor("A to take the new leader's record", 5*time.Second, func() bool {
		got, ok := s.valueAt(a, off)
		return ok && got == v
	})
	s.finish()
}

// KIP-279: two fast failovers leave three different logs. A (epoch eA)
// holds an unreplicated record at offset 1; B (epoch eB) another, also
// unreplicated; C, which copied neither, leads next and writes an
// acknowledged record there. A asks where eA ends; B asks about eB, which
// C never had: C answers with its largest epoch below eB (eA) and where it
// ends, and B truncates to that.
func sysScenarioDoubleFailover(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent = 2, false
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(1)
	o := s.others(a)
	b, c := o[0], o[1]
	cutA := w.isolate(a.id, classShip)
	cutC := w.isolate(c.id, classShip)
	s.unacked(a)
	w.crash(a.id, crashKill)
	w.noCampaign[c.id] = true
	if l := s.leader(); l != b {
		s.fatalf("r%d leads, want r%d", l.id, b.id)
	}
	_, off := s.unacked(b)
	w.crash(b.id, crashKill)
	delete(w.noCampaign, c.id)
	w.unblock(cutA)
	w.unblock(cutC)
	w.restart(a.id)
	if l := s.leader(); l != c {
		s.fatalf("r%d leads, want r%d", l.id, c.id)
	}
	v := s.acked(1)[0]
	s.mustHold(c, off, v)
	s.waitFor("A to truncate its epoch's record", 5*time.Second, func() bool {
		got, ok := s.valueAt(a, off)
		return ok && got == v
	})
	w.restart(b.id)
	s.waitFor("B to truncate its epoch's record", 5*time.Second, func() bool {
		got, ok := s.valueAt(b, off)
		return ok && got == v
	})
	if w.ck.stats.olderEpochAnswers == 0 {
		s.fatalf("no epoch-end answer about an older epoch than asked: the KIP-279 path was not taken")
	}
	s.finish()
}

// KIP-966's last replica standing: the ISR shrinks to the leader A. With
// min.insync.replicas 1, A keeps acknowledging alone; with 2 it refuses
// (NOT_ENOUGH_REPLICAS). A then loses power. B and C are outside the ISR
// and may lack acknowledged records: neither may lead (no unclean
// election, which would lose them) until A returns. It is also the regression script of a
// bug: A, back after its unclean restart and leading in Raft, kept handing
// leadership off after the restriction ended, to nobody, and the group
// never served.
func sysScenarioLastStanding(t sysT, seed int64, cfg sysConfig, minISR int) {
	cfg.MinISR, cfg.Silent = minISR, false
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(2)
	o := s.others(a)
	cut1 := w.isolate(o[0].id, classShip)
	cut2 := w.isolate(o[1].id, classShip)
	s.waitISR(a.id)
	if minISR == 1 {
		s.acked(3)
	} else {
		v, pp := s.produce()
		if pp != nil {
			s.fatalf("value %d was appended under min.insync.replicas", v)
		}
	}
	w.crash(a.id, crashPower)
	var bad *sysReplica
	w.runUntil(10*time.Second, func() bool {
		for _, r := range w.reps {
			if r.up && (r.ldr != nil || r.core.serving()) {
				bad = r
			}
		}
		return bad != nil
	})
	s.ok()
	if bad != nil {
		s.fatalf("r%d leads while the only ISR member is down", bad.id)
	}
	w.unblock(cut1)
	w.unblock(cut2)
	w.restart(a.id)
	if l := s.leader(); l != a {
		s.fatalf("r%d leads, want r%d", l.id, a.id)
	}
	s.finish()
}

// A leader paused (SIGSTOP) during a failover still believes it leads when
// it resumes, and answers the requests that waited for it before its Raft
// notices the newer term. A replica that restarts after the failover must
// not truncate what the new epoch committed on the old leader's word. It is
// also the regression script of a bug: a restarted core published its
// snapshot's group state, epochs old, before re-applying its committed
// entries, and the broker followed the paused leader meanwhile.
func sysScenarioPausedLeader(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent, cfg.CompactEvery = 2, true, 1000
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(2)
	// Every replica's Raft snapshot now holds A's claim, as it would after
	// an ordinary compaction.
	for _, r := range w.reps {
		r.core.compactEvery = 1
		r.core.maybeCompact()
		r.core.compactEvery = 1000
	}
	w.pause(a.id)
	l := s.leader()
	eL := l.ldr.Epoch()
	s.acked(3)
	// L restarts; the third replica, the other member of L's ISR, loses
	// power and stays down for a while; then A resumes.
	var third *sysReplica
	for _, r := range s.others(a) {
		if r != l {
			third = r
		}
	}
	w.crash(l.id, crashKill)
	w.restart(l.id)
	s.run(200 * time.Millisecond)
	w.crash(third.id, crashPower)
	w.resume(a.id)
	s.run(3 * time.Second)
	if l.core.state.Epoch < eL {
		s.fatalf("r%d's group state is still at epoch %d after its restart", l.id, l.core.state.Epoch)
	}
	w.restart(third.id)
	s.finish()
}

// TestSystemSimKnownBugs holds the regression tests of the four bugs the
// random runs found in the code the simulation drives, all fixed in commit
// 3a42809 (docs/RELIABILITY.md, "Bugs found"). Each bug's minimal script
// runs against the real code, first with every step invariant on, then end
// to end (invariants off: the final check and the history checker judge
// what clients saw), on three seeds (one with -short); it fails if its bug
// comes back.
func TestSystemSimKnownBugs(t *testing.T) {
	bugs := []struct {
		name string
		run  func(sysT, int64, sysConfig)
	}{
		// replication.Leader: no ISR expand below the epoch start.
		{"expand-below-epoch-start", sysBugExpandBelowEpochStart},
		// newCore applies its committed entries before publishing state.
		{"stale-group-state-after-restart", sysScenarioPausedLeader},
		// replication.Fetcher retries NOT_LEADER.
		{"idle-after-not-leader", sysBugIdleAfterNotLeader},
		// core.endUnclean has the leader judge its eligibility again.
		{"unclean-leader-keeps-handing-off", func(t sysT, seed int64, cfg sysConfig) { sysScenarioLastStanding(t, seed, cfg, 1) }},
	}
	seeds := []int64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, b := range bugs {
		t.Run(b.name, func(t *testing.T) {
			for _, e2e := range []bool{false, true} {
				t.Run(strings.ReplaceAll(sysModeName(e2e), " ", "-"), func(t *testing.T) {
					for _, seed := range seeds {
						t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
							b.run(sysRealT{t}, seed, sysConfig{EndToEnd: e2e})
						})
					}
				})
			}
		})
	}
}

// A new leader's high watermark restarts from what it knew: after a
// restart, its log start. replication.Leader used to propose a follower
// into the ISR once it had reached that high watermark, so a follower that
// lacked records acknowledged in the previous epoch joined the ISR, and
// could then be elected and make everyone truncate them (KAFKA-7128). The
// fix also requires the leader's log end at the start of its epoch.
func sysBugExpandBelowEpochStart(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent = 2, false
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(2)
	o := s.others(a)
	b, c := o[0], o[1]
	cutC := w.isolate(c.id, classShip)
	s.waitISR(a.id, b.id)
	s.acked(3) // on A and B only
	// A is lost; B restarts and forgets its high watermark; B leads.
	w.crash(a.id, crashPower)
	w.crash(b.id, crashKill)
	w.restart(b.id)
	w.unblock(cutC)
	// C's fetches reach B, B's fetch answers do not reach C: C copies
	// nothing.
	w.dropIf = func(m *sysMsg) bool { return m.kind == msgFetchResp && m.from == b.id && m.to == c.id }
	if l := s.leader(); l != b {
		s.fatalf("r%d leads, want r%d", l.id, b.id)
	}
	s.run(time.Second)
	// B is lost too; A returns and does not campaign; C leads if it can.
	w.crash(b.id, crashPower)
	w.dropIf = nil
	w.noCampaign[a.id] = true
	w.restart(a.id)
	s.run(3 * time.Second)
	delete(w.noCampaign, a.id)
	w.restart(b.id)
	s.finish()
}

// A follower that asks the new leader before that leader's broker has
// promoted itself gets NOT_LEADER. The fetcher used to wait for a new
// leader then, and the broker steers it only when the leader or the epoch
// changes: it stayed idle, outside the ISR, for the whole epoch. The fix
// retries NOT_LEADER after a backoff.
func sysBugIdleAfterNotLeader(t sysT, seed int64, cfg sysConfig) {
	cfg.MinISR, cfg.Silent = 2, true
	s := newSysScenario(t, seed, cfg)
	w := s.w
	a := s.leader()
	s.waitISR(w.ids...)
	s.acked(1)
	o := s.others(a)
	b, c := o[0], o[1]
	w.noCampaign[c.id] = true
	// B's drive loop is busy for a while: it will promote itself late.
	b.driveHold = w.now + 2*time.Second
	w.crash(a.id, crashKill)
	s.waitFor("C to learn B's claim", 5*time.Second, func() bool { return c.core.state.Leader == b.id })
	delete(w.noCampaign, c.id)
	s.waitFor("B to promote itself", 5*time.Second, func() bool { return b.ldr != nil })
	s.waitFor("C to fetch from B", 5*time.Second, func() bool {
		id, e := c.fetcher.Leader()
		return id == b.id && e == b.ldr.Epoch() && c.fetcher.State() == replication.StateFetching
	})
	if w.ck.stats.notLeaderAnswers == 0 {
		s.fatalf("no NOT_LEADER answer: the script did not take the bug's path")
	}
	w.restart(a.id)
	s.finish()
}
