package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
)

// TestAcksStartTheirOwnFlush: a produce's appends and a transaction's
// decision only mark their partitions for the group-commit pass, and the
// request's last step starts it. With the flusher's idle pass an hour
// away, a produce over eight partitions and a committed transaction over
// them must still be acknowledged: a path that forgot to start its pass
// hangs here until the deadline instead of costing an unseen 50 ms per
// request.
func TestAcksStartTheirOwnFlush(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.AdvertisedAddress = ln.Addr().String()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, func(b *Broker) { b.flushIdle = time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := b.Serve(ln)
	t.Cleanup(func() { s.Close() })
	addr := ln.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic, partitions = "groupcommit", 8
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	records := func(tag string) []*kgo.Record {
		rs := make([]*kgo.Record, partitions)
		for i := range rs {
			rs[i] = &kgo.Record{Topic: topic, Partition: int32(i), Value: []byte(tag)}
		}
		return rs
	}

	// One produce request over every partition, sent as it is: the
	// broker answers REQUEST_TIMED_OUT at its timeout if no pass came (a
	// client would retry it for ever).
	req := plainProduce(t, topic, partitions, -1, "plain")
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("acks=all produce over %d partitions: partition %d: %v", partitions, rp.Partition, err)
			}
		}
	}

	// A commit the broker never acknowledges fails at ctx's deadline.
	tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("groupcommit-tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for i := 0; i < 3; i++ {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, records("tx")...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: produce: %v", i, err)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("transaction %d: commit: %v", i, err)
		}
	}

	// Everything committed is readable: the high watermarks moved.
	offsets, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	offsets.Each(func(o kadm.ListedOffset) {
		// One plain record, then three transactions of a record and a
		// commit marker each.
		if o.Err != nil || o.Offset != 7 {
			t.Errorf("partition %d: end offset %d (%v), want 7", o.Partition, o.Offset, o.Err)
		}
	})
}
