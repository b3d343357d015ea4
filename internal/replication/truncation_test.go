package replication

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestStartTruncation(t *testing.T) {
	tests := []struct {
		name string
		f    FollowerLog
		want TruncDecision
	}{
		{"empty log", FollowerLog{LogStart: 0, LogEnd: 0}, TruncDecision{Action: TruncDone, Offset: 0}},
		{"empty log after retention", FollowerLog{LogStart: 50, LogEnd: 50}, TruncDecision{Action: TruncDone, Offset: 50}},
		{"records without history (static mode leftovers)", FollowerLog{LogEnd: 10}, TruncDecision{Action: TruncAsk, Epoch: -1}},
		{"ask latest epoch", FollowerLog{History: []EpochEntry{{1, 0}, {4, 7}}, LogEnd: 10}, TruncDecision{Action: TruncAsk, Epoch: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := StartTruncation(tc.f); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideTruncation(t *testing.T) {
	h := []EpochEntry{{1, 0}, {3, 10}, {5, 20}}
	f := FollowerLog{History: h, LogEnd: 30}
	tests := []struct {
		name  string
		f     FollowerLog
		asked int32
		ans   LeaderEpochAnswer
		want  TruncDecision
	}{
		{"same epoch, leader ahead", f, 5, LeaderEpochAnswer{5, 40, 0}, TruncDecision{Action: TruncDone, Offset: 30}},
		{"same epoch, leader shorter (unreplicated tail)", f, 5, LeaderEpochAnswer{5, 25, 0}, TruncDecision{Action: TruncDone, Offset: 25}},
		{"leader has older epoch the follower has", f, 5, LeaderEpochAnswer{3, 15, 0}, TruncDecision{Action: TruncDone, Offset: 15}},
		{"leader's older epoch ends later than ours", f, 5, LeaderEpochAnswer{3, 25, 0}, TruncDecision{Action: TruncDone, Offset: 20}},
		{"leader epoch unknown to follower: truncate and ask lower", f, 5, LeaderEpochAnswer{4, 18, 0}, TruncDecision{Action: TruncAsk, Epoch: 3, Offset: 20, Truncate: true}},
		{"leader epoch below all of ours", FollowerLog{History: []EpochEntry{{3, 5}}, LogStart: 0, LogEnd: 9}, 3, LeaderEpochAnswer{2, 7, 0}, TruncDecision{Action: TruncDone, Offset: 5}},
		{"leader knows no epoch <= asked", f, 5, LeaderEpochAnswer{-1, -1, 100}, TruncDecision{Action: TruncReset, Offset: 100}},
		{"no history: discard and recopy", FollowerLog{LogEnd: 10}, -1, LeaderEpochAnswer{-1, -1, 3}, TruncDecision{Action: TruncReset, Offset: 3}},
		{"no history even if leader answers", FollowerLog{LogEnd: 10}, 2, LeaderEpochAnswer{2, 8, 0}, TruncDecision{Action: TruncReset, Offset: 0}},
		{"result below leader log start", f, 5, LeaderEpochAnswer{3, 12, 14}, TruncDecision{Action: TruncReset, Offset: 14}},
		{"follower entirely below leader log start", FollowerLog{History: []EpochEntry{{1, 0}}, LogEnd: 10}, 1, LeaderEpochAnswer{1, 50, 40}, TruncDecision{Action: TruncReset, Offset: 40}},
		{"protocol violation: newer epoch than asked", f, 5, LeaderEpochAnswer{6, 50, 0}, TruncDecision{Action: TruncReset, Offset: 0}},
		{"empty epoch range", FollowerLog{History: []EpochEntry{{1, 0}, {2, 5}, {3, 5}}, LogEnd: 8}, 3, LeaderEpochAnswer{2, 5, 0}, TruncDecision{Action: TruncDone, Offset: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideTruncation(tc.f, tc.asked, tc.ans); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEndOffsetForEpochAndTruncateHistory(t *testing.T) {
	h := []EpochEntry{{1, 0}, {3, 10}, {5, 20}}
	for _, tc := range []struct {
		ask  int32
		e    int32
		end  int64
		name string
	}{{0, -1, -1, "older than all"}, {1, 1, 10, "first"}, {2, 1, 10, "gap"}, {4, 3, 20, "middle"}, {5, 5, 30, "latest"}, {9, 5, 30, "newer"}} {
		if e, end := EndOffsetForEpoch(h, 30, tc.ask); e != tc.e || end != tc.end {
			t.Errorf("%s: EndOffsetForEpoch(%d) = %d,%d want %d,%d", tc.name, tc.ask, e, end, tc.e, tc.end)
		}
	}
	if got := TruncateHistory(h, 20); !slices.Equal(got, h[:2]) {
		t.Errorf("TruncateHistory(20) = %v", got)
	}
	if got := TruncateHistory(h, 21); !slices.Equal(got, h) {
		t.Errorf("TruncateHistory(21) = %v", got)
	}
	if got := TruncateHistory(h, 0); len(got) != 0 {
		t.Errorf("TruncateHistory(0) = %v", got)
	}
}

// simReplica models one replica's copy of a partition as the epoch of each
// offset from start, plus its epoch history.
type simReplica struct {
	start int64
	log   []int32
	hist  []EpochEntry
}

func (r *simReplica) end() int64 { return r.start + int64(len(r.log)) }

func (r *simReplica) view() FollowerLog {
	return FollowerLog{History: slices.Clone(r.hist), LogStart: r.start, LogEnd: r.end()}
}

func (r *simReplica) truncate(off int64) {
	if off >= r.end() {
		return
	}
	if off <= r.start {
		r.log = nil
	} else {
		r.log = r.log[:off-r.start]
	}
	r.hist = TruncateHistory(r.hist, off)
}

// becomeLeader starts epoch on r. Like storage.Log, the history gains the
// epoch at its first append (KIP-279's "the new leader records its epoch
// at its log end"): until then the leader answers questions about older
// epochs with its log end, which is where they end.
func (r *simReplica) becomeLeader(epoch int32) {}

func (r *simReplica) append(epoch int32, n int) {
	for range n {
		if len(r.hist) == 0 || r.hist[len(r.hist)-1].Epoch < epoch {
			r.hist = append(r.hist, EpochEntry{epoch, r.end()})
		}
		r.log = append(r.log, epoch)
	}
}

// copyFrom appends up to n of leader's records after the follower's end.
func (r *simReplica) copyFrom(l *simReplica, n int) {
	for i := 0; i < n && r.end() < l.end(); i++ {
		e := l.log[r.end()-l.start]
		if len(r.hist) == 0 || r.hist[len(r.hist)-1].Epoch < e {
			r.hist = append(r.hist, EpochEntry{e, r.end()})
		}
		r.log = append(r.log, e)
	}
}

// reconcile runs the truncation protocol of f against leader l and returns
// the number of questions asked.
func reconcile(t *testing.T, f, l *simReplica) int {
	t.Helper()
	d := StartTruncation(f.view())
	for asks := 0; ; asks++ {
		if asks > 64 {
			t.Fatal("truncation did not converge")
		}
		switch d.Action {
		case TruncDone:
			f.truncate(d.Offset)
			return asks
		case TruncReset:
			f.log, f.hist, f.start = nil, nil, d.Offset
			return asks
		case TruncAsk:
			if d.Truncate {
				f.truncate(d.Offset)
			}
			e, end := EndOffsetForEpoch(l.hist, l.end(), d.Epoch)
			d = DecideTruncation(f.view(), d.Epoch, LeaderEpochAnswer{Epoch: e, EndOffset: end, LogStart: l.start})
		default:
			t.Fatalf("bad action %v", d)
		}
	}
}

// isPrefix reports whether f's log is a prefix of l's (same start).
func isPrefix(f, l *simReplica) bool {
	return f.start == l.start && len(f.log) <= len(l.log) && slices.Equal(f.log, l.log[:len(f.log)])
}

func commonPrefix(a, b *simReplica) int64 {
	n := 0
	for n < len(a.log) && n < len(b.log) && a.log[n] == b.log[n] {
		n++
	}
	return a.start + int64(n)
}

// TestKIP279DoubleFailover is the fast double failover of KIP-279: the
// follower learns nothing between two elections and holds epochs the new
// leader never had. KIP-101's answer (the leader's log end when it lacks
// the epoch) leaves the logs diverged; the KIP-279 loop converges.
func TestKIP279DoubleFailover(t *testing.T) {
	build := func() (a, b *simReplica) {
		a, b = &simReplica{}, &simReplica{}
		// Epoch 1, leader A: m0 replicated to B, m1 only on A.
		a.becomeLeader(1)
		a.append(1, 2)
		b.copyFrom(a, 1)
		// A dies; B leads epoch 2 and writes m1' at offset 1, then dies
		// before anyone copies it.
		b.becomeLeader(2)
		b.append(2, 1)
		// A returns and leads epoch 3.
		a.becomeLeader(3)
		a.append(3, 1)
		return a, b
	}

	// KIP-101 only: the leader answers its log end for an unknown epoch.
	a, b := build()
	kip101 := func(f, l *simReplica) {
		e := f.hist[len(f.hist)-1].Epoch
		end := l.end()
		for i, h := range l.hist {
			if h.Epoch == e {
				end = l.end()
				if i+1 < len(l.hist) {
					end = l.hist[i+1].StartOffset
				}
			}
		}
		f.truncate(min(end, f.end()))
	}
	kip101(b, a)
	b.copyFrom(a, 10)
	if slices.Equal(a.log, b.log) {
		t.Fatalf("expected the KIP-101-only protocol to diverge: a=%v b=%v", a.log, b.log)
	}

	a, b = build()
	reconcile(t, b, a)
	if b.end() != 1 {
		t.Fatalf("truncated to %d, want 1 (first divergent offset)", b.end())
	}
	b.copyFrom(a, 10)
	if !slices.Equal(a.log, b.log) {
		t.Fatalf("diverged: a=%v b=%v", a.log, b.log)
	}
}

// TestTruncationIterates: the follower holds several epochs the leader
// never had, interleaved with the leader's; each answer is older than the
// question until they meet.
func TestTruncationIterates(t *testing.T) {
	l := &simReplica{log: []int32{1, 1, 2, 4, 4, 6, 6}, hist: []EpochEntry{{1, 0}, {2, 2}, {4, 3}, {6, 5}}}
	f := &simReplica{log: []int32{1, 1, 3, 3, 5, 5, 5, 5}, hist: []EpochEntry{{1, 0}, {3, 2}, {5, 4}}}
	asks := reconcile(t, f, l)
	if f.end() != 2 || asks != 3 {
		t.Fatalf("end %d after %d asks, want 2 after 3", f.end(), asks)
	}
	f.copyFrom(l, 100)
	if !slices.Equal(f.log, l.log) || !slices.Equal(f.hist, l.hist[:len(f.hist)]) {
		t.Fatalf("diverged: %v %v / %v %v", f.log, f.hist, l.log, l.hist)
	}
}

func TestTruncationResetBelowLeaderStart(t *testing.T) {
	l := &simReplica{start: 100, log: []int32{3, 3}, hist: []EpochEntry{{3, 100}}}
	f := &simReplica{log: []int32{1, 1, 1}, hist: []EpochEntry{{1, 0}}}
	reconcile(t, f, l)
	if f.start != 100 || len(f.log) != 0 {
		t.Fatalf("follower not reset to leader start: %+v", f)
	}
	// Records without history are discarded and recopied.
	f = &simReplica{log: []int32{0, 0, 0, 0}}
	l = &simReplica{log: []int32{1, 1}, hist: []EpochEntry{{1, 0}}}
	reconcile(t, f, l)
	f.copyFrom(l, 10)
	if !slices.Equal(f.log, l.log) {
		t.Fatalf("untrusted data kept: %v", f.log)
	}
}

// TestTruncationRandomFailovers runs random elections (any replica, epochs
// increasing), appends and partial replication over three replicas. A
// follower reconciles once per epoch before copying. After every
// reconciliation the follower's log is a prefix of the leader's and was
// cut exactly at the first divergent offset: nothing they agree on is
// thrown away.
func TestTruncationRandomFailovers(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 279))
			reps := []*simReplica{{}, {}, {}}
			synced := make([]int32, 3)
			leader, epoch := 0, int32(0)
			for step := 0; step < 300; step++ {
				switch k := rng.IntN(10); {
				case k == 0:
					epoch++
					leader = rng.IntN(3)
					reps[leader].becomeLeader(epoch)
					synced[leader] = epoch
				case k < 5:
					reps[leader].append(epoch, 1+rng.IntN(3))
				default:
					i := rng.IntN(3)
					if i == leader || epoch == 0 {
						continue
					}
					f, l := reps[i], reps[leader]
					if synced[i] != epoch {
						want := commonPrefix(f, l)
						before := fmt.Sprintf("f=%v %v\n l=%v %v", f.log, f.hist, l.log, l.hist)
						reconcile(t, f, l)
						if !isPrefix(f, l) {
							t.Fatalf("step %d: follower %d not a prefix of leader %d:\n f=%v %v\n l=%v %v", step, i, leader, f.log, f.hist, l.log, l.hist)
						}
						if f.end() != want {
							t.Fatalf("step %d: truncated to %d, common prefix is %d\n %s", step, f.end(), want, before)
						}
						synced[i] = epoch
					}
					f.copyFrom(l, rng.IntN(5))
					if !isPrefix(f, l) {
						t.Fatalf("step %d: copy broke prefix", step)
					}
				}
			}
		})
	}
}
