package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// CreatePartitions adds partitions to topics; only the leader can, so a
// follower forwards it.
func init() {
	register(apiDef[*kmsg.CreatePartitionsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, _ *conn, r *kmsg.CreatePartitionsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			if b.cl != nil {
				return nil, func(ctx context.Context) kmsg.Response { return b.cl.createPartitions(ctx, r) }
			}
			return b.handleCreatePartitions(r), nil
		},
		authorize: func(z *authz, r *kmsg.CreatePartitionsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perTopic(z, r, r.Topics, func(t kmsg.CreatePartitionsRequestTopic) string { return t.Topic }, opAlter, run)
		},
		forwardable: forwardAlways[*kmsg.CreatePartitionsRequest],
		onFollower:  refuseWith[*kmsg.CreatePartitionsRequest](errNotController),
	})
}
