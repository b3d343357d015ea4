package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeTransactions describes transactional ids' state.
func init() {
	register(apiDef[*kmsg.DescribeTransactionsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeTransactionsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.txns.DescribeTransactions(r), nil
		},
		authorize:  (*authz).describeTransactions,
		onFollower: notCoordinatorOnFollower[*kmsg.DescribeTransactionsRequest],
		coordinator: func(r *kmsg.DescribeTransactionsRequest) coordinatorKeys {
			return coordinatorKeys{kind: txnCoordinator, keys: r.TransactionalIDs, field: "TransactionalIDs", respField: "TransactionStates"}
		},
	})
}

func (z *authz) describeTransactions(r *kmsg.DescribeTransactionsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
	var kept []string
	var denied []kmsg.DescribeTransactionsResponseTransactionState
	for _, id := range r.TransactionalIDs {
		if z.allowed(opDescribe, resTxnID, id) {
			kept = append(kept, id)
			continue
		}
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ErrorCode = id, errTxnIDAuthorizationFailed
		denied = append(denied, st)
	}
	if len(denied) == 0 {
		return nil, nil, false
	}
	filtered := *r
	filtered.TransactionalIDs = append([]string{}, kept...)
	resp, wait := run(&filtered)
	resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
		if d, ok := resp.(*kmsg.DescribeTransactionsResponse); ok {
			d.TransactionStates = append(d.TransactionStates, denied...)
		}
		return resp
	})
	return resp, wait, true
}
