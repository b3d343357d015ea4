package cluster_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/diskhealth"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// stallGroup starts a group whose replicas read injected disk faults from
// a file each (diskhealth.FaultsFileEnv) and returns those files' paths by
// replica id.
func stallGroup(t *testing.T) (*testcluster.Cluster, map[int]string) {
	dir := t.TempDir()
	files := map[int]string{}
	for id := 1; id <= 3; id++ {
		files[id] = filepath.Join(dir, fmt.Sprintf("faults-%d", id))
	}
	c := testcluster.Start(t, testcluster.WithEnv(func(id int) []string {
		return []string{diskhealth.FaultsFileEnv + "=" + files[id]}
	}))
	return c, files
}

// TestStallingFollowerLeavesISR: a follower whose fsyncs take 3 s under
// acks=all load leaves the ISR after IsrLagSeconds and acknowledgements go
// on with the other two; once its disk is fast again it rejoins, and every
// acknowledged record is in place.
func TestStallingFollowerLeavesISR(t *testing.T) {
	skipShort(t)
	c, files := stallGroup(t)
	const topic = "stall-follower"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	load := startLoad(t, c.Client(kgo.RequiredAcks(kgo.AllISRAcks())), topic, 0, "v", 30*time.Second)
	load.waitMore(50, readWithin)

	f, other := c.Others(l)[0], c.Others(l)[1]
	if err := diskhealth.WriteFaults(files[f.ID], "stall 3s"); err != nil {
		t.Fatal(err)
	}
	c.WaitISR(isrWithin, l.ID, other.ID)
	load.waitMore(50, readWithin)

	if err := diskhealth.WriteFaults(files[f.ID]); err != nil {
		t.Fatal(err)
	}
	c.WaitISR(isrWithin, 1, 2, 3)
	load.waitMore(50, readWithin)
	acks := load.Stop()
	if now, _ := c.ServingLeader(); now != l {
		t.Errorf("a stalling follower moved the leadership from %v to %v", l, now)
	}
	end := listEnd(t, c.Admin(), topic, 0)
	waitCaughtUp(t, c, topic, 1, end)
	checkAcked(t, readPartition(t, c, topic, 0, end), acks)
}

// TestStallingLeaderHandsOff: a leader whose fsyncs take 3 s (over the
// 2 s FsyncStallMs) hands leadership to a healthy replica, producers go
// on through it, and no acknowledged record is lost.
func TestStallingLeaderHandsOff(t *testing.T) {
	skipShort(t)
	c, files := stallGroup(t)
	const topic = "stall-leader"
	l := c.WaitISR(isrWithin, 1, 2, 3)
	createTopic(t, c, topic, 1, nil)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(5*time.Second), kgo.RequestTimeoutOverhead(5*time.Second))
	load := startLoad(t, cl, topic, 0, "v", 60*time.Second)
	load.waitMore(50, readWithin)

	if err := diskhealth.WriteFaults(files[l.ID], "stall 3s"); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	l2 := c.Leader(electWithin, l)
	t.Logf("%v serves %v after %v's disk began to stall", l2, time.Since(stalled).Round(time.Millisecond), l)
	load.waitMore(50, readWithin)
	if err := diskhealth.WriteFaults(files[l.ID]); err != nil {
		t.Fatal(err)
	}
	c.WaitISR(isrWithin, 1, 2, 3)
	acks := load.Stop()
	end := listEnd(t, c.Admin(), topic, 0)
	waitCaughtUp(t, c, topic, 1, end)
	checkAcked(t, readPartition(t, c, topic, 0, end), acks)
	if log := l.Log(); !strings.Contains(log, "disk health: fsync stalled") || !strings.Contains(log, "this replica's disk is degraded") {
		t.Errorf("%v did not log the stall and the hand-off", l)
	}
}
