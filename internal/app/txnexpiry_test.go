package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalIdExpiration checks Kafka's
// transactional.id.expiration.ms with real clients: an id whose last
// transaction ended long ago is deleted (and stays deleted across a
// restart), an id with an open transaction is kept however old, and an
// expired id can be used again, with a new producer id. The check runs on
// the broker's own method with a "now" eight days ahead.
func TestTransactionalIdExpiration(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "tx", 2, nil)
	createTopic(t, in.Addr(), "open", 1, nil) // busy's open transaction must not hold tx's LSO

	idle := txnClient(t, in.Addr(), "idle")
	runTxn(t, idle, "first", 4, true)
	idle.Close()
	idle2 := txnClient(t, in.Addr(), "idle2")
	runTxn(t, idle2, "aborted", 2, false)
	idle2.Close()
	busy := txnClient(t, in.Addr(), "busy", kgo.TransactionTimeout(time.Minute))
	if err := busy.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := busy.ProduceSync(ctxT(t), &kgo.Record{Topic: "open", Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(client(t, in.Addr()))
	ids := func() []string {
		t.Helper()
		lt, err := adm.ListTransactions(ctxT(t), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := lt.TransactionalIDs()
		slices.Sort(out)
		return out
	}
	dt, err := adm.DescribeTransactions(ctxT(t), "idle")
	if err != nil {
		t.Fatal(err)
	}
	oldPID := dt["idle"].ProducerID

	ctx := ctxT(t)
	if n := in.Broker.ExpireTransactionalIDs(ctx, time.Now()); n != 0 {
		t.Fatalf("expired %d ids right away", n)
	}
	if n := in.Broker.ExpireTransactionalIDs(ctx, time.Now().Add(8*24*time.Hour)); n != 2 {
		t.Fatalf("eight days on: expired %d ids, want 2 (one committed, one aborted last)", n)
	}
	if got := ids(); !slices.Equal(got, []string{"busy"}) {
		t.Fatalf("transactional ids after the check: %v, want [busy]", got)
	}
	if e := in.Broker.Snapshot().Expired; e.TransactionalIDs != 2 {
		t.Fatalf("/stats expired %+v, want 2 transactional ids", e)
	}

	// The deletion is in __transaction_state: a restart keeps it.
	adm.Close()
	busy.Close()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in = startBroker(t, dir)
	adm = kadm.NewClient(client(t, in.Addr()))
	if got := ids(); !slices.Equal(got, []string{"busy"}) {
		t.Fatalf("transactional ids after a restart: %v, want [busy]", got)
	}

	// The expired id starts afresh, with a new producer id.
	again := txnClient(t, in.Addr(), "idle")
	runTxn(t, again, "second", 4, true)
	dt, err = adm.DescribeTransactions(ctxT(t), "idle")
	if err != nil {
		t.Fatal(err)
	}
	if d := dt["idle"]; d.ProducerID == oldPID || d.ProducerID < 0 {
		t.Fatalf("the reused id got producer id %d (before expiry: %d)", d.ProducerID, oldPID)
	}
	recs := consumeAll(t, in.Addr(), "tx", 8, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if len(recs) != 8 {
		t.Fatalf("read_committed sees %d records, want 8", len(recs))
	}
}
