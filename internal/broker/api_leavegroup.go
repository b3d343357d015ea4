package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// LeaveGroup takes members out of a classic group.
func init() {
	register(apiDef[*kmsg.LeaveGroupRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, cn *conn, r *kmsg.LeaveGroupRequest, req protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.LeaveGroup(r), nil
		},
		authorize:   groupRead(func(r *kmsg.LeaveGroupRequest) string { return r.Group }),
		onFollower:  notCoordinatorOnFollower[*kmsg.LeaveGroupRequest],
		coordinator: groupKey(func(r *kmsg.LeaveGroupRequest) string { return r.Group }),
	})
}
