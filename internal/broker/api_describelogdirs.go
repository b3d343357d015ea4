package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DescribeLogDirs describes the one log directory, <DataDir>/topics.
// Each replica describes its own copy.
func init() {
	register(apiDef[*kmsg.DescribeLogDirsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 4},
		serve: func(b *Broker, _ *conn, r *kmsg.DescribeLogDirsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.handleDescribeLogDirs(r), nil
		},
		authorize: func(z *authz, r *kmsg.DescribeLogDirsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opDescribe, resCluster, clusterResource) {
				return nil, nil, false
			}
			// Kafka: the error from v3, an empty answer before.
			resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
			resp.ErrorCode = errClusterAuthorizationFailed
			return resp, nil, true
		},
	})
}
