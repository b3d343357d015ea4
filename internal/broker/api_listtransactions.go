package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ListTransactions lists transactional ids. Admin clients ask every
// broker and merge the answers: transactions are coordinated by the
// leader, so a follower has none.
func init() {
	register(apiDef[*kmsg.ListTransactionsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 1},
		serve: func(b *Broker, _ *conn, r *kmsg.ListTransactionsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.txns.ListTransactions(r), nil
		},
		authorize: func(z *authz, r *kmsg.ListTransactionsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			resp, wait := run(r)
			resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
				if l, ok := resp.(*kmsg.ListTransactionsResponse); ok {
					kept := l.TransactionStates[:0]
					for _, st := range l.TransactionStates {
						if z.visible(opDescribe, resTxnID, st.TransactionalID) {
							kept = append(kept, st)
						}
					}
					l.TransactionStates = kept
				}
				return resp
			})
			return resp, wait, true
		},
		onFollower: func(_ *Broker, r *kmsg.ListTransactionsRequest) kmsg.Response { return r.ResponseKind() },
	})
}
