package replication

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type inflight struct {
	c    ISRChange
	due  int
	drop bool
}

// TestLeaderRandomized drives a Leader of replicas 1,2,3 over two
// partitions with random appends, fsyncs, follower fetches (some reordered,
// some followers silent for a while), Raft commits and drops of ISR changes
// after random delays, and re-elections of the same replica with a new
// epoch (old proposals then commit late and must be rejected). After every
// step it checks:
//
//   - the HW never decreases within an epoch and never passes the leader's
//     durable end;
//   - HW <= the true durable end of every AckSet member;
//   - every offset below the HW is durable on every member of the
//     committed ISR (HW <= their true durable ends);
//   - AckSet ⊇ committed ISR, and the Leader's ISR is the committed one;
//   - the HW does not advance while the committed ISR is below MinISR.
func TestLeaderRandomized(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 30
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runLeaderRandom(t, seed) })
	}
}

func runLeaderRandom(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 966))
	replicas := []int32{1, 2, 3}
	tps := []TopicPartition{tp0, tp1}
	minISR := 1 + rng.IntN(2)
	l := NewLeader(WithMinISR(minISR), WithIsrLag(5*time.Second))

	logEnd := map[TopicPartition]int64{}
	durable := map[TopicPartition]int64{}
	pos := map[int32]map[TopicPartition]int64{2: {}, 3: {}} // true durable ends
	reported := map[int32]map[TopicPartition][]int64{2: {}, 3: {}}
	silentUntil := map[int32]int{}
	committed := []int32{1, 2, 3}
	claim := int32(1)
	var queue []inflight
	prevHW := map[TopicPartition]int64{}
	now := t0

	configure := func() {
		if !l.Configure(replicas, 1, committed, claim) {
			t.Fatalf("seed %d: Configure(%d) refused", seed, claim)
		}
		for _, tp := range tps {
			l.AppendLocal(tp, logEnd[tp], durable[tp])
			// The HW this replica knew is still below every ISR member's
			// durable end.
			l.SeedHighWatermark(tp, prevHW[tp])
			prevHW[tp] = l.HighWatermark(tp)
		}
		reported = map[int32]map[TopicPartition][]int64{2: {}, 3: {}}
	}
	configure()

	trueEnd := func(r int32, tp TopicPartition) int64 {
		if r == 1 {
			return durable[tp]
		}
		return pos[r][tp]
	}

	for step := 0; step < 1500; step++ {
		under := len(committed) < minISR
		action := ""
		switch k := rng.IntN(20); {
		case k < 4:
			tp := tps[rng.IntN(2)]
			logEnd[tp] += int64(1 + rng.IntN(5))
			if rng.IntN(2) == 0 {
				durable[tp] += (logEnd[tp] - durable[tp] + 1) / 2
			}
			l.AppendLocal(tp, logEnd[tp], durable[tp])
			action = "append"
		case k < 5:
			for _, tp := range tps {
				durable[tp] = logEnd[tp]
				l.AppendLocal(tp, logEnd[tp], durable[tp])
			}
			action = "fsync"
		case k < 12:
			r := int32(2 + rng.IntN(2))
			if silentUntil[r] > step {
				continue
			}
			if rng.IntN(40) == 0 {
				silentUntil[r] = step + 20 + rng.IntN(200)
				continue
			}
			tp := tps[rng.IntN(2)]
			if n := len(reported[r][tp]); n > 0 && rng.IntN(8) == 0 {
				// A reordered, older fetch.
				l.FollowerFetch(r, tp, reported[r][tp][rng.IntN(n)], now)
				action = "stale fetch"
				break
			}
			// The follower copies some of the leader's log and fsyncs it.
			if gap := logEnd[tp] - pos[r][tp]; gap > 0 {
				pos[r][tp] += rng.Int64N(gap + 1)
			}
			reported[r][tp] = append(reported[r][tp], pos[r][tp])
			l.FollowerFetch(r, tp, pos[r][tp], now)
			action = fmt.Sprintf("fetch %d %v %d", r, tp, pos[r][tp])
		case k < 17:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			l.Tick(now)
			action = "tick"
		case k < 19:
			// Raft: deliver due changes (commit or drop).
			rest := queue[:0]
			for _, f := range queue {
				if f.due > step {
					rest = append(rest, f)
					continue
				}
				if f.drop && f.c.Epoch == claim {
					l.ProposalFailed(f.c)
					continue
				}
				if AcceptISRChange(claim, f.c) {
					committed = slices.Clone(f.c.ISR)
				}
				l.ISRCommitted(f.c.ISR, f.c.Epoch)
			}
			queue = rest
			action = "raft"
		default:
			if rng.IntN(8) != 0 {
				continue
			}
			// Re-election of the same replica; in-flight changes stay
			// queued and are rejected when they commit late.
			claim++
			configure()
			action = "reconfigure"
		}
		for _, c := range l.Proposals() {
			queue = append(queue, inflight{c: c, due: step + 1 + rng.IntN(30), drop: rng.IntN(6) == 0})
		}

		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d (%s, epoch %d, ISR %v, ack %v, minISR %d): %s", seed, step, action, claim, committed, l.AckSet(), minISR, fmt.Sprintf(format, args...))
		}
		ack := l.AckSet()
		for _, m := range committed {
			if !slices.Contains(ack, m) {
				fail("AckSet misses committed member %d", m)
			}
		}
		if !slices.Equal(l.ISR(), committed) {
			fail("leader ISR %v", l.ISR())
		}
		for _, tp := range tps {
			hw := l.HighWatermark(tp)
			if hw < prevHW[tp] {
				fail("%v HW decreased %d -> %d", tp, prevHW[tp], hw)
			}
			if hw > durable[tp] {
				fail("%v HW %d past leader durable end %d", tp, hw, durable[tp])
			}
			for _, m := range ack {
				if e := trueEnd(m, tp); hw > e {
					fail("%v HW %d past AckSet member %d durable end %d", tp, hw, m, e)
				}
			}
			for _, m := range committed {
				if e := trueEnd(m, tp); hw > e {
					fail("%v HW %d: offsets not durable on ISR member %d (end %d)", tp, hw, m, e)
				}
			}
			if under && len(committed) < minISR && hw != prevHW[tp] {
				fail("%v HW advanced %d -> %d with ISR below minISR", tp, prevHW[tp], hw)
			}
			prevHW[tp] = hw
		}
	}
}
