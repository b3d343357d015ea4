package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// AlterUserScramCredentials creates and deletes SCRAM users; only the
// leader can, so a follower forwards it.
func init() {
	register(apiDef[*kmsg.AlterUserSCRAMCredentialsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 0},
		serve: func(b *Broker, cn *conn, r *kmsg.AlterUserSCRAMCredentialsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			who := cn.aclPrincipal()
			return nil, func(ctx context.Context) kmsg.Response { return b.handleAlterUserScramCredentials(ctx, r, who) }
		},
		authorize: func(z *authz, r *kmsg.AlterUserSCRAMCredentialsRequest, _ runFunc) (kmsg.Response, waitFunc, bool) {
			if z.allowed(opAlter, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
			seen := map[string]bool{}
			add := func(user string) {
				if !seen[user] {
					seen[user] = true
					res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
					res.User, res.ErrorCode = user, errClusterAuthorizationFailed
					resp.Results = append(resp.Results, res)
				}
			}
			for _, d := range r.Deletions {
				add(d.Name)
			}
			for _, u := range r.Upsertions {
				add(u.Name)
			}
			return resp, nil, true
		},
		forwardable: forwardAlways[*kmsg.AlterUserSCRAMCredentialsRequest],
		onFollower:  securityOnFollower[*kmsg.AlterUserSCRAMCredentialsRequest],
		forwardFail: securityFail[*kmsg.AlterUserSCRAMCredentialsRequest],
	})
}
