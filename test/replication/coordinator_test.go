package replication_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinatorRequests builds one request of every group and transaction
// coordinator API, each naming group g, transactional id tx and topic
// t partition 0.
func coordinatorRequests(g, tx, topic string) map[string]kmsg.Request {
	member := "m-1"
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = g, "consumer", 10000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}}}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = g, member, 1
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = g, member, 1
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.MemberID = g, member
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation, commit.MemberID = g, -1, ""
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = g
	fetch.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{0}}}
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: g, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{0}}}}}
	del := kmsg.NewPtrOffsetDeleteRequest()
	del.Group = g
	del.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	desc := kmsg.NewPtrDescribeGroupsRequest()
	desc.Groups = []string{g}
	delg := kmsg.NewPtrDeleteGroupsRequest()
	delg.Groups = []string{g}
	cghb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	cghb.Group, cghb.MemberID, cghb.MemberEpoch = g, "0123456789abcdefghijkl", 0
	cghb.RebalanceTimeoutMillis = 10000
	cghb.SubscribedTopicNames = []string{topic}
	cgd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cgd.Groups = []string{g}
	initTxn := kmsg.NewPtrInitProducerIDRequest()
	initTxn.TransactionalID, initTxn.TransactionTimeoutMillis = kmsg.StringPtr(tx), 10000
	addParts := kmsg.NewPtrAddPartitionsToTxnRequest()
	addParts.Version = 3
	addParts.TransactionalID, addParts.ProducerID, addParts.ProducerEpoch = tx, 1, 0
	addParts.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: topic, Partitions: []int32{0}}}
	addOffs := kmsg.NewPtrAddOffsetsToTxnRequest()
	addOffs.TransactionalID, addOffs.ProducerID, addOffs.Group = tx, 1, g
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.Commit = tx, 1, true
	txc := kmsg.NewPtrTxnOffsetCommitRequest()
	txc.TransactionalID, txc.Group, txc.ProducerID, txc.Generation = tx, g, 1, -1
	txc.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
	dtx := kmsg.NewPtrDescribeTransactionsRequest()
	dtx.TransactionalIDs = []string{tx}
	return map[string]kmsg.Request{
		"JoinGroup": join, "SyncGroup": sync, "Heartbeat": hb, "LeaveGroup": leave,
		"OffsetCommit": commit, "OffsetFetch": fetch, "OffsetDelete": del,
		"DescribeGroups": desc, "DeleteGroups": delg,
		"ConsumerGroupHeartbeat": cghb, "ConsumerGroupDescribe": cgd,
		"InitProducerId(transactional)": initTxn, "AddPartitionsToTxn": addParts,
		"AddOffsetsToTxn": addOffs, "EndTxn": end, "TxnOffsetCommit": txc,
		"DescribeTransactions": dtx,
	}
}

// errorCodes collects every error of a response, the way the clients read
// them: the top-level code and every per-group, per-topic, per-partition
// and per-transaction one.
func errorCodes(resp kmsg.Response) []error {
	var out []error
	add := func(c int16) { out = append(out, kerr.ErrorForCode(c)) }
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		add(r.ErrorCode)
	case *kmsg.SyncGroupResponse:
		add(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		add(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		add(r.ErrorCode)
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(p.ErrorCode)
			}
		}
	case *kmsg.OffsetFetchResponse:
		if r.Version >= 8 {
			for _, g := range r.Groups {
				add(g.ErrorCode)
			}
		} else {
			add(r.ErrorCode)
		}
	case *kmsg.OffsetDeleteResponse:
		add(r.ErrorCode)
	case *kmsg.DescribeGroupsResponse:
		for _, g := range r.Groups {
			add(g.ErrorCode)
		}
	case *kmsg.DeleteGroupsResponse:
		for _, g := range r.Groups {
			add(g.ErrorCode)
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		add(r.ErrorCode)
	case *kmsg.ConsumerGroupDescribeResponse:
		for _, g := range r.Groups {
			add(g.ErrorCode)
		}
	case *kmsg.InitProducerIDResponse:
		add(r.ErrorCode)
	case *kmsg.AddPartitionsToTxnResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(p.ErrorCode)
			}
		}
	case *kmsg.AddOffsetsToTxnResponse:
		add(r.ErrorCode)
	case *kmsg.EndTxnResponse:
		add(r.ErrorCode)
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(p.ErrorCode)
			}
		}
	case *kmsg.DescribeTransactionsResponse:
		for _, s := range r.TransactionStates {
			add(s.ErrorCode)
		}
	}
	return out
}

// TestFollowerAnswersCoordinatorRequestsNotCoordinator: every group and
// transaction coordinator request sent to a follower of a failover group
// (real processes' listeners over TCP, the client's own encoding and
// version choice) is answered NOT_COORDINATOR in every error field, which
// is what makes franz-go, the Java client and librdkafka look the
// coordinator up again; FindCoordinator on the follower names the leader;
// and clients bootstrapped with the follower alone commit offsets, run a
// KIP-848 group and commit a transaction. Followers used to answer
// NOT_LEADER_OR_FOLLOWER, on which clients retry the same broker or fail
// the commit.
func TestFollowerAnswersCoordinatorRequestsNotCoordinator(t *testing.T) {
	_, leader, follower := leaderAndFollower(t)
	ctx := context.Background()
	const topic = "coord"
	admin := client(t, leader.addr())
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	cl := client(t, follower.addr(), kgo.RetryTimeout(30*time.Second))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil { // learn the node ids
		t.Fatal(err)
	}
	for name, req := range coordinatorRequests("cg", "tx", topic) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cl.Broker(follower.id).Request(rctx, req)
		cancel()
		if err != nil {
			t.Fatalf("%s to the follower: %v", name, err)
		}
		codes := errorCodes(resp)
		if len(codes) == 0 {
			t.Fatalf("%s: the follower's answer has no error field set for the entry asked: %+v", name, resp)
		}
		for _, err := range codes {
			if !errors.Is(err, kerr.NotCoordinator) {
				t.Fatalf("%s: the follower answered %v, want NOT_COORDINATOR", name, err)
			}
		}
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey, fc.CoordinatorKeys = "cg", []string{"cg"}
	resp, err := fc.RequestWith(ctx, cl.Broker(follower.id))
	if err != nil {
		t.Fatal(err)
	}
	node := resp.NodeID
	if len(resp.Coordinators) > 0 {
		node = resp.Coordinators[0].NodeID
	}
	if int(node) != leader.id {
		t.Fatalf("FindCoordinator on follower %d named node %d, want the leader %d", follower.id, node, leader.id)
	}

	// Through the follower alone: a classic group's commit and fetch, a
	// KIP-848 member, and a transaction.
	prod := client(t, follower.addr(), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 7, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, "classic", offs); err != nil || r.Error() != nil {
		t.Fatalf("commit through the follower: %v %v", err, r.Error())
	}
	if got, err := adm.FetchOffsets(ctx, "classic"); err != nil || got.Error() != nil {
		t.Fatalf("fetch offsets through the follower: %v", err)
	} else if o, _ := got.Lookup(topic, 0); o.At != 7 {
		t.Fatalf("committed offset through the follower: %d, want 7", o.At)
	}
	cons := client(t, follower.addr(), kgo.ConsumerGroup("g848"), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	n := 0
	for n < 10 && cctx.Err() == nil {
		n += len(cons.PollFetches(cctx).Records())
	}
	cancel()
	if n < 10 {
		t.Fatalf("KIP-848 member bootstrapped with a follower consumed %d of 10 records", n)
	}
	txp := client(t, follower.addr(), kgo.TransactionalID("through-follower"), kgo.DefaultProduceTopic(topic))
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txp.ProduceSync(ctx, &kgo.Record{Value: []byte("txn")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("transaction through the follower: %v", err)
	}
}
