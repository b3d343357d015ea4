package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// AddPartitionsToTxn adds partitions to a producer's open transaction
// (v4+ is transactions v2, which adds them implicitly with Produce v12).
func init() {
	register(apiDef[*kmsg.AddPartitionsToTxnRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, _ *conn, r *kmsg.AddPartitionsToTxnRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.txns.AddPartitions(ctx, r) }
		},
		authorize:  (*authz).addPartitionsToTxn,
		onFollower: notCoordinatorOnFollower[*kmsg.AddPartitionsToTxnRequest],
		coordinator: func(r *kmsg.AddPartitionsToTxnRequest) coordinatorKeys {
			if r.Version < 4 {
				return coordinatorKeys{kind: txnCoordinator, keys: []string{r.TransactionalID}}
			}
			ck := coordinatorKeys{kind: txnCoordinator, field: "Transactions", respField: "Transactions"}
			for _, t := range r.Transactions {
				ck.keys = append(ck.keys, t.TransactionalID)
			}
			return ck
		},
	})
}

func (z *authz) addPartitionsToTxn(r *kmsg.AddPartitionsToTxnRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
	if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
		return denyAll(r, errTxnIDAuthorizationFailed), nil, true
	}
	// All or nothing, as in Kafka: the allowed topics are not added
	// either.
	denied := false
	codes := make([]int16, len(r.Topics))
	for i, t := range r.Topics {
		codes[i] = z.topicCode(opWrite, t.Topic)
		denied = denied || codes[i] != 0
	}
	if !denied {
		return nil, nil, false
	}
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for i, t := range r.Topics {
		code := codes[i]
		if code == 0 {
			code = errOperationNotAttempted
		}
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil, true
}
