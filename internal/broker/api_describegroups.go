package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeGroups describes classic groups and their members.
func init() {
	register(apiDef[*kmsg.DescribeGroupsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeGroupsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.DescribeGroups(r), nil
		},
		authorize: func(z *authz, r *kmsg.DescribeGroupsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perGroup(z, r, r.Groups, opDescribe, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.DescribeGroupsRequest],
		coordinator: groupKeys(func(r *kmsg.DescribeGroupsRequest) []string { return r.Groups }),
	})
}
