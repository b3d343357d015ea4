package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DeleteGroups deletes empty groups and their committed offsets.
func init() {
	register(apiDef[*kmsg.DeleteGroupsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 2},
		serve: func(b *Broker, _ *conn, r *kmsg.DeleteGroupsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.DeleteGroups(r)
		},
		authorize: func(z *authz, r *kmsg.DeleteGroupsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perGroup(z, r, r.Groups, opDelete, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.DeleteGroupsRequest],
		coordinator: groupKeys(func(r *kmsg.DeleteGroupsRequest) []string { return r.Groups }),
	})
}
