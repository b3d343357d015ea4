package replication_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// TestDiskFullLeaderHandsOff: the leader of a three-replica group sits on
// a 40 MiB volume that its peers do not share. Writing 56 MiB through it
// fills that volume: the leader hands leadership to a healthy member, as
// a follower it fetches positions only and leaves the ISR, and producers
// go on through the new leader: every record is acknowledged, none is
// lost. Deleting the records frees the full replica's disk through the
// leader's log start; it fetches again and rejoins the ISR by itself.
func TestDiskFullLeaderHandsOff(t *testing.T) {
	vol := testcluster.SmallVolume(t, 40<<20)
	ns, _ := failoverGroupWith(t, func(s *config.Server) {
		if s.Replication.ReplicaId == 1 {
			s.DataDir = filepath.Join(vol, "data")
		}
	})
	full := ns[0]
	leader := servingLeader(t, ns, 0, 30*time.Second)
	if leader != full {
		t.Fatalf("replica %d leads, want replica 1 (Role leader)", leader.id)
	}
	waitISRCommitted(t, leader)
	waitISR(t, leader, []int{1, 2, 3}, 30*time.Second)

	seeds := kgo.SeedBrokers(ns[0].addr(), ns[1].addr(), ns[2].addr())
	cl := client(t, ns[0].addr(), seeds, kgo.DefaultProduceTopic("big"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(16), kgo.RecordDeliveryTimeout(2*time.Minute))
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"segment.bytes": kadm.StringPtr("2097152")}, "big"); err != nil {
		t.Fatal(err)
	}
	const records = 900 // of 64 KiB: 56 MiB
	var mu sync.Mutex
	acked := map[string]bool{}
	var firstErr error
	var wg sync.WaitGroup
	for i := range records {
		v := make([]byte, 64<<10)
		rand.Read(v)
		copy(v, fmt.Sprintf("big-%06d-", i))
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Value: v}, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				acked[string(r.Value[:11])] = true
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("a produce failed with one replica's disk full (%d of %d acknowledged): %v", len(acked), records, firstErr)
	}
	d := full.in.Broker.Snapshot().Disk
	if !d.Full || d.FullEvents == 0 {
		t.Fatalf("replica 1's disk %+v: want full", d)
	}
	now := servingLeader(t, ns, 1, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for slices.Contains(raftISR(t, now), 1) {
		if time.Now().After(deadline) {
			t.Fatalf("replica 1, whose disk is full, is still in the ISR %v", raftISR(t, now))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica %d leads with ISR %v; replica 1's disk: %+v", now.id, raftISR(t, now), d)

	// Nothing acknowledged is lost: read everything from the new leader.
	rcl := client(t, now.addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"big": {0: kgo.NewOffset().AtStart()}}))
	seen := map[string]bool{}
	for len(seen) < len(acked) && ctx.Err() == nil {
		fs := rcl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value[:11])] = true })
	}
	for k := range acked {
		if !seen[k] {
			t.Fatalf("acknowledged record %s is missing", k)
		}
	}

	// Free space through the leader's log start: the full replica learns
	// it while fetching positions, deletes its segments below it, and
	// fetches again.
	ends, err := adm.ListEndOffsets(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("big", 0)
	upTo := kadm.Offsets{}
	upTo.Add(kadm.Offset{Topic: "big", Partition: 0, At: end.Offset})
	if del, err := adm.DeleteRecords(ctx, upTo); err != nil || del.Error() != nil {
		t.Fatalf("DeleteRecords: %v %v", err, del.Error())
	}
	waitISR(t, now, []int{1, 2, 3}, 60*time.Second)
	if d := full.in.Broker.Snapshot().Disk; d.Full {
		t.Fatalf("replica 1 is back in the ISR with its disk full: %+v", d)
	}
}
