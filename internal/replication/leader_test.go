package replication

import (
	"slices"
	"testing"
	"time"
)

var (
	tp0 = TopicPartition{Topic: "t", Partition: 0}
	tp1 = TopicPartition{Topic: "t", Partition: 1}
	t0  = time.Unix(1_000_000, 0)
)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// newGroup returns a leader 1 of replicas 1,2,3 with the given ISR at
// epoch 5, one partition whose log and durable ends are end.
func newGroup(t *testing.T, isr []int32, end int64, opts ...Option) *Leader {
	t.Helper()
	l := NewLeader(opts...)
	if !l.Configure([]int32{1, 2, 3}, 1, isr, 5) {
		t.Fatal("Configure refused")
	}
	l.AppendLocal(tp0, end, end)
	l.Tick(t0)
	return l
}

func TestHighWatermarkRules(t *testing.T) {
	type fetch struct {
		r   int32
		off int64
	}
	tests := []struct {
		name          string
		isr           []int32
		logEnd, dur   int64
		opts          []Option
		fetches       []fetch
		want          int64
		wantUnderMin  bool
		wantAckSetLen int
	}{
		{"min over ISR", []int32{1, 2, 3}, 10, 10, nil, []fetch{{2, 7}, {3, 5}}, 5, false, 3},
		{"leader durable end caps", []int32{1, 2, 3}, 10, 4, nil, []fetch{{2, 10}, {3, 10}}, 4, false, 3},
		{"fetch past log end is clamped", []int32{1, 2}, 10, 10, nil, []fetch{{2, 50}}, 10, false, 2},
		{"unknown ISR member holds", []int32{1, 2, 3}, 10, 10, nil, []fetch{{2, 10}}, 0, false, 3},
		{"follower at the epoch start expands and counts at once", []int32{1, 2}, 10, 10, nil, []fetch{{2, 8}, {3, 10}}, 8, false, 3},
		{"follower at HW but below the epoch start stays out", []int32{1, 2}, 10, 10, nil, []fetch{{2, 8}, {3, 1}}, 8, false, 2},
		{"a lower fetch is the position (lost records)", []int32{1, 2}, 10, 10, nil, []fetch{{2, 8}, {2, 3}}, 3, false, 2},
		{"leader alone, minISR 1", []int32{1}, 10, 9, nil, nil, 9, false, 1},
		{"leader alone, minISR 2 holds", []int32{1}, 10, 10, []Option{WithMinISR(2)}, nil, 0, true, 1},
		{"two of three, minISR 2", []int32{1, 2}, 10, 10, []Option{WithMinISR(2)}, []fetch{{2, 6}}, 6, false, 2},
		{"static lagMax 0: leader durable end", []int32{1}, 10, 10, []Option{WithStatic(0)}, []fetch{{2, 9}, {3, 2}}, 10, false, 1},
		{"static lagMax 3: near follower counts", []int32{1}, 10, 10, []Option{WithStatic(3)}, []fetch{{2, 8}, {3, 2}}, 8, false, 1},
		{"static lagMax 3: far follower ignored", []int32{1}, 10, 10, []Option{WithStatic(3)}, []fetch{{2, 6}}, 10, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLeader(tc.opts...)
			l.Configure([]int32{1, 2, 3}, 1, tc.isr, 5)
			// The log grows first and is fsynced after the fetches.
			l.AppendLocal(tp0, tc.logEnd, 0)
			for _, f := range tc.fetches {
				l.FollowerFetch(f.r, tp0, f.off, t0)
			}
			l.AppendLocal(tp0, tc.logEnd, tc.dur)
			if got := l.HighWatermark(tp0); got != tc.want {
				t.Errorf("HW = %d, want %d", got, tc.want)
			}
			if got := l.UnderMinISR(); got != tc.wantUnderMin {
				t.Errorf("UnderMinISR = %v, want %v", got, tc.wantUnderMin)
			}
			if got := len(l.AckSet()); got != tc.wantAckSetLen {
				t.Errorf("AckSet = %v, want %d members", l.AckSet(), tc.wantAckSetLen)
			}
		})
	}
}

func TestHighWatermarkNeverDecreasesWithinEpoch(t *testing.T) {
	l := newGroup(t, []int32{1, 2}, 10)
	l.FollowerFetch(2, tp0, 10, at(1))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d", hw)
	}
	// Replica 3 becomes an expand candidate only after reaching the HW;
	// before that, a pending expand would lower the min, which is guarded.
	l.AppendLocal(tp0, 20, 20)
	l.FollowerFetch(3, tp0, 10, at(2))
	if c, ok := l.Pending(); !ok || !c.Expand || c.Replica != 3 {
		t.Fatalf("pending = %+v %v, want expand 3", c, ok)
	}
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d after expand, want 10 (held, not lowered)", hw)
	}
	l.FollowerFetch(2, tp0, 20, at(3))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10: pending expand member 3 is at 10", hw)
	}
	l.FollowerFetch(3, tp0, 15, at(3))
	if hw := l.HighWatermark(tp0); hw != 15 {
		t.Fatalf("HW = %d, want 15", hw)
	}
}

func TestSeedHighWatermark(t *testing.T) {
	l := NewLeader()
	l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2, 3}, 7)
	l.AppendLocal(tp0, 10, 8)
	l.SeedHighWatermark(tp0, 9)
	if hw := l.HighWatermark(tp0); hw != 8 {
		t.Fatalf("seed clamped to durable end: HW = %d, want 8", hw)
	}
	l.SeedHighWatermark(tp0, 3)
	if hw := l.HighWatermark(tp0); hw != 8 {
		t.Fatalf("seed lowered HW to %d", hw)
	}
}

func TestShrinkPendingStillCounts(t *testing.T) {
	l := newGroup(t, []int32{1, 2, 3}, 10, WithIsrLag(10*time.Second))
	l.FollowerFetch(2, tp0, 10, at(1))
	l.FollowerFetch(3, tp0, 4, at(1))
	l.Tick(at(9))
	if _, ok := l.Pending(); ok {
		t.Fatal("shrink proposed before the lag elapsed")
	}
	l.FollowerFetch(2, tp0, 10, at(10.5))
	l.Tick(at(10.5))
	ps := l.Proposals()
	if len(ps) != 1 || ps[0].Expand || ps[0].Replica != 3 || ps[0].Epoch != 5 || !slices.Equal(ps[0].ISR, []int32{1, 2}) {
		t.Fatalf("proposals = %+v, want shrink of 3 at epoch 5", ps)
	}
	if len(l.Proposals()) != 0 {
		t.Fatal("proposal handed out twice")
	}
	if got := l.AckSet(); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("AckSet = %v while shrink pending, want 1,2,3", got)
	}
	if hw := l.HighWatermark(tp0); hw != 4 {
		t.Fatalf("HW = %d, want 4 while 3 still counts", hw)
	}
	if l.ISRCommitted([]int32{1, 2}, 4) {
		t.Fatal("commit from older epoch applied")
	}
	if !l.ISRCommitted([]int32{1, 2}, 5) {
		t.Fatal("commit refused")
	}
	if got := l.AckSet(); !slices.Equal(got, []int32{1, 2}) {
		t.Fatalf("AckSet = %v after commit", got)
	}
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d after shrink commit, want 10", hw)
	}
}

func TestShrinkUnderMinISRStopsHW(t *testing.T) {
	l := newGroup(t, []int32{1, 2}, 10, WithMinISR(2), WithIsrLag(time.Second))
	l.FollowerFetch(2, tp0, 10, at(0))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d", hw)
	}
	l.AppendLocal(tp0, 20, 20)
	l.Tick(at(5))
	if c, ok := l.Pending(); !ok || c.Expand {
		t.Fatal("expected pending shrink of 2")
	}
	// 2 catches up but the shrink is pending: the ISR is about to be 1.
	l.FollowerFetch(2, tp0, 20, at(5))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10 while a shrink below minISR is pending", hw)
	}
	l.ISRCommitted([]int32{1}, 5)
	l.AppendLocal(tp0, 30, 30)
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10 with ISR below minISR", hw)
	}
	// 2 is back at the HW and not lagging: expand; it counts for acks at
	// once but the ISR is not 2 until the expand commits.
	l.FollowerFetch(2, tp0, 30, at(5.5))
	if c, ok := l.Pending(); !ok || !c.Expand {
		t.Fatal("expected pending expand of 2")
	}
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10 before the expand commits", hw)
	}
	l.ISRCommitted([]int32{1, 2}, 5)
	if hw := l.HighWatermark(tp0); hw != 30 {
		t.Fatalf("HW = %d, want 30", hw)
	}
}

func TestExpandNeedsEveryPartitionAtHW(t *testing.T) {
	l := NewLeader()
	l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2}, 5)
	// Empty at the start of the epoch, then written.
	l.AppendLocal(tp0, 0, 0)
	l.AppendLocal(tp1, 0, 0)
	l.AppendLocal(tp0, 10, 10)
	l.AppendLocal(tp1, 10, 10)
	l.FollowerFetch(2, tp0, 10, t0)
	l.FollowerFetch(2, tp1, 6, t0)
	l.FollowerFetch(3, tp0, 10, t0)
	if _, ok := l.Pending(); ok {
		t.Fatal("expand before 3 fetched every partition")
	}
	l.FollowerFetch(3, tp1, 5, t0)
	if _, ok := l.Pending(); ok {
		t.Fatal("expand with tp1 below the HW (6)")
	}
	l.FollowerFetch(3, tp1, 6, t0)
	c, ok := l.Pending()
	if !ok || !c.Expand || c.Replica != 3 || !slices.Equal(c.ISR, []int32{1, 2, 3}) {
		t.Fatalf("pending = %+v %v", c, ok)
	}
	if got := l.AckSet(); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("AckSet = %v, want expand counted at once", got)
	}
}

func TestProposalFailedAllowsRetry(t *testing.T) {
	l := newGroup(t, []int32{1, 2}, 10)
	l.FollowerFetch(3, tp0, 10, t0)
	ps := l.Proposals()
	if len(ps) != 1 || !ps[0].Expand {
		t.Fatalf("proposals = %+v", ps)
	}
	l.ProposalFailed(ISRChange{Epoch: 5, ISR: []int32{1, 3}, Replica: 3, Expand: true})
	if _, ok := l.Pending(); !ok {
		t.Fatal("a different change's failure cleared the pending one")
	}
	l.ProposalFailed(ps[0])
	// 3 still qualifies, so the change is pending again and handed out
	// once more.
	if ps := l.Proposals(); len(ps) != 1 || !ps[0].Expand || ps[0].Replica != 3 {
		t.Fatalf("no retry: %+v", ps)
	}
	// Once 3 no longer qualifies (it lags), a failure leaves nothing
	// pending and 3 out of the acks=all set.
	l.Tick(at(60))
	l.ProposalFailed(ISRChange{Epoch: 5, ISR: []int32{1, 2, 3}, Replica: 3, Expand: true})
	if got := l.AckSet(); !slices.Equal(got, []int32{1, 2}) {
		t.Fatalf("AckSet = %v after failure", got)
	}
}

func TestFollowerOneBehindUnderLoadStaysInSync(t *testing.T) {
	// A follower that always fetches the previous fetch's log end is never
	// at the current log end under constant load, but is caught up.
	l := newGroup(t, []int32{1, 2, 3}, 0, WithIsrLag(2*time.Second))
	l.FollowerFetch(3, tp0, 0, t0)
	for i := 1; i <= 100; i++ {
		now := at(float64(i) * 0.5)
		l.AppendLocal(tp0, int64(i), int64(i))
		l.FollowerFetch(2, tp0, int64(i-1), now)
		l.FollowerFetch(3, tp0, 0, now) // stuck
		l.Tick(now)
		if c, ok := l.Pending(); ok {
			if c.Replica != 3 || c.Expand {
				t.Fatalf("step %d: pending %+v, want only a shrink of 3", i, c)
			}
			return
		}
	}
	t.Fatal("stuck follower 3 never proposed out")
}

func TestConfigureOlderEpochIgnored(t *testing.T) {
	l := newGroup(t, []int32{1, 2}, 10)
	if l.Configure([]int32{1, 2, 3}, 1, []int32{1}, 5) || l.Configure([]int32{1, 2, 3}, 1, []int32{1}, 4) {
		t.Fatal("Configure accepted a non-newer epoch")
	}
	if !l.Configure([]int32{1, 2, 3}, 1, []int32{1}, 6) || l.Epoch() != 6 || l.HighWatermark(tp0) != 0 {
		t.Fatal("new epoch did not reset")
	}
}

func TestAcceptISRChange(t *testing.T) {
	c := ISRChange{Epoch: 3, ISR: []int32{1, 2}, Replica: 3}
	if !AcceptISRChange(3, c) || AcceptISRChange(4, c) || AcceptISRChange(2, c) {
		t.Fatal("AcceptISRChange")
	}
}

func TestStaticModeNoProposals(t *testing.T) {
	l := newGroup(t, []int32{1}, 10, WithStatic(2), WithIsrLag(time.Second))
	l.FollowerFetch(2, tp0, 10, at(0))
	l.Tick(at(100))
	if ps := l.Proposals(); len(ps) != 0 {
		t.Fatalf("static mode proposed %+v", ps)
	}
	if l.ISRCommitted([]int32{1, 2}, 5) {
		t.Fatal("static mode applied an ISR")
	}
}

// TestPerPartitionMinISR: the ISR is one set for the group, but each
// partition compares it with its own minimum (its topic's
// min.insync.replicas).
func TestPerPartitionMinISR(t *testing.T) {
	l := NewLeader(WithMinISR(2))
	l.SetMinISR(tp1, 3) // before the partition exists: no HW under the default
	l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2}, 5)
	l.AppendLocal(tp0, 10, 10)
	l.AppendLocal(tp1, 10, 10)
	l.FollowerFetch(2, tp0, 10, t0)
	l.FollowerFetch(2, tp1, 10, t0)
	if got := l.HighWatermark(tp0); got != 10 {
		t.Fatalf("tp0 (group default 2, ISR of 2): HW = %d, want 10", got)
	}
	if got := l.HighWatermark(tp1); got != 0 {
		t.Fatalf("tp1 (min 3, ISR of 2): HW = %d, want 0", got)
	}
	if l.PartitionUnderMinISR(tp0) || !l.PartitionUnderMinISR(tp1) {
		t.Fatalf("under min: tp0 %v tp1 %v, want false true", l.PartitionUnderMinISR(tp0), l.PartitionUnderMinISR(tp1))
	}
	if l.InSyncCount() != 2 || l.MinISR(tp1) != 3 || l.MinISR(tp0) != 2 {
		t.Fatalf("InSyncCount %d, MinISR tp0 %d tp1 %d", l.InSyncCount(), l.MinISR(tp0), l.MinISR(tp1))
	}
	// Lowering the topic's minimum releases the held high watermark.
	l.SetMinISR(tp1, 2)
	if got := l.HighWatermark(tp1); got != 10 {
		t.Fatalf("tp1 after min 2: HW = %d, want 10", got)
	}
	// A topic that accepts a single replica keeps going on the leader
	// alone while the default holds the others.
	l.SetMinISR(tp0, 1)
	l.SetMinISR(tp1, 0) // back to the group default
	l.Configure([]int32{1, 2, 3}, 1, []int32{1}, 6)
	l.AppendLocal(tp0, 20, 20)
	l.AppendLocal(tp1, 20, 20)
	if got := l.HighWatermark(tp0); got != 20 {
		t.Fatalf("tp0 (min 1, ISR of 1): HW = %d, want 20", got)
	}
	if got := l.HighWatermark(tp1); got != 0 {
		t.Fatalf("tp1 (default 2, ISR of 1): HW = %d, want 0", got)
	}
}

// TestSilentRemoval: a new leader proposes out at once an ISR member it has
// neither heard from nor seen fetching (the dead previous leader), so
// acks=all stops waiting for it long before the ISR lag.
func TestSilentRemoval(t *testing.T) {
	const grace = 150 * time.Millisecond
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	l := newGroup(t, []int32{1, 2, 3}, 10, WithMinISR(2), WithIsrLag(10*time.Second), WithSilentRemoval(grace))
	l.Heard(2)
	l.Tick(ms(100))
	if c, ok := l.Pending(); ok {
		t.Fatalf("removal %+v proposed before the grace", c)
	}
	l.Tick(ms(150))
	ps := l.Proposals()
	if len(ps) != 1 || ps[0].Expand || ps[0].Replica != 3 || !slices.Equal(ps[0].ISR, []int32{1, 2}) {
		t.Fatalf("proposals = %+v, want removal of silent 3", ps)
	}
	// Until it commits, acks=all still waits for 3.
	l.FollowerFetch(2, tp0, 10, ms(160))
	if hw := l.HighWatermark(tp0); hw != 0 {
		t.Fatalf("HW = %d while the removal is pending, want 0", hw)
	}
	l.ISRCommitted([]int32{1, 2}, 5)
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d after the removal committed, want 10", hw)
	}
	// 2 was heard: never removed by this rule; nor would it be at the
	// minimum. Only the ISR lag removes it.
	l.Tick(ms(9000))
	if c, ok := l.Pending(); ok {
		t.Fatalf("removal %+v proposed below the minimum ISR before the lag", c)
	}
}

func TestSilentRemovalSparesLiveAndMinimum(t *testing.T) {
	const grace = 150 * time.Millisecond
	tests := []struct {
		name  string
		isr   []int32
		opts  []Option
		setup func(l *Leader)
		want  int32 // replica removed, 0 for none
	}{
		{"disabled by default", []int32{1, 2, 3}, []Option{WithMinISR(2)}, func(*Leader) {}, 0},
		{"fetching follower spared", []int32{1, 2, 3}, []Option{WithMinISR(2)}, func(l *Leader) {
			l.Heard(2)
			l.FollowerFetch(3, tp0, 0, t0)
		}, 0},
		{"heard follower spared", []int32{1, 2, 3}, []Option{WithMinISR(2)}, func(l *Leader) { l.Heard(2); l.Heard(3) }, 0},
		{"lowest silent first", []int32{1, 2, 3}, []Option{WithMinISR(1)}, func(*Leader) {}, 2},
		{"not below the minimum", []int32{1, 2}, []Option{WithMinISR(2)}, func(*Leader) {}, 0},
		{"minimum 1 lets the ISR reach the leader", []int32{1, 2}, []Option{WithMinISR(1)}, func(*Leader) {}, 2},
		{"outside the ISR: nothing to remove", []int32{1, 2}, []Option{WithMinISR(1)}, func(l *Leader) { l.Heard(2) }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]Option{WithIsrLag(10 * time.Second)}, tc.opts...)
			if tc.name != "disabled by default" {
				opts = append(opts, WithSilentRemoval(grace))
			}
			l := newGroup(t, tc.isr, 0, opts...)
			tc.setup(l)
			l.Tick(t0.Add(time.Second))
			c, ok := l.Pending()
			switch {
			case tc.want == 0 && ok:
				t.Fatalf("pending %+v, want none", c)
			case tc.want != 0 && (!ok || c.Expand || c.Replica != tc.want):
				t.Fatalf("pending %+v (%v), want removal of %d", c, ok, tc.want)
			}
		})
	}
}

// TestLostRecordsLeaveISR: a follower whose fetch position goes backwards
// below the high watermark (it restarted uncleanly and its disk lost what
// it had synced) no longer holds every committed record: it is proposed
// out of the ISR at once, its old position stops counting, and it comes
// back by the ordinary expand once it reached the high watermark again.
func TestLostRecordsLeaveISR(t *testing.T) {
	l := newGroup(t, []int32{1, 2, 3}, 10, WithMinISR(2), WithIsrLag(10*time.Second))
	l.FollowerFetch(2, tp0, 10, at(0.1))
	l.FollowerFetch(3, tp0, 10, at(0.1))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10", hw)
	}
	l.AppendLocal(tp0, 14, 14)
	l.FollowerFetch(3, tp0, 14, at(0.2))
	// 3 restarts having lost everything from 6 on.
	l.FollowerFetch(3, tp0, 6, at(0.3))
	ps := l.Proposals()
	if len(ps) != 1 || ps[0].Expand || ps[0].Replica != 3 {
		t.Fatalf("proposals = %+v, want removal of 3", ps)
	}
	// Its old position (14) no longer counts: 2 at 14 does not make 14
	// committed while 3 (still in the acks=all set) is at 6.
	l.FollowerFetch(2, tp0, 14, at(0.4))
	if hw := l.HighWatermark(tp0); hw != 10 {
		t.Fatalf("HW = %d, want 10 (3 is at 6 and still counts until removed)", hw)
	}
	l.ISRCommitted([]int32{1, 2}, 5)
	if hw := l.HighWatermark(tp0); hw != 14 {
		t.Fatalf("HW = %d after the removal, want 14", hw)
	}
	// Not back until it reached the high watermark.
	l.FollowerFetch(3, tp0, 12, at(0.5))
	if c, ok := l.Pending(); ok {
		t.Fatalf("pending %+v before 3 caught up", c)
	}
	l.FollowerFetch(3, tp0, 14, at(0.6))
	if c, ok := l.Pending(); !ok || !c.Expand || c.Replica != 3 {
		t.Fatalf("pending %+v (%v), want expand of 3", c, ok)
	}
}

// TestDeletedPartitionDoesNotShrinkISR: followers stop fetching a deleted
// partition; it must not make them lag (found by test/cluster: the ISR
// shrank to the leader alone after every topic deletion).
func TestDeletedPartitionDoesNotShrinkISR(t *testing.T) {
	l := NewLeader(WithIsrLag(time.Second))
	l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2, 3}, 1)
	a, b := TopicPartition{Topic: "a/1"}, TopicPartition{Topic: "b/2"}
	t0 := time.Unix(1000, 0)
	l.Tick(t0)
	l.AppendLocal(a, 5, 5)
	l.AppendLocal(b, 5, 5)
	for _, f := range []int32{2, 3} {
		l.FollowerFetch(f, a, 5, t0)
		l.FollowerFetch(f, b, 5, t0)
	}
	l.RemovePartition(a)
	for now := t0; now.Before(t0.Add(3 * time.Second)); now = now.Add(100 * time.Millisecond) {
		l.Tick(now)
		for _, f := range []int32{2, 3} {
			l.FollowerFetch(f, b, 5, now)
		}
		if ps := l.Proposals(); len(ps) > 0 {
			t.Fatalf("at +%v: %+v", now.Sub(t0), ps)
		}
	}
}
