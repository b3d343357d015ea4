package broker

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/config"
)

// TestMirrorNamesDifferInRequestAndResponse: a follower's refusal must list
// every entry the request named, also where the request's list has another
// name than the response's (an empty list looks like success to clients).
func TestMirrorNamesDifferInRequestAndResponse(t *testing.T) {
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version = 4
	dt.TopicNames = []string{"a", "b"}
	dtr := dt.ResponseKind().(*kmsg.DeleteTopicsResponse)
	mirror(reflect.ValueOf(dt).Elem(), reflect.ValueOf(dtr).Elem(), errNotController)
	if len(dtr.Topics) != 2 || *dtr.Topics[1].Topic != "b" || dtr.Topics[1].ErrorCode != errNotController {
		t.Fatalf("DeleteTopics v4 refusal: %+v", dtr.Topics)
	}

	tx := kmsg.NewPtrDescribeTransactionsRequest()
	tx.TransactionalIDs = []string{"t1"}
	txr := tx.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	mirror(reflect.ValueOf(tx).Elem(), reflect.ValueOf(txr).Elem(), errNotLeaderOrFollower)
	if len(txr.TransactionStates) != 1 || txr.TransactionStates[0].TransactionalID != "t1" || txr.TransactionStates[0].ErrorCode != errNotLeaderOrFollower {
		t.Fatalf("DescribeTransactions refusal: %+v", txr.TransactionStates)
	}
}

// TestReady: /health/ready is true for a single node and a serving leader,
// and for a follower only while the leader counts it in the ISR.
func TestReady(t *testing.T) {
	if !(&Broker{}).Ready() {
		t.Fatal("a single node is not ready")
	}
	cfg := config.Default()
	cfg.Replication = &config.Replication{Enabled: true, ReplicaId: 2, Role: "follower", ClientAddress: "127.0.0.1:9093",
		Peers: []config.Peer{{Id: 1, Address: "127.0.0.1:9195", ClientAddress: "127.0.0.1:9092"}}}
	b := &Broker{cfg: cfg, nodeID: 2}
	b.repl = newReplica(b)
	b.repl.mu.Lock()
	b.repl.isr = []int32{1}
	b.repl.mu.Unlock()
	if b.Ready() {
		t.Fatal("a follower outside the ISR is ready")
	}
	b.repl.mu.Lock()
	b.repl.isr = []int32{1, 2}
	b.repl.mu.Unlock()
	if !b.Ready() {
		t.Fatal("a follower in the ISR is not ready")
	}
	b.repl.lead.Store(true)
	if !b.Ready() {
		t.Fatal("a serving leader is not ready")
	}
}
