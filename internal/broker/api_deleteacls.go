package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// DeleteAcls removes the ACL bindings that match filters; only the leader
// can, so a follower forwards it.
func init() {
	register(apiDef[*kmsg.DeleteACLsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 3},
		serve: func(b *Broker, cn *conn, r *kmsg.DeleteACLsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			who := cn.aclPrincipal()
			return nil, func(ctx context.Context) kmsg.Response { return b.handleDeleteAcls(ctx, r, who) }
		},
		authorize: func(z *authz, r *kmsg.DeleteACLsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
			resp.Results = make([]kmsg.DeleteACLsResponseResult, len(r.Filters))
			for i := range resp.Results {
				resp.Results[i].ErrorCode = errClusterAuthorizationFailed
			}
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.DeleteACLsRequest],
		onFollower:  securityOnFollower[*kmsg.DeleteACLsRequest],
		forwardFail: securityFail[*kmsg.DeleteACLsRequest],
	})
}
