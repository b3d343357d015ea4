package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeUserScramCredentials lists SCRAM users' mechanisms. A follower
// forwards it, and answers from its own copy when it cannot.
func init() {
	register(apiDef[*kmsg.DescribeUserSCRAMCredentialsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeUserSCRAMCredentialsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeUserScramCredentials(r), nil
		},
		authorize:   clusterDescribe[*kmsg.DescribeUserSCRAMCredentialsRequest],
		forwardable: forwardAlways[*kmsg.DescribeUserSCRAMCredentialsRequest],
	})
}
