package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// CreateAcls adds ACL bindings; only the leader can, so a follower
// forwards it.
func init() {
	register(apiDef[*kmsg.CreateACLsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, cn *conn, r *kmsg.CreateACLsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			who := cn.aclPrincipal()
			return nil, func(ctx context.Context) kmsg.Response { return b.handleCreateAcls(ctx, r, who) }
		},
		authorize: func(z *authz, r *kmsg.CreateACLsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
			resp.Results = make([]kmsg.CreateACLsResponseResult, len(r.Creations))
			for i := range resp.Results {
				resp.Results[i].ErrorCode = errClusterAuthorizationFailed
			}
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.CreateACLsRequest],
		onFollower:  securityOnFollower[*kmsg.CreateACLsRequest],
		forwardFail: securityFail[*kmsg.CreateACLsRequest],
	})
}
