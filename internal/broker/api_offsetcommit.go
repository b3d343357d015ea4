package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// OffsetCommit commits a group's offsets (v9: the generation is a KIP-848
// member epoch for consumer groups).
func init() {
	register(apiDef[*kmsg.OffsetCommitRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 9},
		serve: func(b *Broker, _ *conn, r *kmsg.OffsetCommitRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.OffsetCommit(r)
		},
		authorize: func(z *authz, r *kmsg.OffsetCommitRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			if !z.allowed(opRead, resGroup, r.Group) {
				return denyAll(r, errGroupAuthorizationFailed), nil, true
			}
			return perTopic(z, r, r.Topics, func(t kmsg.OffsetCommitRequestTopic) string { return t.Topic }, opRead, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.OffsetCommitRequest],
		coordinator: groupKey(func(r *kmsg.OffsetCommitRequest) string { return r.Group }),
	})
}
