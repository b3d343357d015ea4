package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// AddOffsetsToTxn adds a group's offsets partition to a transaction.
func init() {
	register(apiDef[*kmsg.AddOffsetsToTxnRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, _ *conn, r *kmsg.AddOffsetsToTxnRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.txns.AddOffsets(ctx, r) }
		},
		authorize: func(z *authz, r *kmsg.AddOffsetsToTxnRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if !z.allowed(opWrite, resTxnID, r.TransactionalID) {
				return denyAll(r, errTxnIDAuthorizationFailed), nil, true
			}
			return whole(r, z.allowed(opRead, resGroup, r.Group), errGroupAuthorizationFailed)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.AddOffsetsToTxnRequest],
		coordinator: txnKey(func(r *kmsg.AddOffsetsToTxnRequest) string { return r.TransactionalID }),
	})
}
