package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ConsumerGroupDescribe describes KIP-848 consumer groups.
func init() {
	register(apiDef[*kmsg.ConsumerGroupDescribeRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 1},
		serve: func(b *Broker, _ *conn, r *kmsg.ConsumerGroupDescribeRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.ConsumerGroupDescribe(r, b.groupTopics()), nil
		},
		authorize: func(z *authz, r *kmsg.ConsumerGroupDescribeRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			return perGroup(z, r, r.Groups, opDescribe, run)
		},
		onFollower:  notCoordinatorOnFollower[*kmsg.ConsumerGroupDescribeRequest],
		coordinator: groupKeys(func(r *kmsg.ConsumerGroupDescribeRequest) []string { return r.Groups }),
	})
}
