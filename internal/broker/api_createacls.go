package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
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

func (b *Broker) handleCreateAcls(ctx context.Context, r *kmsg.CreateACLsRequest, who string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	now := b.clock.Now()
	var recs []recordbatch.Record
	var created []auth.Binding
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(r.Creations))
	for i, c := range r.Creations {
		a := auth.Binding{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		if r.Version == 0 {
			a.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		if err := a.Validate(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
			continue
		}
		recs = append(recs, auth.ACLRecord(a, true, now))
		created = append(created, a)
	}
	if len(recs) == 0 {
		return resp
	}
	err := b.writeStateRecords(ctx, aclsTopic, recs)
	b.refreshACLs()
	for i := range resp.Results {
		if resp.Results[i].ErrorCode == 0 && err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = stateWriteError(err), kmsg.StringPtr(err.Error())
		}
	}
	if err == nil {
		for _, a := range created {
			b.log.Info("ACL created", "acl", a.String(), "by", who)
		}
	}
	return resp
}
