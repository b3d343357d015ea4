package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// JoinGroup joins a classic consumer group; the answer waits for the
// rebalance.
func init() {
	register(apiDef[*kmsg.JoinGroupRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 9},
		serve: func(b *Broker, cn *conn, r *kmsg.JoinGroupRequest, req protocol.Request) (kmsg.Response, waitFunc) {
			clientID, host := "", cn.host()
			if req.ClientID != nil {
				clientID = *req.ClientID
			}
			return nil, func(ctx context.Context) kmsg.Response { return b.groups.JoinGroup(ctx, r, clientID, host) }
		},
		authorize:   groupRead(func(r *kmsg.JoinGroupRequest) string { return r.Group }),
		onFollower:  notCoordinatorOnFollower[*kmsg.JoinGroupRequest],
		coordinator: groupKey(func(r *kmsg.JoinGroupRequest) string { return r.Group }),
	})
}
