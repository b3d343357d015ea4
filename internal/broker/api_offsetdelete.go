package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// OffsetDelete deletes an empty group's committed offsets for
// partitions.
func init() {
	register(apiDef[*kmsg.OffsetDeleteRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.OffsetDeleteRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.OffsetDelete(r)
		},
		authorize: func(z *authz, r *kmsg.OffsetDeleteRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			if !z.allowed(opDelete, resGroup, r.Group) {
				return denyAll(r, errGroupAuthorizationFailed), nil, true
			}
			return perTopic(z, r, r.Topics, func(t kmsg.OffsetDeleteRequestTopic) string { return t.Topic }, opRead, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.OffsetDeleteRequest],
		coordinator: groupKey(func(r *kmsg.OffsetDeleteRequest) string { return r.Group }),
	})
}
