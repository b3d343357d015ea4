package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// CreateTopics creates topics; only the leader can, so a follower
// forwards it.
func init() {
	register(apiDef[*kmsg.CreateTopicsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 7},
		serve: func(b *Broker, _ *conn, r *kmsg.CreateTopicsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			if b.cl != nil {
				return nil, func(ctx context.Context) kmsg.Response { return b.cl.createTopics(ctx, r) }
			}
			return b.handleCreateTopics(r), nil
		},
		authorize: func(z *authz, r *kmsg.CreateTopicsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			codes := make([]int16, len(r.Topics))
			for i, t := range r.Topics {
				if !z.mayCreate(t.Topic) {
					codes[i] = errTopicAuthorizationFailed
				}
			}
			resp, wait := splitRun(r, "Topics", "Topics", codes, run)
			return resp, wait, true
		},
		forwardable: forwardAlways[*kmsg.CreateTopicsRequest],
		onFollower:  refuseWith[*kmsg.CreateTopicsRequest](errNotController),
	})
}
