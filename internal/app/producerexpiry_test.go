package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProducerIdExpiration checks Kafka's producer.id.expiration.ms with
// real clients: a partition forgets an idle idempotent producer, the same
// client then goes on producing without an error (KIP-360) with every
// record stored exactly once, and a producer with an open transaction
// is kept until its transaction ends. The check runs on the broker's own
// method with a "now" a day ahead, instead of waiting a day.
func TestProducerIdExpiration(t *testing.T) {
	in := startBroker(t, "")
	createTopic(t, in.Addr(), "pe", 1, nil)
	createTopic(t, in.Addr(), "tx", 2, nil)
	adm := kadm.NewClient(client(t, in.Addr()))
	producers := func(topic string, parts ...int32) map[int64]kadm.DescribedProducer {
		t.Helper()
		set := kadm.TopicsSet{topic: {}}
		for _, p := range parts {
			set[topic][p] = struct{}{}
		}
		dp, err := adm.DescribeProducers(ctxT(t), set)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]kadm.DescribedProducer{}
		dp.EachProducer(func(p kadm.DescribedProducer) { out[p.ProducerID] = p })
		return out
	}

	prod := client(t, in.Addr(), kgo.DefaultProduceTopic("pe"))
	before := time.Now()
	produceNumbers(t, prod, 0, 50)
	ps := producers("pe", 0)
	if len(ps) != 1 {
		t.Fatalf("producers of pe after the first records: %v", ps)
	}
	for _, p := range ps {
		if p.LastTimestamp < before.UnixMilli() || p.LastTimestamp > time.Now().UnixMilli() {
			t.Fatalf("last timestamp %d outside the produce's time", p.LastTimestamp)
		}
	}

	// An open transaction on tx keeps its producer.
	tx := txnClient(t, in.Addr(), "expiry")
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctxT(t), &kgo.Record{Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	if n := in.Broker.ExpireProducers(time.Now()); n != 0 {
		t.Fatalf("expired %d producers right away", n)
	}
	if n := in.Broker.ExpireProducers(time.Now().Add(25 * time.Hour)); n != 1 {
		t.Fatalf("a day on: expired %d producers, want 1 (the idle idempotent one)", n)
	}
	if e := in.Broker.Snapshot().Expired; e.Producers != 1 {
		t.Fatalf("/stats expired %+v, want 1 producer", e)
	}
	if ps := producers("pe", 0); len(ps) != 0 {
		t.Fatalf("pe still lists producers: %v", ps)
	}
	if ps := producers("tx", 0); len(ps) != 1 {
		t.Fatalf("the producer of the open transaction was not kept: %v", ps)
	}

	// The forgotten producer goes on: its next batch continues a sequence
	// the partition no longer knows, which is accepted (KIP-360), so the
	// client keeps its identity and sees no error.
	var old kadm.DescribedProducer
	for _, p := range ps {
		old = p
	}
	produceNumbers(t, prod, 50, 100)
	ps = producers("pe", 0)
	if len(ps) != 1 {
		t.Fatalf("producers of pe after the reset: %v", ps)
	}
	for _, p := range ps {
		if p.ProducerID != old.ProducerID || p.ProducerEpoch != old.ProducerEpoch {
			t.Fatalf("producer %d/%d became %d/%d: the client had to reset", old.ProducerID, old.ProducerEpoch, p.ProducerID, p.ProducerEpoch)
		}
		if p.LastSequence != 99 {
			t.Fatalf("last sequence %d after 100 records, want 99", p.LastSequence)
		}
	}
	ends, err := adm.ListEndOffsets(ctxT(t), "pe")
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := ends.Lookup("pe", 0); e.Offset != 100 {
		t.Fatalf("pe ends at %d after 100 records", e.Offset)
	}
	recs := consumeAll(t, in.Addr(), "pe", 100)
	for i, r := range recs {
		if string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d is %q: lost or duplicated around the expiry", i, r.Value)
		}
	}

	// The kept transaction still commits.
	if err := tx.EndTransaction(ctxT(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, in.Addr(), "tx", 1, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if string(got[0].Value) != "open" {
		t.Fatalf("committed record %q", got[0].Value)
	}
}
