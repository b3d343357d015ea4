package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/protocol"
)

// ListGroups lists groups. Admin clients ask every broker and merge the
// answers: groups are coordinated by the leader, so a follower has none.
func init() {
	register(apiDef[*kmsg.ListGroupsRequest]{
		versions: protocol.VersionRange{Min: 0, Max: 5},
		serve: func(b *Broker, _ *conn, r *kmsg.ListGroupsRequest, _ protocol.Request) (kmsg.Response, waitFunc) {
			return b.groups.ListGroups(r), nil
		},
		authorize: func(z *authz, r *kmsg.ListGroupsRequest, run runFunc) (kmsg.Response, waitFunc, bool) {
			if z.visible(opDescribe, resCluster, clusterResource) {
				return nil, nil, false
			}
			resp, wait := run(r)
			resp, wait = afterRun(resp, wait, func(resp kmsg.Response) kmsg.Response {
				if l, ok := resp.(*kmsg.ListGroupsResponse); ok {
					kept := l.Groups[:0]
					for _, g := range l.Groups {
						if z.visible(opDescribe, resGroup, g.Group) {
							kept = append(kept, g)
						}
					}
					l.Groups = kept
				}
				return resp
			})
			return resp, wait, true
		},
		onFollower: func(_ *Broker, r *kmsg.ListGroupsRequest) kmsg.Response { return r.ResponseKind() },
	})
}
