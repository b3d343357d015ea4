package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeAcls lists ACL bindings. A follower forwards it, and answers
// from its own copy when it cannot.
func init() {
	register(apiDef[*kmsg.DescribeACLsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeACLsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeAcls(r), nil
		},
		authorize:   clusterDescribe[*kmsg.DescribeACLsRequest],
		forwardable: forwardAlways[*kmsg.DescribeACLsRequest],
	})
}
