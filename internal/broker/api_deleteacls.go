package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/auth"
	"github.com/moonmq/moonmq/internal/protocol"
	"github.com/moonmq/moonmq/internal/recordbatch"
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

func (b *Broker) handleDeleteAcls(ctx context.Context, r *kmsg.DeleteACLsRequest, who string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	b.refreshACLs()
	now := b.clock.Now()
	var recs []recordbatch.Record
	deleted := map[auth.Binding]bool{}
	for _, rf := range r.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		f, err := aclFilter(r.Version, rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errInvalidRequest, kmsg.StringPtr(err.Error())
			resp.Results = append(resp.Results, res)
			continue
		}
		for _, a := range b.sec.acls.Matching(f) {
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
			m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
			res.MatchingACLs = append(res.MatchingACLs, m)
			if !deleted[a] {
				deleted[a] = true
				recs = append(recs, auth.ACLRecord(a, false, now))
			}
		}
		resp.Results = append(resp.Results, res)
	}
	if len(recs) == 0 {
		return resp
	}
	if err := b.writeStateRecords(ctx, aclsTopic, recs); err != nil {
		b.refreshACLs()
		for i := range resp.Results {
			if resp.Results[i].ErrorCode == 0 {
				resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = stateWriteError(err), kmsg.StringPtr(err.Error())
				resp.Results[i].MatchingACLs = nil
			}
		}
		return resp
	}
	b.refreshACLs()
	for a := range deleted {
		b.log.Info("ACL deleted", "acl", a.String(), "by", who)
	}
	return resp
}
