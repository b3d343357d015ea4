package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// TxnOffsetCommit commits a group's offsets inside a transaction
// (v5: adds the group implicitly).
func init() {
	register(apiDef[*kmsg.TxnOffsetCommitRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, _ *conn, r *kmsg.TxnOffsetCommitRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.txnOffsetCommit(ctx, r) }
		},
		authorize: func(z *authz, r *kmsg.TxnOffsetCommitRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
				return denyAll(r, errTxnIDAuthorizationFailed), nil, true
			}
			if !z.allowed(opRead, resGroup, r.Group) {
				return denyAll(r, errGroupAuthorizationFailed), nil, true
			}
			return perTopic(z, r, r.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) string { return t.Topic }, opRead, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.TxnOffsetCommitRequest],
		coordinator: groupKey(func(r *kmsg.TxnOffsetCommitRequest) string { return r.Group }),
	})
}
