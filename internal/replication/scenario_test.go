package replication

import (
	"slices"
	"testing"
	"time"
)

// TestKIP101 is KIP-101's first scenario: follower B learns the high
// watermark one fetch late, restarts, and then leader A dies. Truncating to
// B's own high watermark on restart would lose m1, which acks=all had
// acknowledged; asking A where B's epoch ends keeps it.
func TestKIP101(t *testing.T) {
	a, b := &simReplica{}, &simReplica{}
	lead := NewLeader()
	lead.Configure([]int32{1, 2}, 1, []int32{1, 2}, 1)
	lead.Tick(t0)

	a.append(1, 2) // m0, m1
	lead.AppendLocal(tp0, a.end(), a.end())
	lead.FollowerFetch(2, tp0, b.end(), at(1)) // fetch at 0: B learns HW 0
	bHW := lead.HighWatermark(tp0)
	b.copyFrom(a, 2)
	lead.FollowerFetch(2, tp0, b.end(), at(2)) // fetch at 2: HW 2 on A only
	acked := lead.HighWatermark(tp0)
	if acked != 2 || bHW != 0 {
		t.Fatalf("acked HW %d, B's HW %d", acked, bHW)
	}

	// The pre-KIP-101 rule: B truncates to its own HW on restart.
	if bHW >= acked {
		t.Fatal("scenario does not exercise the late HW")
	}

	// B restarts and, following A in epoch 1, reconciles by epoch.
	reconcile(t, b, a)
	if b.end() != 2 {
		t.Fatalf("B truncated to %d, want 2", b.end())
	}
	// A dies. B is in the ISR of its Raft log, so it stands and wins.
	if !Eligible(2, lead.ISR(), RoleFollower, true) {
		t.Fatal("B not eligible")
	}
	nl := NewLeader()
	nl.Configure([]int32{1, 2}, 2, []int32{1, 2}, 2)
	nl.AppendLocal(tp0, b.end(), b.end())
	nl.SeedHighWatermark(tp0, bHW)
	if b.end() < acked {
		t.Fatalf("acknowledged offset lost: B ends at %d, acked %d", b.end(), acked)
	}
	// The new leader's HW starts from what it knew and never passes the
	// ISR: A is gone, so it stays until A returns or is shrunk out.
	if hw := nl.HighWatermark(tp0); hw != bHW {
		t.Fatalf("new leader HW = %d, want %d", hw, bHW)
	}
}

// TestKIP966LastReplicaStanding: with 3 replicas the ISR shrinks to the
// leader alone. With MinISR 1 (the default) the HW keeps advancing on one
// copy, the hazard KIP-966 describes; with MinISR 2 it does not, so no
// record is acknowledged that exists on a single disk. A replica that
// restarted uncleanly is not eligible until it has caught up.
func TestKIP966LastReplicaStanding(t *testing.T) {
	run := func(minISR int) (hwAtShrink, hwAfter int64, l *Leader) {
		l = NewLeader(WithMinISR(minISR), WithIsrLag(5*time.Second))
		l.Configure([]int32{1, 2, 3}, 1, []int32{1, 2, 3}, 1)
		l.AppendLocal(tp0, 10, 10)
		l.Tick(t0)
		l.FollowerFetch(2, tp0, 10, t0)
		l.FollowerFetch(3, tp0, 10, t0)
		if hw := l.HighWatermark(tp0); hw != 10 {
			t.Fatalf("HW = %d", hw)
		}
		// 2 and 3 stop fetching (partitioned); the leader keeps writing.
		for i := 1; i <= 20; i++ {
			now := at(float64(i))
			l.AppendLocal(tp0, int64(10+i), int64(10+i))
			l.Tick(now)
			for _, c := range l.Proposals() {
				if c.Expand {
					t.Fatalf("unexpected expand %+v", c)
				}
				l.ISRCommitted(c.ISR, c.Epoch)
			}
		}
		if !slices.Equal(l.ISR(), []int32{1}) {
			t.Fatalf("ISR = %v, want [1]", l.ISR())
		}
		return 10, l.HighWatermark(tp0), l
	}

	_, hw1, _ := run(1)
	if hw1 != 30 {
		t.Fatalf("minISR 1: HW = %d, want 30 (acknowledged on one replica only)", hw1)
	}
	at10, hw2, l := run(2)
	if hw2 > at10 || !l.UnderMinISR() {
		t.Fatalf("minISR 2: HW advanced to %d with ISR [1]", hw2)
	}

	// The leader (1) now crashes uncleanly and loses its unflushed tail.
	// 2 and 3 are outside the ISR and 1 restarted uncleanly: nobody may
	// stand, so the group waits rather than electing a replica that may
	// miss acknowledged records.
	isr := l.ISR()
	for _, c := range []Candidacy{
		{Self: 1, ISR: isr, HasISR: true, UncleanRestart: true},
		{Self: 2, ISR: isr, HasISR: true},
		{Self: 3, ISR: isr, HasISR: true},
	} {
		if c.Eligible() {
			t.Fatalf("%+v eligible", c)
		}
	}

	// With ISR {1,2}: 1 crashes uncleanly, 2 takes over, 1 is not
	// eligible again until it has followed 2 up to the HW.
	isr = []int32{1, 2}
	c1 := Candidacy{Self: 1, ISR: isr, HasISR: true, UncleanRestart: true}
	if c1.Eligible() || !(Candidacy{Self: 2, ISR: isr, HasISR: true}).Eligible() {
		t.Fatal("eligibility after unclean restart")
	}
	one := &simReplica{log: []int32{1, 1, 1, 1}, hist: []EpochEntry{{1, 0}}} // lost its tail
	two := &simReplica{log: []int32{1, 1, 1, 1, 1, 1}, hist: []EpochEntry{{1, 0}}}
	two.append(2, 2)
	nl := NewLeader(WithMinISR(2))
	nl.Configure([]int32{1, 2, 3}, 2, isr, 2)
	nl.AppendLocal(tp0, two.end(), two.end())
	nl.SeedHighWatermark(tp0, 6)
	nl.Tick(t0)
	reconcile(t, one, two)
	one.copyFrom(two, 100)
	nl.FollowerFetch(1, tp0, one.end(), at(1))
	if one.end() >= nl.HighWatermark(tp0) {
		c1.UncleanRestart = false // the owner clears the flag once caught up
	}
	if !c1.Eligible() || !slices.Equal(one.log, two.log) {
		t.Fatal("replica 1 did not become eligible after catching up")
	}
}
