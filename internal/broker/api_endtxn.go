package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// EndTxn commits or aborts a transaction (v5: transactions v2, the epoch
// is bumped every transaction).
func init() {
	register(apiDef[*kmsg.EndTxnRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, _ *conn, r *kmsg.EndTxnRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.txns.EndTxn(ctx, r) }
		},
		authorize: func(z *authz, r *kmsg.EndTxnRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			return whole(r, z.allowed(opWrite, resTxnID, r.TransactionalID), errTxnIDAuthorizationFailed)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.EndTxnRequest],
		coordinator: txnKey(func(r *kmsg.EndTxnRequest) string { return r.TransactionalID }),
	})
}
