package broker

import (
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// Produce appends record batches to partitions this replica leads.
// Versions 0-2 carry message format v0/v1 and are refused per partition;
// v12 adds partitions to transactions implicitly.
func init() {
	register(apiDef[*kmsg.ProduceRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 12},
		serve: func(b *Broker, cn *conn, r *kmsg.ProduceRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			var sums *recordbatch.Sums
			if cn != nil {
				sums = &cn.sums
			}
			return b.handleProduce(r, sums)
		},
		authorize:  (*authz).produce,
		onFollower: produceOnFollower,
	})
}

// produce refuses the topics the principal may not write (and may not
// create, when they do not exist yet).
func (z *authz) produce(r *kmsg.ProduceRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
	if r.TransactionID != nil && !z.allowed(opWrite, resTxnID, *r.TransactionID) {
		if r.Acks == 0 {
			return acks0Failed, nil, true
		}
		return denyAll(r, errTxnIDAuthorizationFailed), nil, true
	}
	codes := make([]int16, len(r.Topics))
	denied := false
	for i, t := range r.Topics {
		codes[i] = z.topicCode(opWrite, t.Topic)
		if codes[i] == 0 && z.b.lookup(t.Topic) == nil && !z.mayCreate(t.Topic) {
			codes[i] = errUnknownTopicOrPartition
		}
		denied = denied || codes[i] != 0
	}
	if denied && r.Acks == 0 {
		// No answer to carry the error: close the connection, as for
		// any failed acks=0 produce.
		return acks0Failed, nil, true
	}
	resp, wait := splitRun(r, "Topics", "Topics", codes, run)
	return resp, wait, true
}

// produceOnFollower refuses a produce with NOT_LEADER_OR_FOLLOWER naming
// the leader (KIP-951), so the client goes there without a metadata
// round; acks=0 gets no answer at all, as for any acks=0 produce.
func produceOnFollower(b *Broker, q *kmsg.ProduceRequest) kmsg.Response {
	if q.Acks == 0 {
		return nil
	}
	r := b.repl
	resp := q.ResponseKind().(*kmsg.ProduceResponse)
	mirror(reflect.ValueOf(q).Elem(), reflect.ValueOf(resp).Elem(), errNotLeaderOrFollower)
	id := r.leaderID()
	var hints leaderHints
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			p.BaseOffset, p.LogAppendTime, p.LogStartOffset = -1, -1, -1
			h := b.leaderHintFor(resp.Topics[i].Topic, p.Partition, id)
			if h.leader >= 0 {
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = h.leader, h.epoch
				hints.add(h.leader)
			}
		}
	}
	resp.Brokers = hints.produceBrokers(b, q.Version)
	return resp
}
