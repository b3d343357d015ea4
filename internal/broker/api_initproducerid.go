package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// InitProducerId hands out a producer id and epoch: for an idempotent
// producer from the leader's id block (a follower forwards it), for a
// transactional one from the transaction coordinator, which fences the
// id's earlier producer.
func init() {
	register(apiDef[*kmsg.InitProducerIDRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, _ *conn, r *kmsg.InitProducerIDRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			if r.TransactionalID != nil {
				return nil, func(ctx context.Context) kmsg.Response { return b.txns.InitProducerID(ctx, r) }
			}
			return nil, func(context.Context) kmsg.Response { return b.handleInitProducerID(r) }
		},
		authorize: (*authz).initProducerID,
		// A transactional one is a coordinator request.
		forwardable: func(_ *Broker, r *kmsg.InitProducerIDRequest) bool { return r.TransactionalID == nil },
		onFollower: func(b *Broker, r *kmsg.InitProducerIDRequest) kmsg.Response {
			if r.TransactionalID != nil {
				return b.notCoordinator(r)
			}
			return refuseWith[*kmsg.InitProducerIDRequest](errNotLeaderOrFollower)(b, r)
		},
		forwardFail: func(b *Broker, r *kmsg.InitProducerIDRequest, _ int16) kmsg.Response {
			return refuseWith[*kmsg.InitProducerIDRequest](errCoordinatorNotAvailable)(b, r)
		},
		coordinator: func(r *kmsg.InitProducerIDRequest) coordinatorKeys {
			if r.TransactionalID != nil {
				return coordinatorKeys{kind: txnCoordinator, keys: []string{*r.TransactionalID}}
			}
			return coordinatorKeys{kind: noCoordinator}
		},
	})
}

func (z *authz) initProducerID(r *kmsg.InitProducerIDRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
	if r.TransactionalID != nil {
		return whole(r, z.allowed(opWrite, resTxnID, *r.TransactionalID), errTxnIDAuthorizationFailed)
	}
	// An idempotent producer: IDEMPOTENT_WRITE on the cluster, or (Kafka
	// 3.0+) WRITE on any topic, where a topic no ACL names counts when
	// AllowEveryoneIfNoAclFound is on: Kafka asks about a made-up topic
	// name for that, so do we.
	ok := z.visible(opIdempotentWrite, resCluster, clusterResource) ||
		z.b.sec.authorizer.AllowsAny(z.principal, z.host, opWrite, resTopic) ||
		z.visible(opWrite, resTopic, "\x00no topic has this name")
	if !ok {
		z.cn.logDenied(z.api, opIdempotentWrite, resCluster, clusterResource)
	}
	return whole(r, ok, errClusterAuthorizationFailed)
}
