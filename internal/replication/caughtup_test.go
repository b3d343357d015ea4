package replication

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// walkCaughtUpAt is the definition caughtUpAt keeps incrementally: the
// earliest, over the group's partitions, of the latest of the epoch's
// start, the partition's appearance and the follower's last catch-up on
// it (capped at now; the epoch's start when there are no partitions).
func walkCaughtUpAt(l *Leader, r int32) time.Time {
	if len(l.parts) == 0 {
		return l.epochStart
	}
	t := l.now
	for _, p := range l.parts {
		base := l.epochStart
		if p.hasAppear && p.appeared.After(base) {
			base = p.appeared
		}
		if rp := p.pos[r]; rp.hasCaughtUp && rp.caughtUp.After(base) {
			base = rp.caughtUp
		}
		if base.Before(t) {
			t = base
		}
	}
	return t
}

// TestCaughtUpAtMatchesWalk drives a Leader through random appends,
// fetches (at the log end, behind it, and below an earlier fetch, which
// resets the catch-up time), partitions appearing and being removed, and
// time passing, and after every step compares each follower's caught-up
// time with a walk over every partition.
func TestCaughtUpAtMatchesWalk(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			l := NewLeader(WithIsrLag(5 * time.Second))
			l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2, 3}, 1)
			now := t0
			ends := map[TopicPartition]int64{}
			var tps []TopicPartition
			add := func() {
				tp := TopicPartition{Topic: fmt.Sprint("t", rng.IntN(4)), Partition: int32(rng.IntN(16))}
				if _, ok := ends[tp]; !ok {
					tps = append(tps, tp)
				}
				ends[tp] += int64(rng.IntN(4))
				l.AppendLocal(tp, ends[tp], ends[tp])
			}
			// Partitions reported before the epoch's clock starts have no
			// appearance time.
			for range rng.IntN(4) {
				add()
			}
			for step := 0; step < 2000; step++ {
				switch k := rng.IntN(10); {
				case k < 2:
					add()
				case k < 3 && len(tps) > 0:
					i := rng.IntN(len(tps))
					l.RemovePartition(tps[i])
					delete(ends, tps[i])
					tps = append(tps[:i], tps[i+1:]...)
				case k < 8 && len(tps) > 0:
					tp := tps[rng.IntN(len(tps))]
					off := ends[tp]
					if rng.IntN(3) == 0 {
						off -= int64(rng.IntN(5)) // behind, possibly below its last fetch
					}
					l.FollowerFetch(int32(2+rng.IntN(2)), tp, max(off, 0), now)
				default:
					now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
					l.Tick(now)
				}
				if !l.haveNow {
					continue
				}
				for _, r := range []int32{2, 3} {
					if got, want := l.caughtUpAt(l.followers[r]), walkCaughtUpAt(l, r); !got.Equal(want) {
						t.Fatalf("step %d follower %d: caughtUpAt %v, walk %v", step, r, got.Sub(t0), want.Sub(t0))
					}
				}
			}
		})
	}
}

// BenchmarkFollowerFetch measures a follower fetch that finds the follower
// caught up, the steady state of a replication group, by partition count:
// its cost should not grow with the number of partitions.
func BenchmarkFollowerFetch(b *testing.B) {
	for _, n := range []int{1, 64, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := NewLeader()
			l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2, 3}, 1)
			tps := make([]TopicPartition, n)
			for i := range tps {
				tps[i] = TopicPartition{Topic: "t", Partition: int32(i)}
				l.AppendLocal(tps[i], 1, 1)
			}
			now := t0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tp := tps[i%n]
				now = now.Add(time.Microsecond)
				l.AppendLocal(tp, int64(i+2), int64(i+2))
				l.FollowerFetch(2, tp, int64(i+2), now)
				l.FollowerFetch(3, tp, int64(i+2), now)
			}
		})
	}
}
