package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// SyncGroup hands out a classic group's assignment; followers wait for
// the leader's.
func init() {
	register(apiDef[*kmsg.SyncGroupRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, cn *conn, r *kmsg.SyncGroupRequest, req protocol.Request) (kmsg.Response, waitFunc) {
			return nil, func(ctx context.Context) kmsg.Response { return b.groups.SyncGroup(ctx, r) }
		},
		authorize:   groupRead(func(r *kmsg.SyncGroupRequest) string { return r.Group }),
		onFollower:  notCoordinatorOnFollower[*kmsg.SyncGroupRequest],
		coordinator: groupKey(func(r *kmsg.SyncGroupRequest) string { return r.Group }),
	})
}
