package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// Heartbeat keeps a classic group member alive and tells it of a
// rebalance.
func init() {
	register(apiDef[*kmsg.HeartbeatRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, cn *conn, r *kmsg.HeartbeatRequest, req protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.Heartbeat(r), nil
		},
		authorize:   groupRead(func(r *kmsg.HeartbeatRequest) string { return r.Group }),
		onFollower:  notCoordinatorOnFollower[*kmsg.HeartbeatRequest],
		coordinator: groupKey(func(r *kmsg.HeartbeatRequest) string { return r.Group }),
	})
}
