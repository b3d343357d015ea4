package replication_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/broker"
)

func markerPath(n *node) string { return filepath.Join(n.cfg.DataDir, broker.CleanShutdownFile) }

// uncleanFlag is a replica's raft.unclean_restart status field.
func uncleanFlag(t *testing.T, n *node) bool {
	t.Helper()
	raft, _ := status(t, n)["raft"].(map[string]any)
	return raft["unclean_restart"] == true
}

// TestUncleanRestartMayNotLead: a clean stop leaves the clean-shutdown
// marker and a start removes it. A replica that restarts without it (a
// crash) may not lead until it has caught up with a leader, even when it
// is the only ISR member of a majority that is up; a clean ISR member
// leads instead, and the crashed one catches up and is cleared.
func TestUncleanRestartMayNotLead(t *testing.T) {
	ns, _ := failoverGroup(t)
	r1, r2, r3 := ns[0], ns[1], ns[2]
	leader := servingLeader(t, ns, 0, 60*time.Second)
	if leader != r1 {
		t.Fatalf("replica %d leads first; want 1", leader.id)
	}
	waitISR(t, r1, []int{1, 2, 3}, 60*time.Second)
	cl := client(t, r1.addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 3, nil, "unclean"); err != nil {
		t.Fatal(err)
	}
	if code := produceCode(t, cl, r1.id, "unclean", -1); code != 0 {
		t.Fatalf("produce: error %d", code)
	}
	for _, n := range ns {
		if _, err := os.Stat(markerPath(n)); !os.IsNotExist(err) {
			t.Fatalf("replica %d: marker present while running (%v)", n.id, err)
		}
	}

	// 3 leaves (cleanly) and the ISR shrinks to 1,2.
	r3.stop()
	waitISR(t, r1, []int{1, 2}, 60*time.Second)
	if _, err := os.Stat(markerPath(r3)); err != nil {
		t.Fatalf("replica 3 stopped cleanly without a marker: %v", err)
	}
	// 2 "crashes": its marker is gone as after a kill -9. Then 1 stops.
	r2.stop()
	if err := os.Remove(markerPath(r2)); err != nil {
		t.Fatalf("replica 2 stopped cleanly without a marker: %v", err)
	}
	r1.stop()

	// 2 and 3 are a majority, but 3 is outside the ISR and 2 restarted
	// uncleanly: nobody may lead.
	r2.start(t, &testLog{t: t, done: true})
	r3.start(t, &testLog{t: t, done: true})
	if !uncleanFlag(t, r2) {
		t.Fatal("replica 2 restarted without the marker but does not report an unclean restart")
	}
	if uncleanFlag(t, r3) {
		t.Fatal("replica 3 restarted cleanly but reports an unclean restart")
	}
	if _, err := os.Stat(markerPath(r3)); !os.IsNotExist(err) {
		t.Fatalf("replica 3's marker not removed at start (%v)", err)
	}
	// Several election timeouts (0.5-1 s each): without the rule replica
	// 2, the only ISR member up, would lead within about one.
	for i := 0; i < 60; i++ {
		for _, n := range []*node{r2, r3} {
			st := status(t, n)
			if raft, _ := st["raft"].(map[string]any); raft["serving"] == true {
				t.Fatalf("replica %d serves (2 restarted uncleanly, 3 is outside the ISR): %v", n.id, st)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The clean ISR member returns and leads; 2 catches up from it.
	r1.start(t, &testLog{t: t, done: true})
	if l := servingLeader(t, ns, 0, 60*time.Second); l != r1 {
		t.Fatalf("replica %d leads; want 1, the only clean ISR member", l.id)
	}
	deadline := time.Now().Add(60 * time.Second)
	for uncleanFlag(t, r2) {
		if time.Now().After(deadline) {
			t.Fatal("replica 2 still marked unclean after following the leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := produceCode(t, client(t, r1.addr(), kgo.RequiredAcks(kgo.AllISRAcks())), r1.id, "unclean", -1); code != 0 {
		t.Fatalf("produce after the restarts: error %d", code)
	}
}
